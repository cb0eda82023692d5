"""NPU203 and functions and optimizer classes of other modules of the run (project facts;
migrator/analysis/functions.py, migrator/analysis/classes.py).

The fixtures (fixtures/npu203/*.project) hold the shapes of real repositories; these tests hold
what fixtures cannot show: a relative import inside a package through the real CLI, which files
the summary and the link read (the cost stays with the files NPU203 checks and the modules they
name), the verdict on each shape of optimizer class, and that the facts are plain JSON data.
"""

from __future__ import annotations

import json
from pathlib import Path

from _cli import run_npu_migrate

from migrator.analysis import names
from migrator.analysis.classes import ModuleClasses
from migrator.analysis.parse import index_of_bytes
from migrator.project_stage import ProjectBuilder
from migrator.registry import rule_by_code
from migrator.settings import Settings

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
    command = ["--select", "NPU203", "--format", "json"]
    run = run_npu_migrate(*command, "-j", "1", tmp_path, timeout=120)
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
    again = run_npu_migrate(*command, "--check", tmp_path, timeout=120)
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
            "builds": False,
            "parameters": ["model"],
            "free": [],
            "invariance": {
                "model": {
                    "problem": None,
                    "assumptions": ["has no parameter of its own named `bias`"],
                }
            },
            "assumptions": [],
            "called": {},
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


# -- optimizer classes of the repository (migrator/analysis/classes.py) --------------------------

CLASSES = """
import torch
from torch import nn

import helpers


class LARS(torch.optim.Optimizer):
    def __init__(self, params, lr=0, momentum=0.9):
        defaults = dict(lr=lr, momentum=momentum)
        super().__init__(params, defaults)


class Wrapper(nn.Module):
    def __init__(self, backbone):
        super().__init__()
        self.backbone = backbone
"""


def class_verdict(source: str, name: str) -> dict[str, object] | None:
    index = index_of_bytes(source.encode(), "optim_utils.py")
    assert index is not None
    return ModuleClasses(index, lambda node: names.resolve(index, node)).verdict(name)


MOVABLE_CLASSES = {
    "torch's argument checks, elif and self attributes": """
from torch.optim import SGD

class Nesterov(SGD):
    '''SGD with Nesterov momentum on.'''
    def __init__(self, params, lr, momentum=0.9, *, eps=1e-8):
        if lr < 0.0 or not momentum >= 0.0:
            raise ValueError(f"bad lr {lr} or momentum {momentum}")
        elif eps <= 0:
            raise ValueError("eps: {}".format(eps))
        self.eps = eps
        super(Nesterov, self).__init__(params, lr=lr, momentum=momentum, nesterov=True)
""",
    "no __init__ of its own": "import torch\nclass Plain(torch.optim.AdamW):\n    pass\n",
    "an optimizer class of the module as its base": """
import torch.optim as optim

class Base(optim.Optimizer):
    def __init__(self, params, lr):
        optim.Optimizer.__init__(self, params, {"lr": lr, "groups": [1, -2]})

class Derived(Base):
    def __init__(self, params):
        Base.__init__(self, params, lr=0.1)
""",
}


def test_movable_optimizer_classes() -> None:
    for why, source in MOVABLE_CLASSES.items():
        name = source.rsplit("class ", 1)[1].split("(", 1)[0]
        verdict = class_verdict(source, name)
        assert verdict is not None and verdict["problem"] is None, why


NOT_MOVABLE_CLASSES = {
    "import torch\n@register\nclass L(torch.optim.SGD):\n    pass\n": "is decorated",
    "import torch\nclass L(torch.optim.SGD, metaclass=Meta):\n    pass\n": (
        "has a metaclass or class keywords"
    ),
    "import torch\nclass L(torch.optim.SGD):\n    def __new__(cls, *a):\n        return a\n": (
        "defines `__new__`, which runs when it is built"
    ),
    "import torch\nclass L(torch.optim.SGD):\n    def add_param_group(self, g):\n        pass\n": (
        "defines `add_param_group`, which runs when it is built"
    ),
    "import torch\nclass L(torch.optim.SGD):\n    def __init__(self, p, model):\n"
    "        super().__init__(p, lr=0.1)\n        model.lr = 0.1\n": (
        "has an `__init__` that sets `model.lr`"
    ),
    "import torch\nclass L(torch.optim.SGD):\n    def __init__(self, p):\n"
    "        super().__init__(list(p), lr=0.1)\n": "has an `__init__` that calls `list(...)`",
    "import torch\nLR = 0.1\nclass L(torch.optim.SGD):\n    def __init__(self, p):\n"
    "        defaults = dict(lr=LR)\n        super().__init__(p, **defaults)\n": (
        "has an `__init__` that reads `LR`"
    ),
    "import torch\nclass L(torch.optim.SGD):\n    def __init__(self, p, lr):\n"
    "        if lr < 0:\n            lr = 0.0\n        super().__init__(p, lr=lr)\n": (
        "has an `__init__` that has an `if` that does more than raise `ValueError`"
    ),
    "import torch\nclass L(torch.optim.SGD):\n    def __init__(self, p):\n"
    "        for group in p:\n            pass\n": "has an `__init__` that has a `for` statement",
    "import torch\nclass B(torch.optim.SGD):\n    def __init__(self, p):\n        print(p)\n"
    "        super().__init__(p, lr=0.1)\nclass L(B):\n    pass\n": (
        "is built on `B`, which has an `__init__` that calls `print(...)`"
    ),
}


def test_optimizer_classes_that_do_more_than_build_an_optimizer() -> None:
    for source, problem in NOT_MOVABLE_CLASSES.items():
        line = source[: source.index("class L")].count("\n") + 1
        assert class_verdict(source, "L") == {"line": line, "problem": problem}, source


def test_classes_that_are_no_optimizer_classes() -> None:
    assert class_verdict(CLASSES, "Wrapper") is None  # an nn.Module
    two_bases = "import torch\nclass L(torch.optim.SGD, Mixin):\n    pass\n"
    assert class_verdict(two_bases, "L") is None
    bound_twice = "import torch\nclass L(torch.optim.SGD):\n    pass\nL = make()\n"
    assert class_verdict(bound_twice, "L") is None
    rebound = "import torch\nclass L(torch.optim.SGD):\n    pass\nif X:\n    from x import L\n"
    assert class_verdict(rebound, "L") is None
    by_global = (
        "import torch\nclass L(torch.optim.SGD):\n    pass\ndef f():\n    global L\n    L = 1\n"
    )
    assert class_verdict(by_global, "L") is None
    star = "import torch\nfrom x import *\nclass L(torch.optim.SGD):\n    pass\n"
    assert class_verdict(star, "L") is None
    scheduler = "import torch\nclass L(torch.optim.lr_scheduler.LambdaLR):\n    pass\n"
    assert class_verdict(scheduler, "L") is None


def test_the_link_judges_the_optimizer_classes_the_checked_file_builds(tmp_path: Path) -> None:
    train = (
        "import torch\nimport optim_utils\n\n\ndef build(model):\n"
        "    model = torch.nn.parallel.DistributedDataParallel(model)\n"
        "    head = optim_utils.Wrapper(model)\n"
        "    return optim_utils.LARS(model.module.parameters(), lr=0.1), head\n"
    )
    write(tmp_path, {"train.py": train, "optim_utils.py": CLASSES, "helpers.py": ""})
    builder = ProjectBuilder((NPU203,))
    for name in ("train.py", "optim_utils.py", "helpers.py"):
        path = tmp_path / name
        builder.add_python(str(path), path.read_bytes())
    read: list[str] = []

    def reading(path: str) -> bytes:
        read.append(path)
        return Path(path).read_bytes()

    facts = builder.build(Settings(), reading)
    utils = str(tmp_path / "optim_utils.py")
    assert read == [utils]  # not helpers.py, which optim_utils imports
    links = facts.links("NPU203")
    assert links[str(tmp_path / "train.py")]["callees"]["optim_utils.LARS"] == {
        "path": utils,
        "name": "LARS",
    }
    # only the optimizer class is judged and kept; `Wrapper` is an nn.Module
    assert links[utils] == {"classes": {"LARS": {"line": 8, "problem": None}}}
    assert json.loads(json.dumps(facts.linked)) == facts.linked  # plain data
