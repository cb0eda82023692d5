"""Fuzzing the migrator: generated programs, and trigger patterns spliced into real files.

Properties, for every input: the engine never raises; an output it writes parses and a second
run changes nothing; a file it does not change comes back byte-identical. For spliced inputs
also: every spliced site is rewritten or reported (a migration tool must not silently skip what
it is about).

The default run is small enough for the suite; ``NPU_MIGRATE_FUZZ_EXAMPLES=2000`` (for
example) runs a long fuzzing session with the same properties.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import random
from pathlib import Path

import hypothesis.strategies as st
import hypothesmith
import pytest
from hypothesis import HealthCheck, given, settings

from migrator.engine import Engine
from migrator.registry import all_rules
from migrator.results import Status
from migrator.settings import Settings, Target

EXAMPLES = int(os.environ.get("NPU_MIGRATE_FUZZ_EXAMPLES", "25"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize="NPU_MIGRATE_FUZZ_EXAMPLES" not in os.environ,  # the suite is repeatable
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
ENGINES = {
    target: Engine(all_rules(), Settings(target=target, unsafe_fixes=True)) for target in Target
}


def check_properties(engine: Engine, source: bytes, path: str = "fuzzed.py") -> object:
    result = engine.migrate(source, path)
    if result.status is Status.CHANGED:
        ast.parse(result.migrated)
        again = engine.migrate(result.migrated, path)
        assert again.status is Status.UNCHANGED, again.diagnostics
        assert again.migrated == result.migrated
    else:
        assert result.migrated == source
    return result


@FUZZ
@given(source=hypothesmith.from_grammar(), target=st.sampled_from(list(Target)))
def test_generated_programs(source: str, target: Target) -> None:
    check_properties(ENGINES[target], source.encode())


@FUZZ
@given(source=hypothesmith.from_node(), target=st.sampled_from(list(Target)))
def test_generated_syntax_trees(source: str, target: Target) -> None:
    check_properties(ENGINES[target], source.encode())


# -- splicing trigger patterns into real files -------------------------------------------------

# Each snippet is self-contained (it imports what it uses) and is about at least one rule.
SNIPPETS = [
    "import torch\n_x = torch.ones(2).cuda()\n",
    "import torch\n_o = torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=0.1)\n",
    "import torch.distributed as _dist\n_dist.init_process_group('nccl')\n",
    "from apex.normalization import FusedLayerNorm\n_ln = FusedLayerNorm(8)\n",
    "from apex import amp\n_m, _o = amp.initialize(_m0, _o0, opt_level='O1')\n",
    "import torch\n_d = torch.device('cuda:0')\n",
    "import torch\ntorch.cuda.synchronize()\n",
    "import torch\n_device = 'cuda'\n_on = 'cuda' in _device\n",
    "import torch\n_s = torch.amp.GradScaler()\n",
    (
        "import torch\nfrom apex.fp16_utils import FP16_Optimizer\n"
        "_m = torch.nn.Linear(2, 2).half()\n"
        "_o = FP16_Optimizer(torch.optim.SGD(_m.parameters(), lr=0.1), static_loss_scale=8.0)\n"
        "_o.backward(_m(torch.ones(1, 2).half()).float().sum())\n_o.step()\n"
    ),
]


def torch_sources(limit: int = 20_000) -> list[Path]:
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return []
    root = Path(next(iter(spec.submodule_search_locations)))
    return sorted(p for p in root.rglob("*.py") if 500 < p.stat().st_size < limit)


SOURCES = torch_sources()


def statement_slots(tree: ast.Module) -> list[tuple[int, int]]:
    """(line before which a statement may go, its indentation) for every statement."""
    slots = []
    for node in ast.walk(tree):
        for field in ("body", "orelse", "finalbody"):
            body = getattr(node, field, None)
            if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
                for statement in body:
                    if statement.lineno == statement.end_lineno or isinstance(
                        statement, ast.FunctionDef | ast.ClassDef | ast.If | ast.For
                    ):
                        slots.append((statement.lineno, statement.col_offset))
    return slots


def splice(text: str, line: int, indent: int, snippet: str) -> tuple[str, range]:
    lines = text.splitlines(keepends=True)
    if lines[line - 1][:indent].strip():  # a tab or odd indentation: keep it simple
        raise ValueError("unsupported indentation")
    prefix = lines[line - 1][:indent]
    added = [prefix + part for part in snippet.splitlines(keepends=True)]
    return "".join(lines[: line - 1] + added + lines[line - 1 :]), range(line, line + len(added))


@pytest.mark.skipif(not SOURCES, reason="torch is not installed")
@FUZZ
@given(data=st.data())
def test_spliced_trigger_patterns_are_rewritten_or_reported(data: st.DataObject) -> None:
    path = data.draw(st.sampled_from(SOURCES), label="file")
    text = path.read_text(encoding="utf-8")
    tree = ast.parse(text)
    slots = statement_slots(tree)
    if not slots:
        return
    line, indent = data.draw(st.sampled_from(slots), label="slot")
    snippet = data.draw(st.sampled_from(SNIPPETS), label="snippet")
    try:
        spliced, site = splice(text, line, indent, snippet)
        ast.parse(spliced)
    except (ValueError, SyntaxError):
        return  # a slot where the snippet does not fit (inside a continuation, say)
    engine = ENGINES[Target.NPU]
    result = check_properties(engine, spliced.encode(), str(path))
    assert result.status is not Status.ERROR, result.diagnostics  # type: ignore[attr-defined]
    lines = {d.line for d in result.diagnostics}  # type: ignore[attr-defined]
    assert lines & set(site), f"nothing said about the snippet at lines {site} of {path}"


def test_splicing_finds_slots() -> None:
    """The fuzzer above must not pass vacuously: real files give it places to splice into."""
    random.seed(0)
    usable = 0
    for path in SOURCES[:: max(1, len(SOURCES) // 20)]:
        text = path.read_text(encoding="utf-8")
        for line, indent in statement_slots(ast.parse(text))[:5]:
            try:
                spliced, _ = splice(text, line, indent, SNIPPETS[0])
                ast.parse(spliced)
                usable += 1
            except (ValueError, SyntaxError):
                pass
    assert usable >= 20
