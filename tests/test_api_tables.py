"""The torch_npu API tables of NPU930 / NPU931: the packaged files, their schema, version
selection, a project's overrides (pyproject and command line), and the table builder's parsing."""

from __future__ import annotations

import importlib.util
import re
import sys
import tomllib
from pathlib import Path
from types import ModuleType

import pytest

from migrator import api_tables
from migrator.api_tables import TableError, parse_overrides, parse_table, table_for
from migrator.cli import main
from migrator.config import ConfigError, load_config

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "migrator" / "data" / "torch_npu"
TABLES = sorted(DATA.glob("*.toml"))
SOURCE = {key: "x" for key in api_tables.SOURCE_KEYS}


def test_every_release_line_has_a_table_and_the_newest_is_the_default() -> None:
    assert [path.stem for path in TABLES] and set(api_tables.releases()) == {
        path.stem for path in TABLES
    }
    assert api_tables.release_line(None) == "2.12.0" == api_tables.releases()[-1]
    assert api_tables.release_line("2.7.1.post2") == "2.7.1"
    assert api_tables.release_line("2.10.0rc1") == "2.10.0"
    with pytest.raises(TableError, match=r"no torch_npu API table for '2\.1\.0' \(available: "):
        api_tables.release_line("2.1.0")


@pytest.mark.parametrize("path", TABLES, ids=lambda p: p.stem)
def test_each_table_validates_and_shows_its_source(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    document = tomllib.loads(text)
    table = parse_table(document, path.name)
    source = table.source
    assert table.release == path.stem
    assert source["repository"] == "https://github.com/Ascend/pytorch"
    assert re.fullmatch(r"[0-9a-f]{40}", source["commit"])
    assert source["url"].endswith(f"/tree/{source['commit']}/{source['path']}")
    assert f"torch_npu {path.stem}" in text.splitlines()[0]
    assert "tools/build_torch_npu_tables.py" in text
    unsupported = [e for e in table.entries.values() if e.unsupported]
    notes = [e for e in table.entries.values() if not e.unsupported]
    assert len(unsupported) > 200 and len(notes) > 50  # a real list, not a sample
    # the header's counts are the table's
    assert f"unsupported: {len(unsupported)};" in text
    assert f"with a note here: {len(notes)};" in text


@pytest.mark.parametrize("release", ["2.7.1", "2.12.0"])
def test_the_issue_examples_are_sourced(release: str) -> None:
    table = api_tables.packaged_table(release)
    for name in (
        "torch.nn.DataParallel",
        "torch.nn.RNN",
        "torch.nn.GRU",
        "torch.nn.MaxPool3d",
        "torch.nn.functional.avg_pool3d",
        "torch.backends.cuda.enable_flash_sdp",
        "torch.backends.cuda.sdp_kernel",
        "torch.cuda.comm.scatter",
        "torch.cuda.comm.gather",
        "torch.cuda.memory_usage",
    ):
        entry = table.lookup(name)
        assert entry is not None and entry.status == "unsupported", name
    for name in ("torch.cuda.CUDAGraph", "torch.cuda.graph", "torch.cuda.get_device_properties"):
        entry = table.lookup(name)
        assert entry is not None and entry.status == "supported-with-note", name
    assert "inference only" in table.entries["torch.cuda.graph"].note
    assert "major" in table.entries["torch.cuda.get_device_properties"].note
    # the torch_npu spelling finds the same entry
    assert table.lookup("torch_npu.npu.NPUGraph") is table.lookup("torch.cuda.CUDAGraph")


def test_tables_differ_between_releases() -> None:
    assert api_tables.packaged_table("2.6.0").lookup("torch.nn.MaxPool2d") is not None
    assert api_tables.packaged_table("2.7.1").lookup("torch.nn.MaxPool2d") is None


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"api": {}}, "a [source] table is required"),
        ({"source": {"release": "1"}, "api": {}}, "[source] needs a non-empty string `repository`"),
        ({"source": SOURCE, "extra": 1}, "unknown top-level key(s): extra"),
        ({"source": SOURCE, "api": {"GRU": {"status": "unsupported", "note": "x"}}}, "GRU"),
        ({"source": SOURCE, "api": {"torch.nn.GRU": {"status": "maybe", "note": "x"}}}, "`status`"),
        ({"source": SOURCE, "api": {"torch.nn.GRU": {"status": "unsupported"}}}, "`note`"),
        (
            {
                "source": SOURCE,
                "api": {"torch.nn.GRU": {"status": "unsupported", "note": "x", "y": 1}},
            },
            "unknown key(s) y",
        ),
    ],
)
def test_schema_violations_are_errors(document: dict[str, object], message: str) -> None:
    with pytest.raises(TableError, match=re.escape(message)):
        parse_table(document, "t.toml")


def test_overrides_add_change_and_remove_entries() -> None:
    table = table_for(
        "2.7.1",
        {
            "torch.nn.GRU": {"status": "supported"},
            "torch.nn.LSTM": {"status": "unsupported", "note": "not in our build."},
            "torchvision.ops.nms": {"status": "supported-with-note", "note": "slow."},
        },
    )
    assert table.lookup("torch.nn.GRU") is None
    lstm = table.lookup("torch.nn.LSTM")
    assert lstm is not None and lstm.unsupported and lstm.origin == api_tables.OVERRIDES_LABEL
    assert table.lookup("torchvision.ops.nms") is not None
    assert api_tables.packaged_table("2.7.1").lookup("torch.nn.GRU") is not None  # untouched


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ([], "entries go in tables like"),
        ({"nn.GRU": {"status": "supported"}}, "not a qualified name under a torch package"),
        ({"apex.amp": {"status": "supported"}}, "not a qualified name under a torch package"),
        ({"torch.nn.GRU": "supported"}, "must be a table with `status` and `note`"),
        ({"torch.nn.GRU": {"status": "fine"}}, "`status` must be one of"),
        ({"torch.nn.GRU": {"status": "unsupported", "note": " "}}, "`note` must be a non-empty"),
    ],
)
def test_invalid_overrides_are_errors(raw: object, message: str) -> None:
    with pytest.raises(TableError, match=re.escape(message)):
        parse_overrides(raw, "pyproject.toml")


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text)
    return path


def test_pyproject_keys_are_read_and_checked(tmp_path: Path) -> None:
    good = write(
        tmp_path,
        "pyproject.toml",
        '[tool.npu-migrate]\ntorch-npu-version = "2.7.1"\n\n'
        '[tool.npu-migrate.torch-npu-api."torch.nn.GRU"]\nstatus = "supported"\n',
    )
    config = load_config(good)
    assert config.torch_npu_version == "2.7.1"
    assert config.torch_npu_api == {"torch.nn.GRU": {"status": "supported"}}
    for body, message in (
        ('torch-npu-version = "1.8.1"', "no torch_npu API table for '1.8.1'"),
        ("torch-npu-version = 2.7", "`torch-npu-version` must be a string"),
        ('[tool.npu-migrate.torch-npu-api."torch.nn.GRU"]\nstatus = "ok"', "`status` must be"),
    ):
        bad = write(tmp_path, "bad.toml", f"[tool.npu-migrate]\n{body}\n")
        with pytest.raises(ConfigError, match=re.escape(message)):
            load_config(bad)


POOLING = "import torch.nn as nn\npool = nn.MaxPool2d(2)\nrnn = nn.GRU(4, 4)\n"


def test_command_line_version_and_pyproject_overrides(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = write(tmp_path, "model.py", POOLING)
    common = ["--check", "--no-cache", "--select", "NPU930", "--no-color"]
    assert main([*common, str(source)]) == 1
    out = capsys.readouterr().out
    assert "`torch.nn.GRU` is not supported on Ascend (torch_npu 2.12.0" in out
    assert "MaxPool2d" not in out  # supported in the newest list
    assert main([*common, "--torch-npu-version", "2.6.0", str(source)]) == 1
    assert (
        "`torch.nn.MaxPool2d` is not supported on Ascend (torch_npu 2.6.0"
        in capsys.readouterr().out
    )
    write(
        tmp_path,
        "pyproject.toml",
        '[tool.npu-migrate.torch-npu-api."torch.nn.GRU"]\nstatus = "supported"\n',
    )
    assert main([*common, str(source)]) == 0  # the project says its build supports GRU
    assert "GRU" not in capsys.readouterr().out
    assert main([*common, "--torch-npu-version", "3.0.0", str(source)]) == 2
    assert "--torch-npu-version: no torch_npu API table for '3.0.0'" in capsys.readouterr().err


# -- the table builder -----------------------------------------------------------------------------


def builder() -> ModuleType:
    path = ROOT / "tools" / "build_torch_npu_tables.py"
    spec = importlib.util.spec_from_file_location("build_torch_npu_tables", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


CARDS = """\
### <code><i>class</i></code> torch.nn.GRU

| 硬件 | 是否支持 |
| ---- | :----: |
| <term>Atlas A2 训练系列产品</term> | ✘ |
| <term>Atlas A3 训练系列产品</term> | ✘ |

### torch.cuda.graph

**NPU 形式名称**\uff1atorch.npu.graph

| 硬件 | 是否支持 |
| ---- | :----: |
| <term>Atlas A2 训练系列产品</term> | ✔ |
| <term>Atlas A3 训练系列产品</term> | ✔ |
| <term>Ascend 950DT</term> | ✘ |

**限制与说明**\uff1a当前仅支持推理场景

### <code><i>class</i></code> torch.Tensor

| 硬件 | 是否支持 |
| ---- | :----: |
| <term>Atlas A2 训练系列产品</term> | ✔ |
| <term>Atlas A3 训练系列产品</term> | ✔ |

> <font size="3">smm()</font>

| 硬件 | 是否支持 |
| ---- | :----: |
| <term>Atlas A2 训练系列产品</term> | ✘ |
| <term>Atlas A3 训练系列产品</term> | ✘ |
"""

TABLE_ROWS = """\
|API名称|NPU形式名称|是否支持|限制与说明|
|--|--|--|--|
|torch.cuda.memory_usage|-|否|-|
|torch.cuda.get_device_properties|torch_npu.npu.get_device_properties|是|仅支持name属性|
|Tensor.double|是|支持fp32<br>默认返回fp32|
"""


def test_builder_reads_both_layouts_of_the_lists() -> None:
    tool = builder()
    cards = {listed.name: listed for listed in tool.read_cards(CARDS)}
    assert not cards["torch.nn.GRU"].supported
    assert cards["torch.cuda.graph"].supported  # supported on the training products
    assert cards["torch.cuda.graph"].npu_name == "torch.npu.graph"
    assert not cards["torch.Tensor.smm"].supported
    rows = {listed.name: listed for listed in tool.read_tables(TABLE_ROWS)}
    assert not rows["torch.cuda.memory_usage"].supported
    assert rows["torch.cuda.get_device_properties"].npu_name.endswith("get_device_properties")
    assert rows["torch.Tensor.double"].restriction.endswith("fp32")


@pytest.mark.parametrize(
    ("restriction", "kept"),
    [
        ("`input`仅支持fp16\uff0cfp32", False),  # a data-type list only
        ("支持bf16\uff0cint64", False),
        ("<term>Ascend 950DT</term>\uff1a不支持complex64", False),  # another product
        ("当前仅支持推理场景\uff0c不支持训练场景", True),
        ("支持fp32<br>不支持多进程加载NPU数据", True),
    ],
    ids=["dtypes", "dtypes-only", "other-product", "inference-only", "mixed"],
)
def test_builder_keeps_only_behavioural_restrictions(restriction: str, kept: bool) -> None:
    assert builder().behavioural(restriction) is kept
