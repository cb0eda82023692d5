"""NPU203 and functions of other modules of the run (rules/npu203_functions.py, project facts).

The fixtures (fixtures/npu203/*.project) hold the shapes of real repositories; these tests hold
what fixtures cannot show: a relative import inside a package through the real CLI, which files
the summary and the link read (the cost stays with the files NPU203 checks and the modules they
name), and that the facts are plain JSON data.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from migrator.project import ProjectBuilder
from migrator.registry import rule_by_code
from migrator.rule import Settings

NPU203 = rule_by_code("NPU203")

HELPER = """
def get_params_groups(model):
    decayed, plain = [], []
    for name, param in model.named_parameters():
        if name.endswith(".bias") or len(param.shape) == 1:
            plain.append(param)
        else:
            decayed.append(param)
    return [{"params": decayed}, {"params": plain, "weight_decay": 0.0}]


def freeze(model):
    for param in model.parameters():
        param.requires_grad = False
"""

TRAIN = """
import torch
from torch.nn.parallel import DistributedDataParallel

from .utils import get_params_groups


def build(model, lr):
    model = DistributedDataParallel(model)
    optimizer = torch.optim.AdamW(get_params_groups(model), lr=lr)
    return model, optimizer
"""


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_a_relative_import_in_a_package_is_followed_by_the_cli(tmp_path: Path) -> None:
    write(
        tmp_path,
        {"dino/__init__.py": "", "dino/utils.py": HELPER, "dino/train.py": TRAIN},
    )
    command = [sys.executable, "-m", "migrator", "--select", "NPU203", "--format", "json"]
    run = subprocess.run(
        [*command, "-j", "1", str(tmp_path)], capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 1, run.stdout + run.stderr  # 1: it changed a file
    moved = (tmp_path / "dino/train.py").read_text()
    assert moved.index("optimizer = torch.optim.AdamW") < moved.index("DistributedDataParallel(")
    [edit] = json.loads(run.stdout)["edits"]
    assert edit["path"].endswith("train.py") and edit["line"] == 10
    assert edit["message"].endswith(
        "assuming `model` has no parameter of its own named `bias` (`get_params_groups` tests "
        "its parameter names, which DDP prefixes with `module.`)"
    )
    assert (tmp_path / "dino/utils.py").read_text() == HELPER
    again = subprocess.run(
        [*command, "--check", str(tmp_path)], capture_output=True, text=True, timeout=120
    )
    assert again.returncode == 0, again.stdout  # the moved program needs nothing more


def test_only_checked_files_are_summarised_and_only_named_modules_are_read(
    tmp_path: Path,
) -> None:
    files = {
        "train.py": TRAIN.replace("from .utils import", "from utils import")
        .replace("    model = Dist", "    utils_data.prepare()\n    model = Dist")
        .replace("import torch\n", "import torch\n\nimport utils_data\n", 1),
        "utils.py": HELPER,
        "utils_data.py": "def prepare():\n    return None\n",
        "unrelated.py": "def get_params_groups(model):\n    return []\n",
    }
    write(tmp_path, files)
    paths = sorted(str(tmp_path / name) for name in files)
    read: list[str] = []

    def reading(path: str) -> bytes:
        read.append(path)
        return Path(path).read_bytes()

    builder = ProjectBuilder((NPU203,))
    for path in paths:
        builder.add_python(path, Path(path).read_bytes())
    facts = builder.build(Settings(), reading)

    train, utils = str(tmp_path / "train.py"), str(tmp_path / "utils.py")
    assert list(facts.summaries("NPU203")) == [train]  # the one file holding `DataParallel`
    assert facts.summaries("NPU203")[train] == {
        "callees": ["utils.get_params_groups", "utils_data.prepare"]
    }
    assert sorted(read) == [utils, str(tmp_path / "utils_data.py")]  # parsed once each
    links = facts.links("NPU203")
    assert links[train]["callees"]["utils.get_params_groups"] == {
        "path": utils,
        "name": "get_params_groups",
    }
    assert links[utils]["functions"] == {
        "get_params_groups": {
            "line": 2,
            "pure": True,
            "parameters": ["model"],
            "free": [],
            "invariance": {
                "model": {
                    "problem": None,
                    "assumptions": ["has no parameter of its own named `bias`"],
                }
            },
        }
    }
    assert json.loads(json.dumps(facts.linked)) == facts.linked  # plain data


def test_a_function_bound_twice_in_its_module_is_not_followed(tmp_path: Path) -> None:
    helper = HELPER + "\n\nget_params_groups = freeze\n"
    write(tmp_path, {"train.py": TRAIN.replace("from .utils", "from utils"), "utils.py": helper})
    builder = ProjectBuilder((NPU203,))
    for name in ("train.py", "utils.py"):
        path = tmp_path / name
        builder.add_python(str(path), path.read_bytes())
    facts = builder.build(Settings())
    assert facts.summaries("NPU203")  # the call was summarised, and not followed
    assert not facts.links("NPU203")
