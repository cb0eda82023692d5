"""Build migrator/data/torch_npu/<release>.toml from Ascend's published API support lists.

    python tools/build_torch_npu_tables.py --repo PATH/TO/Ascend-pytorch-clone

Ascend publishes, in the Ascend/pytorch repository, one list per PyTorch release of which
native torch APIs torch_npu supports on each Ascend product, with restrictions. This script
reads those lists (Markdown, at the commits named in SOURCES) from a local clone, keeps two
kinds of entries and joins them with the notes we wrote (tools/torch_npu_notes.toml):

- unsupported: not supported on the Atlas A2 and A3 training products (the products that
  run training); the advice is ours, a default sentence where we wrote none;
- supported-with-note: supported, with a restriction other than a data-type list, and a note
  of ours for that API. Data-type lists (most restrictions) and restrictions about other
  products are left out: see docs/rules-preflight.md.

The output is deterministic: running it again on the same commits writes the same files.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import re
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE.parent / "migrator" / "data" / "torch_npu"
REPOSITORY = "https://github.com/Ascend/pytorch"
TRAINING_PRODUCTS = ("Atlas A2 训练系列产品", "Atlas A3 训练系列产品")


@dataclass(frozen=True)
class SourceList:
    """Where one release line's list lives in the Ascend/pytorch repository."""

    release: str
    branch: str
    commit: str
    folder: str
    layout: str  # "cards" (one section per API) or "tables" (one row per API)


SOURCES = (
    SourceList(
        "2.6.0",
        "v2.7.1-26.0.0",
        "89d88d4560c996734712e9b5585c7745f21875d2",
        "docs/zh/native_apis/pytorch_2-6-0",
        "tables",
    ),
    SourceList(
        "2.8.0",
        "v2.7.1-26.0.0",
        "89d88d4560c996734712e9b5585c7745f21875d2",
        "docs/zh/native_apis/pytorch_2-8-0",
        "tables",
    ),
    *(
        SourceList(
            release,
            "v2.7.1-26.1.0",
            "928743e649ee25c8da47670791b2f7fee34fd3b0",
            f"docs/zh/native_apis/pytorch_{release.replace('.', '-')}",
            "cards",
        )
        for release in ("2.7.1", "2.9.0", "2.10.0", "2.11.0", "2.12.0")
    ),
)


@dataclass
class Listed:
    """One API as a source list gives it."""

    name: str
    supported: bool
    restriction: str = ""
    npu_name: str | None = None


# -- reading the lists ---------------------------------------------------------------------------

HEADING = re.compile(r"^### (?:<code><i>\w+</i></code> )?(torch[\w.]*)")
MEMBER = re.compile(r'^> <font size="3">(\w+)(?:\(\))?</font>')
PRODUCT_ROW = re.compile(r"^\| <term>(.*?)</term> \| (✔|✘) \|")
RESTRICTION = "**限制与说明**"
NPU_NAME = "**NPU 形式名称**"
YES_NO = {"是": True, "否": False}
FULL_COLON = "\uff1a"  # the lists write Chinese punctuation


def git(repo: Path, *args: str) -> str:
    result = subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise SystemExit(f"git {' '.join(args)} failed: {result.stderr.strip()}")
    return result.stdout


def list_files(repo: Path, source: SourceList) -> list[str]:
    names = git(repo, "ls-tree", "--name-only", source.commit, source.folder + "/").split()
    return sorted(name for name in names if name.endswith(".md"))


def read_cards(text: str) -> Iterator[Listed]:
    """``### torch.nn.GRU`` sections (members as ``> <font ...>name()</font>``), each with a
    table of products (✔ / ✘) and an optional restriction line."""
    current: Listed | None = None
    products: dict[str, bool] = {}
    parent = ""

    def finish() -> Iterator[Listed]:
        if current is not None and products:
            current.supported = any(products.get(p, False) for p in TRAINING_PRODUCTS)
            yield current

    for line in text.splitlines():
        heading, member = HEADING.match(line), MEMBER.match(line)
        if heading or member:
            yield from finish()
            if heading:
                parent = heading.group(1)
                name = parent
            else:
                assert member is not None
                name = f"{parent}.{member.group(1)}"
            current, products = Listed(name, supported=True), {}
        elif current is not None:
            row = PRODUCT_ROW.match(line)
            if row:
                products[row.group(1)] = row.group(2) == "✔"
            elif line.startswith(RESTRICTION):
                current.restriction = line.split(FULL_COLON, 1)[-1].strip()
            elif line.startswith(NPU_NAME):
                current.npu_name = line.split(FULL_COLON, 1)[-1].strip() or None
    yield from finish()


def read_tables(text: str) -> Iterator[Listed]:
    """``|API名称|[NPU形式名称|]是否支持|限制与说明|`` rows."""
    for line in text.splitlines():
        if not line.startswith("|") or line.startswith(("|--", "|API")):
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        flags = [i for i, cell in enumerate(cells) if cell in YES_NO]
        if not flags:
            continue
        flag = flags[0]
        name = cells[0]
        if name.startswith("Tensor."):
            name = "torch." + name
        if not name.startswith("torch"):
            continue
        npu_name = cells[1] if flag == 2 and cells[1] not in ("", "-") else None
        restriction = "|".join(cells[flag + 1 :]).strip()
        yield Listed(name, YES_NO[cells[flag]], "" if restriction == "-" else restriction, npu_name)


def read_source(repo: Path, source: SourceList) -> dict[str, Listed]:
    reader = read_cards if source.layout == "cards" else read_tables
    found: dict[str, Listed] = {}
    for path in list_files(repo, source):
        for listed in reader(git(repo, "show", f"{source.commit}:{path}")):
            if re.fullmatch(r"torch(\.\w+)+", listed.name):
                found.setdefault(listed.name, listed)  # the first listing of a name wins
    return found


# -- classifying restrictions --------------------------------------------------------------------

# "`input` only fp16, fp32" / "bf16, int64" (in Chinese, with full-width commas): a parameter
# name, then ASCII dtype names only.
DTYPE_ONLY = re.compile(r"^(`?[A-Za-z_]+`?)?仅?支持(?:[a-z]+\d*(?:[\uff0c,\u3001 ]+|$))+$")
OTHER_PRODUCTS = ("950DT", "Atlas 训练系列产品", "推理系列产品")


def behavioural(restriction: str) -> bool:
    """Whether a restriction says more than which data types the API takes (on the training
    products): only those become notes."""
    parts = [part.strip() for part in re.split(r"<br>", restriction) if part.strip()]
    return any(
        not DTYPE_ONLY.match(part) and not any(product in part for product in OTHER_PRODUCTS)
        for part in parts
    )


# -- our notes -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Notes:
    default_unsupported: str
    behaviour: list[tuple[str, list[str]]]
    unsupported: list[tuple[str, list[str]]]

    @classmethod
    def load(cls, path: Path) -> Notes:
        with path.open("rb") as stream:
            data = tomllib.load(stream)

        def groups(kind: str) -> list[tuple[str, list[str]]]:
            return [(group["text"], group["apis"]) for group in data.get(kind, {}).values()]

        return cls(data["defaults"]["unsupported"], groups("behaviour"), groups("unsupported"))

    @staticmethod
    def find(groups: list[tuple[str, list[str]]], name: str) -> str | None:
        for text, patterns in groups:
            if any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns):
                return text
        return None


def entries(listed: dict[str, Listed], notes: Notes) -> tuple[dict[str, dict[str, str]], int]:
    """The table's entries, and how many behavioural restrictions had no note of ours."""
    table: dict[str, dict[str, str]] = {}
    without_note = 0
    for name in sorted(listed):
        api = listed[name]
        if not api.supported:
            note = Notes.find(notes.unsupported, name) or notes.default_unsupported
            table[name] = {"status": "unsupported", "note": note}
        elif api.restriction and behavioural(api.restriction):
            note = Notes.find(notes.behaviour, name)
            if note is None:
                without_note += 1
                continue
            entry = {"status": "supported-with-note", "note": note}
            if api.npu_name and api.npu_name != name:
                entry["npu-name"] = api.npu_name
            table[name] = entry
    return table, without_note


# -- writing -------------------------------------------------------------------------------------


def toml_string(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)  # a JSON string is a TOML basic string


def render(source: SourceList, table: dict[str, dict[str, str]], listed: int, skipped: int) -> str:
    unsupported = sum(1 for entry in table.values() if entry["status"] == "unsupported")
    notes = len(table) - unsupported
    lines = [
        f"# torch_npu {source.release}: native torch APIs that Ascend's API support list marks as",
        "# unsupported on Atlas A2 / A3 training products, or as supported with a restriction.",
        "# Generated by tools/build_torch_npu_tables.py; the notes are npu-migrate's own",
        "# (tools/torch_npu_notes.toml). Do not edit by hand: edit the notes and regenerate.",
        f"# APIs in the source list: {listed}; unsupported: {unsupported};",
        f"# behaviour restrictions with a note here: {notes}; without one (left out): {skipped}.",
        "",
        "[source]",
        f"release = {toml_string(source.release)}",
        f"repository = {toml_string(REPOSITORY)}",
        f"branch = {toml_string(source.branch)}",
        f"commit = {toml_string(source.commit)}",
        f"path = {toml_string(source.folder)}",
        f"url = {toml_string(f'{REPOSITORY}/tree/{source.commit}/{source.folder}')}",
        "",
    ]
    for name, entry in table.items():
        lines.append(f"[api.{toml_string(name)}]")
        lines.extend(f"{key} = {toml_string(value)}" for key, value in entry.items())
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", type=Path, required=True, help="a clone of Ascend/pytorch")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--notes", type=Path, default=HERE / "torch_npu_notes.toml")
    args = parser.parse_args(argv)
    notes = Notes.load(args.notes)
    args.out.mkdir(parents=True, exist_ok=True)
    for source in SOURCES:
        listed = read_source(args.repo, source)
        table, skipped = entries(listed, notes)
        path = args.out / f"{source.release}.toml"
        path.write_text(render(source, table, len(listed), skipped), encoding="utf-8")
        print(f"{path}: {len(table)} entries ({skipped} restrictions without a note)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
