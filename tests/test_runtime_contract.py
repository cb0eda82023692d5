"""The runtime contract: what the rules write, the runtime accepts.

Every fixture's migrated side (``<case>.after.py``, or ``<case>.before.py`` when the case must
stay as it is) and every end-to-end program migrated by the command line is run far enough to
build its optimizers and call ``amp.initialize`` against the ``apex`` runtime, with the CPU
``torch_npu`` shim, in one subprocess. The test fails when the runtime rejects a call (an NPU
fused optimizer under opt_level O3, O2 without master weights, ``combine_grad`` where it is not
allowed, a constructor argument the class does not take...), and when a construct could not be
reached at all.

How a fragment of a training script is run (``exercise`` below):

- **Targets** are the optimizer constructors and ``amp.initialize`` calls of the file, found on
  its ``ast`` (callee names, no resolution: a look-alike is run too, which costs nothing).
- **The module** is executed statement by statement with ``__name__`` not ``"__main__"`` (no
  script entry point runs), in a namespace where a name the fixture never defines is a
  *stand-in*, and where an import of a package the machine does not have gives a stub module
  whose attributes are stand-ins (only for packages the fixture itself imports).
- **Entry points**: every function, and every method of a class, that contains a target is
  called with a stand-in per parameter (a class is instantiated through its ``__init__`` first).
  Each entry point is cut after its last statement that holds a target, so no training loop
  runs, and called twice: once with stand-in flags true, once with them false, so that both
  sides of ``if args.fp16:`` / ``else:`` run. ``amp`` is reset before every call.
- **Stand-ins** (:class:`StandIn`) are tiny ``torch.nn.Module`` objects with a parameter of their
  own whose unknown attributes are child stand-ins created on first use (so
  ``model.fc.parameters()`` gives parameters of its own), whose hyper-parameter-like attributes
  are plausible values (``args.lr`` is 0.01, ``args.opt_level`` "O1" then "O2",
  ``args.master_weights`` True: what the rules' notes say must hold at run time), which are
  true or false by run, iterate as empty, and which, called under an optimizer-like name
  (``make_optimizer``, a project's own ``SGD``), build a plain ``torch.optim.SGD``; called
  where the file unpacks the result (``optimizer, scheduler = create_optimizer(...)``), a
  tuple with a plain optimizer for each target named like one and a stand-in for the others;
  as a base class (``class LitModel(pl.LightningModule)``) they give their own class.
- **Rejections** are exceptions raised inside the runtime (``apex``) or the shim (``torch_npu``),
  or a ``TypeError`` raised at a target's own line (a constructor given an argument it does not
  take). Anything else is a failure of the stand-ins, reported as such.

What the test then requires, per file: no rejection, every target line executed, no stand-in
failure, unless the case is listed below with the reason.
"""

from __future__ import annotations

import ast
import json
import operator
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import CodeType, FrameType, ModuleType
from typing import Any

import pytest
from test_e2e import CASES as E2E_CASES
from test_e2e import migration_of

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "fixtures"
RUNTIME = REPO / "runtime"
TIMEOUT_S = 600

# Fixtures whose *input* already passes the runtime something it refuses: the rules only report
# there (the migrated code is the input, or keeps the refused call as written). The original is
# run too, and must be refused with the same messages.
REJECTED_AS_WRITTEN = {
    "npu102/opt_levels": (
        "the input passes NpuFusedSGD to opt_level O0 and O3 and to O2 with "
        "master_weights=False, which Ascend apex refuses; NPU102 reports those calls"
    ),
    "npu101/blocked_arguments": (
        "the input builds NVIDIA's FusedAdam with amsgrad=True, which FusedAdam refuses; NPU101 "
        "reports it"
    ),
    "npu104/kept": "the input passes NpuFusedSGD to opt_level O3; the rule keeps that DDP wrap",
    "npu203/amp_after_device_move": (
        "the input passes a DDP-wrapped model to amp.initialize, which apex refuses; NPU203 "
        "moves the optimizer, not the amp call"
    ),
    "npu203/amp_apex_ddp": (
        "the input passes a DDP-wrapped model to amp.initialize, which apex refuses; NPU203 "
        "moves the optimizer, not the amp call"
    ),
}

# Fixtures whose targets cannot all be reached by running them, with the reason.
NOT_EXECUTABLE = {
    "npu101/blocked_arguments": (
        "one list holds every constructor the rule must not rewrite; the first one the runtime "
        "refuses (listed above) ends the run before the others"
    ),
    "npu101/chain_imagenet_main": (
        "builds its model as `torchvision.models.__dict__[args.arch]()`: a lookup in the "
        "namespace of a package this machine does not have, which no stand-in can answer"
    ),
    "npu203/amp_same_name": (
        "`Trainer.setup` reads `self.model`, which nothing in the fixture sets"
    ),
    "npu101/gated_amp_nested": (
        '`amp.initialize` runs only when `args.amp == "apex"`, a comparison no stand-in flag '
        "satisfies; the class choice runs both ways in the e2e program `gated_amp`"
    ),
    "npu101/lookup_namespace": (
        "looks classes up as `torch.optim.__dict__[name]` with a name chosen at run time: a "
        "dict key must be a real string, which no stand-in flag is (its `getattr` twin runs in "
        "`lookup_by_name`)"
    ),
    "npu101/contract_sharding": (
        "FSDP, `parallelize_module` and `distribute_tensor` need an accelerator and a device "
        "mesh, which no stand-in gives; the optimizers after them are left as written"
    ),
}


# -- which files --------------------------------------------------------------------------------


def fixture_cases() -> list[Path]:
    return sorted(FIXTURES.glob("npu[0-9][0-9][0-9]/*.before.py"))


def case_id(before: Path) -> str:
    return f"{before.parent.name}/{before.name.removesuffix('.before.py')}"


def migrated_side(before: Path) -> Path:
    after = before.with_name(before.name.removesuffix(".before.py") + ".after.py")
    return after if after.exists() else before


def e2e_scripts() -> dict[str, Path]:
    return {f"e2e/{case.name}": REPO / case.path / case.script for case in E2E_CASES}


# -- the subprocess -----------------------------------------------------------------------------


@dataclass
class Outcome:
    """What running one file gave (see ``exercise``)."""

    targets: list[int] = field(default_factory=list)
    reached: list[int] = field(default_factory=list)
    rejections: list[str] = field(default_factory=list)
    standin_failures: list[str] = field(default_factory=list)


def shim_path() -> str:
    result = subprocess.run(
        [sys.executable, "-m", "apex.testing.npu_shim"],
        capture_output=True,
        text=True,
        timeout=120,
        env=child_env(None),
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip().splitlines()[-1]


def child_env(shim: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    paths = [str(RUNTIME)] if shim is None else [shim, str(RUNTIME)]
    env["PYTHONPATH"] = os.pathsep.join([*paths, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["OMP_NUM_THREADS"] = "1"
    return env


def run_files(files: dict[str, Path], shim: str, workdir: Path) -> dict[str, Outcome]:
    """Exercise ``files`` (label -> path) in one fresh interpreter with the shim importable."""
    request, answer = workdir / "request.json", workdir / "answer.json"
    request.write_text(json.dumps({label: str(path) for label, path in files.items()}))
    result = subprocess.run(
        [sys.executable, __file__, str(request), str(answer)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        env=child_env(shim),
        cwd=workdir,
    )
    assert result.returncode == 0 and answer.exists(), result.stderr[-8000:]
    found = json.loads(answer.read_text())
    return {label: Outcome(**outcome) for label, outcome in found.items()}


@pytest.fixture(scope="session")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Outcome]:
    pytest.importorskip("apex.amp", reason="needs the runtime: pip install -e runtime")
    files = {case_id(before): migrated_side(before) for before in fixture_cases()}
    originals = {
        f"{label}:original": FIXTURES / f"{label}.before.py" for label in REJECTED_AS_WRITTEN
    }
    files.update(originals)
    files.update(migrated_e2e(tmp_path_factory))
    return run_files(files, shim_path(), tmp_path_factory.mktemp("contract-run"))


def migrated_e2e(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each end-to-end program's folder copied and migrated in place by the command line: the
    migrations of tests/test_e2e.py, made once for the session by whichever module needs one
    first."""
    return {
        f"e2e/{case.name}": migration_of(case, tmp_path_factory).migrated / case.script
        for case in E2E_CASES
    }


# -- the tests ----------------------------------------------------------------------------------


CASES = [pytest.param(case_id(before), id=case_id(before)) for before in fixture_cases()]
CASES += [pytest.param(label, id=label) for label in e2e_scripts()]


@pytest.mark.parametrize("label", CASES)
def test_runtime_accepts_what_the_rules_wrote(label: str, outcomes: dict[str, Outcome]) -> None:
    outcome = outcomes[label]
    if label in REJECTED_AS_WRITTEN:
        original = outcomes[f"{label}:original"]
        assert outcome.rejections, f"{label} is listed as refused as written, but runs"
        assert sorted(outcome.rejections) == sorted(original.rejections), (
            "the migrated code is refused differently from the input"
        )
    else:
        assert not outcome.rejections, "\n".join(outcome.rejections)
    if label in NOT_EXECUTABLE:
        return
    assert not outcome.standin_failures, "\n".join(outcome.standin_failures)
    missed = sorted(set(outcome.targets) - set(outcome.reached))
    assert not missed, f"never executed: lines {missed}"


def test_the_lists_name_real_cases() -> None:
    known = {case_id(before) for before in fixture_cases()} | set(e2e_scripts())
    assert set(REJECTED_AS_WRITTEN) <= known
    assert set(NOT_EXECUTABLE) <= known
    assert len(set(NOT_EXECUTABLE) | set(REJECTED_AS_WRITTEN)) <= 10, "the lists must stay small"


# == the driver (runs in the subprocess, with the runtime and the shim importable) ==============

OPTIMIZER_NAMES = frozenset(
    {"SGD", "Adam", "AdamW", "Adadelta", "RMSprop", "Adagrad", "FusedSGD", "FusedAdam",
     "FusedLAMB", "FusedNovoGrad", "FusedAdagrad", "FusedMixedPrecisionLamb", "Lamb"}
)  # fmt: skip
HYPER_PARAMETERS: dict[str, object] = {
    "lr": 0.01,
    "learning_rate": 0.01,
    "momentum": 0.9,
    "weight_decay": 1e-4,
    "wd": 1e-4,
    "eps": 1e-8,
    "betas": (0.9, 0.999),
    "beta1": 0.9,
    "beta2": 0.999,
    "loss_scale": "dynamic",
    "seed": 0,
    "gpu": None,
    "local_rank": 0,
    "rank": 0,
    "world_size": 1,
    "workers": 0,
    "batch_size": 2,
    "epochs": 2,
    "start_epoch": 0,
    "distributed": False,
    "multiprocessing_distributed": False,
    "device": "cpu",
    "keep_batchnorm_fp32": None,
    "arch": "resnet18",
    "out": os.path.join(os.path.realpath(os.curdir), "contract-out.json"),
}
NO_VALUE = object()


class Flags:
    """How stand-ins answer in the current run: ``truthy`` is their truth value, and when
    ``equal_at`` is set only that comparison with ``==`` (counting from 1) is true, which walks
    the arms of an ``if``/``elif`` chain one run at a time."""

    truthy = True
    equal_at: int | None = None
    comparisons = 0


# (truthy, equal_at) of the runs of every entry point.
RUNS = ((True, None), (False, None), (False, 2), (False, 3))


def hyper_parameter(name: str) -> object:
    """A plausible value for ``args.<name>`` (or a parameter so named), or ``NO_VALUE`` (then
    it is a child stand-in)."""
    lowered = name.lower()
    words = set(lowered.split("_"))
    if "opt_level" in lowered:
        return "O1" if Flags.truthy else "O2"
    if "master" in words:
        return True
    if lowered in HYPER_PARAMETERS:
        return HYPER_PARAMETERS[lowered]
    if "lr" in words or "rate" in words:
        return 0.01
    if "decay" in words:
        return 1e-4
    if "size" in words or "steps" in words:
        return 2
    if words & {"amsgrad", "nesterov", "maximize"}:
        return False
    return NO_VALUE


def plain_optimizer() -> Any:
    import torch

    return torch.optim.SGD(StandIn("optimizer_params").parameters(), lr=0.01)


def make_standin_class() -> type:
    import torch

    class StandInModule(torch.nn.Module):
        """See the module docstring: a tiny model that is also args, a loader, a flag..."""

        __hash__ = torch.nn.Module.__hash__

        def __init__(self, name: str = "stand_in") -> None:
            super().__init__()
            object.__setattr__(self, "_standin_name", name)
            self.standin_weight = torch.nn.Parameter(torch.full((2, 2), 0.5))

        def __getattr__(self, name: str) -> Any:
            try:
                return super().__getattr__(name)
            except AttributeError:
                if name.startswith(("_", "standin")):
                    raise
            value = hyper_parameter(name)
            if value is not NO_VALUE:
                return value
            child = StandInModule(name)
            self._modules[name] = child  # add_module would ask hasattr(), which lands here
            return child

        def forward(self, *args: Any, **kwargs: Any) -> Any:
            name = self._standin_name
            targets = unpacked_at_caller()
            if targets is not None:
                return tuple(
                    plain_optimizer() if "optim" in target.lower() else StandInModule(target)
                    for target in targets
                )
            if "optim" in name.lower() or name in OPTIMIZER_NAMES:
                return plain_optimizer()
            return StandInModule(f"{name}()")

        def __mro_entries__(self, bases: tuple[Any, ...]) -> tuple[type, ...]:
            # `class LitModel(pl.LightningModule)` of a stub package: a stand-in module class.
            return (StandInModule,)

        def __bool__(self) -> bool:
            return Flags.truthy

        def __eq__(self, other: object) -> bool:
            if isinstance(other, torch.nn.Module):
                return self is other
            Flags.comparisons += 1
            if Flags.equal_at is not None:
                return Flags.comparisons == Flags.equal_at
            return Flags.truthy

        def __iter__(self) -> Iterator[Any]:
            return iter((StandInModule(f"{self._standin_name}[]"),))  # one pass through loops

        def __len__(self) -> int:
            return 1

        def keys(self) -> list[str]:  # `**options`: no keyword arguments
            return []

        def __getitem__(self, key: Any) -> Any:
            return StandInModule(f"{self._standin_name}[]")

        def __contains__(self, item: object) -> bool:
            return Flags.truthy

        def __index__(self) -> int:
            return 1

        def __int__(self) -> int:
            return 1

        def __float__(self) -> float:
            return 0.01

        def __str__(self) -> str:
            return f"<stand-in {self._standin_name}>"

        __repr__ = __str__

        def __format__(self, spec: str) -> str:
            return str(self)

    # In arithmetic a stand-in is the number 0.01 (`args.lr * args.batch_size / 256`).
    for name in ("add", "sub", "mul", "truediv", "floordiv", "pow", "mod"):
        function = getattr(operator, name)

        def operate(self: Any, other: Any, function: Any = function) -> Any:
            return function(float(self), other)

        def reflected(self: Any, other: Any, function: Any = function) -> Any:
            return function(other, float(self))

        setattr(StandInModule, f"__{name}__", operate)
        setattr(StandInModule, f"__r{name}__", reflected)
    for name in ("lt", "le", "gt", "ge"):
        setattr(StandInModule, f"__{name}__", lambda self, other: Flags.truthy)
    return StandInModule


StandIn: Any = None  # the class, made when the driver starts (torch is imported then)
# (file, line) -> the targets, as written, of `a, b = f(...)` statements of the file being run.
UNPACKING: dict[tuple[str, int], list[str]] = {}


def unpackings(path: str, tree: ast.Module) -> dict[tuple[str, int], list[str]]:
    """Every line of each ``a, b = f(...)`` statement of ``tree``, with its targets."""
    found: dict[tuple[str, int], list[str]] = {}
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Tuple | ast.List)
            and isinstance(node.value, ast.Call)
        ):
            targets = [ast.unparse(element) for element in node.targets[0].elts]
            for line in range(node.lineno, (node.end_lineno or node.lineno) + 1):
                found[(path, line)] = targets
    return found


def unpacked_at_caller() -> list[str] | None:
    """The targets when the nearest frame of the file being run unpacks a call's result."""
    files = {path for path, _ in UNPACKING}
    frame: FrameType | None = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename not in files:
        frame = frame.f_back
    if frame is None:
        return None
    return UNPACKING.get((frame.f_code.co_filename, frame.f_lineno))


class Namespace(dict[str, Any]):
    """A module's globals in which an undefined name is a stand-in (builtins still win)."""

    def __missing__(self, key: str) -> Any:
        import builtins

        if key == "getattr":
            return lookup
        if hasattr(builtins, key):
            return getattr(builtins, key)
        value = self[key] = StandIn(key)
        return value


def lookup(obj: Any, name: Any, *default: Any) -> Any:
    """``getattr`` where a name chosen at run time (``getattr(torch.optim, args.optimizer)``)
    is a stand-in: it looks up ``SGD``."""
    return getattr(obj, name if isinstance(name, str) else "SGD", *default)


class StubFinder:
    """Stub modules for the packages the fixture imports and this machine does not have."""

    def __init__(self, packages: set[str]) -> None:
        self.packages = packages

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        import importlib.machinery

        if name.split(".")[0] not in self.packages:
            return None
        return importlib.machinery.ModuleSpec(name, self, is_package=True)  # type: ignore[arg-type]

    def create_module(self, spec: Any) -> ModuleType:
        module = StubModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module: ModuleType) -> None:
        return None


class StubModule(ModuleType):
    def __call__(self, *args: Any, **kwargs: Any) -> Any:  # `from pkg import name` of a module
        return StandIn(self.__name__.rpartition(".")[2])(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        value = StandIn(name)
        setattr(self, name, value)
        return value


def targets_of(tree: ast.AST) -> set[int]:
    """Lines of optimizer constructors and amp.initialize calls (by callee name)."""
    lines = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        optimizer = name in OPTIMIZER_NAMES or name.startswith("NpuFused")
        if optimizer or (name == "initialize" and "amp" in ast.unparse(func).lower()):
            lines.add(node.lineno)
    return lines


def cut_after_last_target(function: ast.FunctionDef, targets: set[int]) -> ast.FunctionDef:
    """``function`` without the statements after the last one that holds a target."""
    keep = 0
    for index, statement in enumerate(function.body):
        if _holds(statement, targets):
            keep = index + 1
    if keep:
        function.body = function.body[:keep]
    return function


def is_rejection(error: BaseException, path: str, targets: set[int]) -> bool:
    """Raised inside the runtime or the shim, or a TypeError at a target's own line."""
    frames = []
    traceback = error.__traceback__
    while traceback is not None:
        frames.append((traceback.tb_frame.f_code.co_filename, traceback.tb_lineno))
        traceback = traceback.tb_next
    if "stand-in" in str(error) or "StandIn" in str(error):
        return False  # the runtime refused a stand-in, not what a rule wrote
    innermost = frames[-1][0] if frames else ""
    runtime_dirs = (str(RUNTIME / "apex"), "torch_npu")
    if any(part in innermost for part in runtime_dirs):
        return True
    last_own = [line for filename, line in frames if filename == path]
    return isinstance(error, TypeError) and bool(last_own) and last_own[-1] in targets


def exercise(path: str) -> Outcome:
    """Run one file as the module docstring says."""
    import apex.amp.frontend as frontend

    source = Path(path).read_text(encoding="utf-8")
    tree = ast.parse(source)
    targets = targets_of(tree)
    outcome = Outcome(targets=sorted(targets))
    if not targets:
        return outcome
    reached: set[int] = set()

    def tracer(frame: FrameType, event: str, arg: Any) -> Any:
        if frame.f_code.co_filename != path:
            return None
        if event == "line":
            reached.add(frame.f_lineno)
        return tracer

    namespace = Namespace(__name__="__contract__", __file__=path)
    UNPACKING.clear()
    UNPACKING.update(unpackings(path, tree))
    imported = {
        (alias.name if isinstance(node, ast.Import) else node.module or "").split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, (ast.Import, ast.ImportFrom)) and not getattr(node, "level", 0)
        for alias in node.names
    }
    finder = StubFinder({name for name in imported if name and not importable(name)} | {"apex"})
    sys.meta_path.append(finder)
    old_argv = sys.argv
    sys.argv = [path]

    def run(code: CodeType | Callable[[], Any], where: str) -> None:
        frontend._reset()
        sys.settrace(tracer)
        try:
            if isinstance(code, CodeType):
                exec(code, namespace)
            else:
                code()
        except (Exception, SystemExit) as error:
            message = f"{where}: {type(error).__name__}: {error}"
            if isinstance(error, Exception) and is_rejection(error, path, targets):
                outcome.rejections.append(message)
            else:
                outcome.standin_failures.append(message)
        finally:
            sys.settrace(None)

    try:
        last = max(i for i, statement in enumerate(tree.body) if _holds(statement, targets))
        for number, statement in enumerate(tree.body):
            if _is_main_guard(statement):
                continue
            if number > last and not isinstance(statement, _DEFINITIONS):
                continue  # the script goes on to train: only its definitions are needed
            if isinstance(statement, ast.FunctionDef) and _holds(statement, targets):
                statement = cut_after_last_target(statement, targets)
            module = ast.Module(body=[statement], type_ignores=[])
            run(compile(module, path, "exec"), f"line {statement.lineno}")
        for call, where in entry_points(tree, namespace, targets, path):
            for truthy, equal_at in RUNS:
                Flags.truthy, Flags.equal_at, Flags.comparisons = truthy, equal_at, 0
                run(call, where)
        Flags.truthy, Flags.equal_at = True, None
    finally:
        sys.meta_path.remove(finder)
        sys.argv = old_argv
    outcome.reached = sorted(reached & targets)
    # A failure of the stand-ins in a run that reached every target is harmless.
    if set(outcome.reached) == targets:
        outcome.standin_failures = []
    outcome.rejections = sorted(set(outcome.rejections))
    return outcome


def importable(name: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


_DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom)


def _is_main_guard(statement: ast.stmt) -> bool:
    return isinstance(statement, ast.If) and "__main__" in ast.unparse(statement.test)


def _holds(node: ast.AST, targets: set[int]) -> bool:
    return any(line in targets for line in range(node.lineno, node.end_lineno + 1))  # type: ignore[attr-defined]


def entry_points(
    tree: ast.Module, namespace: Namespace, targets: set[int], path: str
) -> Iterator[tuple[Callable[[], Any], str]]:
    """Calls of the functions and methods that hold a target, with stand-in arguments."""
    for statement in tree.body:
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if _holds(statement, targets) and statement.name in namespace:
                function: Callable[..., Any] = namespace[statement.name]

                def call(function: Callable[..., Any] = function) -> None:
                    function(*standin_arguments(function))

                yield call, f"{statement.name}()"
        elif isinstance(statement, ast.ClassDef) and _holds(statement, targets):
            cls = namespace.get(statement.name)
            if cls is None:
                continue
            methods = [
                m.name
                for m in statement.body
                if isinstance(m, ast.FunctionDef) and _holds(m, targets) and m.name != "__init__"
            ]

            def construct_and_call(cls: Any = cls, methods: list[str] = methods) -> None:
                instance = cls.__new__(cls)
                if "__init__" in cls.__dict__:
                    init = cls.__init__
                    init(instance, *standin_arguments(init)[1:])
                for name in methods:
                    method = getattr(instance, name)
                    method(*standin_arguments(method))

            yield construct_and_call, f"{statement.name}(...)"


def standin_arguments(function: Callable[..., Any]) -> list[Any]:
    """A stand-in for every parameter without a default (``self`` included for functions)."""
    import inspect

    values = []
    for parameter in inspect.signature(function).parameters.values():
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            continue
        if parameter.default is not parameter.empty:
            continue
        if parameter.kind is parameter.KEYWORD_ONLY:
            continue
        value = hyper_parameter(parameter.name)
        if "optim" in parameter.name.lower():
            value = plain_optimizer()  # an optimizer the caller built
        elif parameter.name in ("params", "parameters"):
            value = list(StandIn(parameter.name).parameters())  # tensors the caller gathered
        values.append(StandIn(parameter.name) if value is NO_VALUE else value)
    return values


def cpu_for_cuda() -> None:
    """Fixtures that only some rules migrate keep their CUDA calls, and migrated ones name the
    ``"npu"`` device: on this CPU machine, as the shim does for ``.npu()``, ``.cuda()`` and
    ``.to("cuda"/"npu")`` stay on the CPU, and a DDP wrap of a CPU model drops its GPU
    ``device_ids``."""
    import torch

    torch.nn.Module.cuda = lambda self, *args, **kwargs: self  # type: ignore[method-assign]
    torch.Tensor.cuda = lambda self, *args, **kwargs: self  # type: ignore[method-assign]
    module_to, tensor_to = torch.nn.Module.to, torch.Tensor.to

    def on_cpu(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        def cpu(value: Any) -> Any:
            return "cpu" if str(value).startswith(("npu", "cuda")) else value

        return tuple(cpu(a) for a in args), {k: cpu(v) for k, v in kwargs.items()}

    def module_on_cpu(self: Any, *args: Any, **kwargs: Any) -> Any:
        args, kwargs = on_cpu(args, kwargs)
        return module_to(self, *args, **kwargs)

    def tensor_on_cpu(self: Any, *args: Any, **kwargs: Any) -> Any:
        args, kwargs = on_cpu(args, kwargs)
        return tensor_to(self, *args, **kwargs)

    torch.nn.Module.to = module_on_cpu  # type: ignore[method-assign]
    torch.Tensor.to = tensor_on_cpu  # type: ignore[method-assign]
    ddp = torch.nn.parallel.DistributedDataParallel
    original_init = ddp.__init__

    def init(self: Any, module: Any, *args: Any, **kwargs: Any) -> None:
        kwargs.pop("device_ids", None)
        kwargs.pop("output_device", None)
        original_init(self, module, **kwargs)

    ddp.__init__ = init  # type: ignore[method-assign]


def main() -> None:
    global StandIn
    import argparse
    import warnings

    warnings.simplefilter("ignore")
    StandIn = make_standin_class()
    # Command lines are stand-ins too: their flags take both values, their values the ones above.
    argparse.ArgumentParser.parse_args = lambda *a, **k: StandIn("args")  # type: ignore[method-assign]
    argparse.ArgumentParser.parse_known_args = (  # type: ignore[method-assign]
        lambda *a, **k: (StandIn("args"), [])
    )
    request_path, answer_path = sys.argv[1:3]
    cpu_for_cuda()
    # One process of a world of one, so that DDP wraps and combine_ddp find a process group.
    import torch.distributed

    store = Path(answer_path).with_name("process-group")
    torch.distributed.init_process_group(
        "gloo", init_method=f"file://{store}", rank=0, world_size=1
    )
    request: dict[str, str] = json.loads(Path(request_path).read_text())
    answer = {label: exercise(path).__dict__ for label, path in request.items()}
    Path(answer_path).write_text(json.dumps(answer))


if __name__ == "__main__":
    main()
