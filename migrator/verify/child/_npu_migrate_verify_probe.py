"""The recording probe that ``npu-migrate verify`` installs in the programs it runs.

Loaded by this folder's ``sitecustomize`` in the child process only; it never edits the user's
files and imports nothing heavy at start-up: its torch, numpy and ``apex.amp`` patches are
applied right after the program itself imports those modules (an import hook), so the program's
own start-up (environment variables set before ``import torch``, import order) is unchanged.

What it does, driven by environment variables set by the parent (``migrator/verify/launch.py``):

- seeds ``random`` at start-up, ``numpy`` and ``torch`` as they are imported, and runs torch on one
  thread; data-loader workers are seeded by torch from the seeded main process;
- records the value of every scalar that ``backward()`` is called on (the unscaled loss when it
  went through ``amp.scale_loss`` or a ``GradScaler``), and after each optimizer ``step()`` a
  digest of that optimizer's parameters: every entry of small tensors, an evenly spread sample of
  ``DIGEST_ENTRIES`` entries of larger ones;
- groups them into training steps (one step of each optimizer the program steps per iteration),
  appends each finished step to ``record-<pid>.jsonl`` and, after the requested number of steps,
  stops the program with ``SystemExit(0)``;
- with ``NPU_MIGRATE_VERIFY_SYNTHETIC``, replaces what each ``DataLoader`` yields with fixed random
  batches shaped like its first real batch;
- records the autocast regions the program enters in each step, as requested (device type,
  dtype, enabled), so that a migration that turns autocast off (or changes its dtype) is seen
  even where autocast itself cannot run;
- with ``NPU_MIGRATE_VERIFY_ACCELERATOR``, emulates an accelerator on the CPU for both sides:
  ``torch.cuda`` / ``torch.npu`` say one device is available, ``"cuda"`` / ``"npu"`` devices,
  ``.cuda()`` and ``pin_memory()`` leave tensors on the CPU, and autocast and ``GradScaler`` on
  the accelerator run as the CPU's, in the requested dtype; the two sides then take their
  accelerator paths and compute the same arithmetic where they request the same;
- records an uncaught exception (and, when it is a missing file, the path) for the parent's
  error message.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import gc
import importlib.abc
import importlib.machinery
import importlib.util
import inspect
import json
import os
import random
import re
import sys
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import ModuleType, TracebackType
from typing import Any

DIGEST_ENTRIES = 1024  # per tensor; bounds the record of a large model to a few MB per step
WRAPPERS = frozenset({"DistributedDataParallel", "DataParallel"})  # their params are `module.*`
DATA_CODE = (f"torch{os.sep}utils{os.sep}data", f"torchvision{os.sep}datasets")
# Device types of an accelerator (the privateuse1 backend is torch_npu's `npu`).
ACCELERATOR_TYPES = frozenset({"cuda", "npu", "privateuseone"})
# What autocast computes in when no dtype is asked for (torch's defaults).
DEFAULT_AUTOCAST_DTYPE = {"accelerator": "float16", "cpu": "bfloat16"}
MISSING_FILE = re.compile(r"No such file or directory: '([^']+)'")


class Recorder:
    """Losses and parameter digests of this process, grouped into training steps."""

    def __init__(self, folder: str, steps: int, seed: int) -> None:
        self.path = os.path.join(folder, f"record-{os.getpid()}.jsonl")
        self.wanted = steps
        self.seed = seed
        self.finished = 0  # steps written so far
        self.current: dict[str, Any] | None = None
        self.current_optimizers: list[int] = []  # ids of the optimizers stepped in the current step
        self.slots: int | None = None  # optimizer steps per training step, known after the first
        self.pending_losses: list[float] = []
        self.pending_autocast: list[dict[str, Any]] = []  # regions entered since the last step
        # Each optimizer's parameters before its first step, by id (see before_first_step).
        self.initial: dict[int, dict[str, Any] | None] = {}
        self.step_depth = 0
        self.backward_depth = 0
        self.scaled: dict[int, tuple[weakref.ref[Any], float]] = {}
        self.names: dict[int, tuple[weakref.ref[Any], str]] = {}
        self.names_scanned_at = -1
        self.synthetic_layouts: list[str] = []
        self.synthetic_failure: str | None = None
        self.synthetic_loaders = 0
        self.error: dict[str, Any] | None = None
        self.stopped = False
        self.ended = False

    # -- what the hooks call ---------------------------------------------------------------------

    def on_backward(self, tensors: Any) -> None:
        import torch

        if self.stopped:
            return
        items = [tensors] if isinstance(tensors, torch.Tensor) else list(tensors)
        for tensor in items:
            if isinstance(tensor, torch.Tensor) and tensor.numel() == 1:
                self.pending_losses.append(self.unscaled(tensor))

    def on_autocast(self, request: dict[str, Any]) -> None:
        """An autocast region is entered (``request``: its device, dtype and enabled flag, as
        the program asked for them)."""
        if not self.stopped and request not in self.pending_autocast:
            self.pending_autocast.append(request)

    def note_scaled(self, scaled: Any, loss: Any) -> None:
        """``scaled`` is ``loss`` times a loss scale: record ``loss`` when it is backpropagated."""
        import torch

        if isinstance(scaled, torch.Tensor) and scaled is not loss and loss.numel() == 1:
            self.scaled[id(scaled)] = (weakref.ref(scaled), float(loss.detach().float()))

    def unscaled(self, tensor: Any) -> float:
        entry = self.scaled.pop(id(tensor), None)
        if entry is not None and entry[0]() is tensor:
            return entry[1]
        return float(tensor.detach().float())

    def before_first_step(self, optimizer: Any) -> None:
        """Before an optimizer's first ``step()``: its parameters as training found them, which
        the comparison of a run that adds mixed precision measures updates from."""
        if self.stopped or id(optimizer) in self.initial:
            return
        self.initial[id(optimizer)] = self.digest(optimizer)

    def on_step(self, optimizer: Any) -> None:
        """After the outermost ``step()`` of an optimizer (nested ones are its internals)."""
        if self.stopped:
            return
        process_rank()  # remember the rank while the process group is up
        if (
            self.current is not None
            and self.slots is None
            and id(optimizer) in self.current_optimizers
        ):
            # The first optimizer to step twice starts the second training step: now we know how
            # many optimizer steps make one training step (two in a GAN).
            self.slots = len(self.current_optimizers)
            self.close_step()
            if self.finished >= self.wanted:
                self.stop()
        if self.current is None:
            self.current = {"losses": [], "optimizers": [], "autocast": [], "initial": []}
            self.current_optimizers = []
        self.current["losses"].extend(self.pending_losses)
        self.pending_losses = []
        for request in self.pending_autocast:
            if request not in self.current["autocast"]:
                self.current["autocast"].append(request)
        self.pending_autocast = []
        self.current["optimizers"].append(self.digest(optimizer))
        # The digest from before this optimizer's first step, once (null at later steps).
        self.current["initial"].append(self.initial.get(id(optimizer)))
        self.initial[id(optimizer)] = None
        self.current_optimizers.append(id(optimizer))
        if self.slots is not None and len(self.current_optimizers) == self.slots:
            self.close_step()
            if self.finished >= self.wanted:
                self.stop()

    # -- steps and records -----------------------------------------------------------------------

    def close_step(self) -> None:
        if self.current is None:
            return
        rank, world_size = process_rank()
        line = {"kind": "step", "rank": rank, "world_size": world_size, "amp": amp_facts()}
        line.update(self.current)
        self.append(line)
        self.current = None
        self.finished += 1
        self.scaled.clear()  # scaled losses never backpropagated

    def append(self, line: dict[str, Any]) -> None:
        with open(self.path, "a", encoding="utf-8") as sink:
            sink.write(json.dumps(line) + "\n")

    def finish(self) -> None:
        """At exit: the last (possibly shorter) step, and how the process ended."""
        if self.ended:
            return
        self.ended = True
        if self.current is not None and not self.stopped:
            self.close_step()
        if not (self.finished or self.error or self.synthetic_failure or self.synthetic_layouts):
            return  # a helper process (a launcher, a data-loader worker): nothing to say
        rank, world_size = process_rank()
        self.append(
            {
                "kind": "end",
                "rank": rank,
                "world_size": world_size,
                "stopped": self.stopped,
                "error": self.error,
                "synthetic_layouts": self.synthetic_layouts,
                "synthetic_failure": self.synthetic_failure,
            }
        )

    def stop(self) -> None:
        """Enough steps: end the program the way ``sys.exit(0)`` would (``finally`` blocks run)."""
        self.stopped = True
        self.finish()
        distributed = sys.modules.get("torch.distributed")
        if distributed is not None and distributed.is_available() and distributed.is_initialized():
            # Every rank stops after the same step, so no collective is left waiting.
            distributed.destroy_process_group()
        raise SystemExit(0)

    # -- parameter digests -----------------------------------------------------------------------

    def digest(self, optimizer: Any) -> dict[str, Any]:
        params = [p for group in optimizer.param_groups for p in group["params"]]
        if any(self.name_of(p) is None for p in params) and self.names_scanned_at != self.finished:
            self.scan_names(optimizer)
        lrs = [float(group["lr"]) for group in optimizer.param_groups if "lr" in group]
        return {
            "class": f"{type(optimizer).__module__}.{type(optimizer).__qualname__}",
            "lr": max(lrs, default=0.0),
            "params": [
                {"name": self.name_of(p), "shape": list(p.shape), "values": sample(p)}
                for p in params
            ],
        }

    def name_of(self, param: Any) -> str | None:
        entry = self.names.get(id(param))
        return entry[1] if entry is not None and entry[0]() is param else None

    def scan_names(self, optimizer: Any) -> None:
        """Name parameters after the models that hold them (``layer1.0.conv1.weight``)."""
        import torch

        self.names_scanned_at = self.finished
        # type(), not isinstance(): a lazy object's __class__ could run code (and warn).
        modules = [obj for obj in gc.get_objects() if issubclass(type(obj), torch.nn.Module)]
        children = {id(child) for module in modules for child in module.children()}
        for root in modules:
            if id(root) in children:
                continue
            while type(root).__name__ in WRAPPERS and isinstance(
                getattr(root, "module", None), torch.nn.Module
            ):
                root = root.module
            for name, param in root.named_parameters():
                self.names[id(param)] = (weakref.ref(param), name)
        # amp O2 steps fp32 master copies of the model's half parameters: name them alike.
        stash = getattr(optimizer, "_amp_stash", None)
        for half, master in zip(
            getattr(stash, "half_params", ()), getattr(stash, "master_params", ()), strict=False
        ):
            name = self.name_of(half)
            if name is not None:
                self.names[id(master)] = (weakref.ref(master), name)

    # -- errors ----------------------------------------------------------------------------------

    def on_uncaught(self, error: BaseException, trace: TracebackType | None) -> None:
        import traceback

        message = str(error)
        missing = getattr(error, "filename", None) if isinstance(error, FileNotFoundError) else None
        if missing is None:
            match = MISSING_FILE.search(message)
            missing = match.group(1) if match else None
        self.error = {
            "type": type(error).__name__,
            "message": message[-3000:],
            "traceback": "".join(traceback.format_exception(type(error), error, trace))[-4000:],
            "missing_path": None if missing is None else str(missing),
            "in_data_loading": in_data_loading(trace, message),
        }


def sample(param: Any) -> list[float]:
    """Every entry of a small tensor; evenly spread entries (the same on both sides) of a large
    one."""
    import torch

    flat = param.detach().reshape(-1)
    if flat.numel() > DIGEST_ENTRIES:
        index = torch.linspace(0, flat.numel() - 1, DIGEST_ENTRIES, dtype=torch.float64)
        flat = flat[index.round().long()]
    values: list[float] = flat.double().tolist()
    return values


def in_data_loading(trace: TracebackType | None, message: str) -> bool:
    """Whether the error was raised while building or reading a data set."""
    if "DataLoader worker" in message:
        return True
    while trace is not None:
        frame = trace.tb_frame
        if any(part in frame.f_code.co_filename for part in DATA_CODE):
            return True
        owner = frame.f_locals.get("self")
        data = sys.modules.get("torch.utils.data")
        if data is not None and isinstance(owner, data.Dataset | data.DataLoader):
            return True
        trace = trace.tb_next
    return False


_last_group: list[tuple[int, int]] = []  # the rank seen while a process group was up


def process_rank() -> tuple[int, int]:
    """This process's rank and world size: its process group's, or the one it had before it
    destroyed the group (the last step is written at exit), else torchrun's variables."""
    distributed = sys.modules.get("torch.distributed")
    if distributed is not None and distributed.is_available() and distributed.is_initialized():
        _last_group[:] = [(distributed.get_rank(), distributed.get_world_size())]
    if _last_group:
        return _last_group[0]
    return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))


def amp_facts() -> dict[str, str] | None:
    """apex amp's opt level and the dtype it computes in, when ``amp.initialize`` was called."""
    state_module = sys.modules.get("apex.amp._amp_state")
    casting = sys.modules.get("apex.amp._casting")
    if state_module is None or casting is None:
        return None
    state = state_module._amp_state
    properties = state.opt_properties
    if not state.initialized or properties is None or not properties.enabled:
        return None
    half = str(casting.half_dtype_for("cpu")).removeprefix("torch.")
    return {"opt_level": str(properties.opt_level), "half_dtype": half}


# -- synthetic data --------------------------------------------------------------------------------


def like(value: Any, generator: Any) -> Any:
    """A random value with the structure, shapes and dtypes of ``value`` (integers in its range)."""
    import torch

    if isinstance(value, torch.Tensor):
        if value.numel() == 0 or value.is_complex():
            return value.clone()
        if value.dtype == torch.bool:
            return torch.randint(0, 2, value.shape, generator=generator).bool()
        if value.is_floating_point():
            return torch.randn(value.shape, generator=generator).to(value.dtype)
        low, high = int(value.min()), int(value.max())
        return torch.randint(low, high + 1, value.shape, generator=generator).to(value.dtype)
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a named tuple
        return type(value)(*(like(item, generator) for item in value))
    if isinstance(value, list | tuple):
        return type(value)(like(item, generator) for item in value)
    if isinstance(value, Mapping):
        items = {key: like(item, generator) for key, item in value.items()}
        kind: Any = type(value)  # dict, OrderedDict, a UserDict such as BatchEncoding
        try:
            return kind(items)
        except TypeError:
            return items
    return value  # strings, numbers, None: kept as in the first batch


def layout(value: Any) -> str:
    """``float32[8, 3, 16, 16], int64[8]``: the tensors of a batch, for the report."""
    import torch

    if isinstance(value, torch.Tensor):
        return f"{str(value.dtype).removeprefix('torch.')}{list(value.shape)}"
    if isinstance(value, Mapping):
        return ", ".join(f"{key}: {layout(item)}" for key, item in value.items())
    if isinstance(value, list | tuple):
        return ", ".join(layout(item) for item in value)
    return type(value).__name__


def synthetic_iter(recorder: Recorder, real_iter: Callable[[Any], Iterator[Any]]) -> Any:
    """A ``DataLoader.__iter__`` that reads one real batch, then yields random ones like it."""

    def __iter__(loader: Any) -> Iterator[Any]:
        real = real_iter(loader)
        try:
            first = next(real)
        except StopIteration:
            recorder.synthetic_failure = "a DataLoader yielded no batch at all"
            raise RuntimeError(
                "npu-migrate verify --synthetic-data: the DataLoader is empty, so there is no "
                "batch to copy the shapes of"
            ) from None
        except Exception as error:
            recorder.synthetic_failure = (
                f"reading the first real batch failed ({type(error).__name__}: {error})"
            )
            raise
        del real  # shuts its workers down
        recorder.synthetic_layouts.append(layout(first))
        try:
            count: int | None = len(loader)
        except TypeError:  # an IterableDataset without a length: until the program stops
            count = None
        import torch

        rank, _ = process_rank()
        seed = recorder.seed * 1_000_003 + rank * 7_919 + recorder.synthetic_loaders
        recorder.synthetic_loaders += 1
        generator = torch.Generator().manual_seed(seed)
        return batches(first, generator, count)

    return __iter__


def batches(first: Any, generator: Any, count: int | None) -> Iterator[Any]:
    produced = 0
    while count is None or produced < count:
        yield like(first, generator)
        produced += 1


# -- installing ------------------------------------------------------------------------------------


class _CallbackLoader(importlib.abc.Loader):
    """Runs the wrapped loader, then a callback on the fresh module."""

    def __init__(self, loader: Any, callback: Callable[[ModuleType], None]) -> None:
        self._loader = loader
        self._callback = callback

    def __getattr__(self, name: str) -> Any:  # resource readers and the like
        return getattr(self._loader, name)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        created: ModuleType | None = self._loader.create_module(spec)
        return created

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        module.__loader__ = self._loader
        if module.__spec__ is not None:
            module.__spec__.loader = self._loader
        self._callback(module)


class _AfterImport(importlib.abc.MetaPathFinder):
    """Calls back right after a module named in ``callbacks`` is first imported."""

    def __init__(self, callbacks: dict[str, Callable[[ModuleType], None]]) -> None:
        self.callbacks = callbacks
        self.searching: set[str] = set()

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self.callbacks or fullname in self.searching:
            return None
        self.searching.add(fullname)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self.searching.discard(fullname)
        if spec is not None and spec.loader is not None:
            spec.loader = _CallbackLoader(spec.loader, self.callbacks.pop(fullname))
        return spec


def observe_subclass_steps(
    base: type[Any],
    before: Callable[[Any, Any, Any], None],
    after: Callable[[Any, Any, Any], None],
) -> None:
    """Run ``before`` / ``after`` around the ``step`` of every subclass of torch's Optimizer
    the program defines. torch's global step hooks reach a subclass's ``step`` only once
    ``Optimizer.__init__`` or ``Optimizer.zero_grad`` patched it: an optimizer wrapper that
    calls neither (timm's ``Lookahead``, given its own ``zero_grad``) would be missed, and its
    wrapped optimizer's step taken for the outermost one, before the wrapper's own update.
    Nested calls are counted by depth, as the hooks' are."""

    def observed(step: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(step)
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            before(self, args, kwargs)
            result = step(self, *args, **kwargs)
            after(self, args, kwargs)
            return result

        return wrapper

    def init_subclass(cls: type, **kwargs: Any) -> None:
        super(base, cls).__init_subclass__(**kwargs)
        step = cls.__dict__.get("step")
        if inspect.isfunction(step):
            cls.step = observed(step)  # type: ignore[attr-defined]

    base.__init_subclass__ = classmethod(init_subclass)  # type: ignore[assignment]


def patch_torch(recorder: Recorder, synthetic: bool, emulate: bool, torch: ModuleType) -> None:
    import torch.optim.optimizer as optim

    torch.manual_seed(recorder.seed)
    torch.set_num_threads(1)

    def before_step(optimizer: Any, args: Any, kwargs: Any) -> None:
        if recorder.step_depth == 0:
            recorder.before_first_step(optimizer)
        recorder.step_depth += 1

    def after_step(optimizer: Any, args: Any, kwargs: Any) -> None:
        recorder.step_depth -= 1
        if recorder.step_depth == 0:
            recorder.on_step(optimizer)

    optim.register_optimizer_step_pre_hook(before_step)
    optim.register_optimizer_step_post_hook(after_step)
    observe_subclass_steps(optim.Optimizer, before_step, after_step)

    real_backward = torch.autograd.backward

    @functools.wraps(real_backward)
    def backward(tensors: Any, *args: Any, **kwargs: Any) -> Any:
        if recorder.backward_depth == 0:  # not a backward run inside another (checkpointing)
            recorder.on_backward(tensors)
        recorder.backward_depth += 1
        try:
            return real_backward(tensors, *args, **kwargs)
        finally:
            recorder.backward_depth -= 1

    torch.autograd.backward = backward

    real_scale = torch.amp.GradScaler.scale

    @functools.wraps(real_scale)
    def scale(self: Any, outputs: Any) -> Any:
        scaled = real_scale(self, outputs)
        recorder.note_scaled(scaled, outputs)
        return scaled

    torch.amp.GradScaler.scale = scale
    patch_autocast(recorder, emulate, torch)
    if synthetic:
        loader_class = torch.utils.data.DataLoader
        loader_class.__iter__ = synthetic_iter(recorder, loader_class.__iter__)


# -- autocast, and an accelerator emulated on the CPU ----------------------------------------------


def is_accelerator(device: Any) -> bool:
    """``"cuda"``, ``"npu:0"``, ``torch.device("cuda", 1)``, or a bare index (CUDA's)."""
    if isinstance(device, bool):
        return False
    if isinstance(device, int):
        return True
    if isinstance(device, str):
        return device.split(":")[0] in ACCELERATOR_TYPES
    return getattr(device, "type", None) in ACCELERATOR_TYPES


def autocast_request(device_type: Any, dtype: Any, enabled: Any) -> dict[str, Any]:
    kind = "accelerator" if is_accelerator(str(device_type)) else str(device_type)
    shown = str(dtype).removeprefix("torch.") if dtype is not None else None
    return {
        "device": kind,
        "dtype": shown or DEFAULT_AUTOCAST_DTYPE.get(kind, "default"),
        "enabled": bool(enabled),
    }


def patch_autocast(recorder: Recorder, emulate: bool, torch: ModuleType) -> None:
    """Record each autocast region the program enters, as it asked for it; when emulating,
    run the accelerator's as the CPU's in the requested dtype."""
    base = torch.amp.autocast_mode.autocast
    real_init, real_enter = base.__init__, base.__enter__
    depth = [0]  # a subclass's __init__ calls the base's with its own arguments

    @functools.wraps(real_init)
    def __init__(
        self: Any,
        device_type: str,
        dtype: Any = None,
        enabled: bool = True,
        cache_enabled: bool | None = None,
    ) -> None:
        if depth[0] == 0 and not hasattr(self, "_npu_migrate_request"):
            self._npu_migrate_request = autocast_request(device_type, dtype, enabled)
        if emulate and is_accelerator(device_type):
            wanted = self._npu_migrate_request
            device_type, dtype = "cpu", getattr(torch, wanted["dtype"], dtype)
            enabled = wanted["enabled"]
        depth[0] += 1
        try:
            real_init(self, device_type, dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)
        finally:
            depth[0] -= 1

    @functools.wraps(real_enter)
    def __enter__(self: Any) -> Any:
        request = getattr(self, "_npu_migrate_request", None)
        if request is not None:
            recorder.on_autocast(request)
        return real_enter(self)

    base.__init__ = __init__
    base.__enter__ = __enter__
    if emulate:
        emulate_accelerator(torch)


def emulate_accelerator(torch: ModuleType) -> None:
    """An accelerator backed by the CPU, for both sides alike (see the module docstring)."""
    runtime = torch.cuda
    answers = {
        "is_available": True,
        "device_count": 1,
        "current_device": 0,
        "is_initialized": True,
        "is_bf16_supported": True,
        "get_device_name": "emulated accelerator (CPU)",
        "memory_allocated": 0,
        "max_memory_allocated": 0,
        "memory_reserved": 0,
        "max_memory_reserved": 0,
    }
    for name, answer in answers.items():
        setattr(runtime, name, lambda *args, _answer=answer, **kwargs: _answer)
    for name in (
        "set_device", "synchronize", "empty_cache", "manual_seed", "manual_seed_all", "seed",
        "seed_all", "reset_peak_memory_stats", "init",
    ):  # fmt: skip
        setattr(runtime, name, lambda *args, **kwargs: None)
    scaler = torch.amp.GradScaler
    real_scaler_init = scaler.__init__

    @functools.wraps(real_scaler_init)
    def scaler_init(self: Any, device: str = "cuda", *args: Any, **kwargs: Any) -> None:
        real_scaler_init(self, "cpu" if is_accelerator(device) else device, *args, **kwargs)

    scaler.__init__ = scaler_init
    OnCpu = accelerator_on_cpu(torch)
    OnCpu().__enter__()  # for the rest of the process


def accelerator_on_cpu(torch: ModuleType) -> type:
    """A torch function mode that puts what the program sends to the accelerator on the CPU."""
    tensor = torch.Tensor
    staying = {tensor.cuda, tensor.pin_memory}
    mode: Any = torch.overrides.TorchFunctionMode

    class AcceleratorOnCpu(mode):  # type: ignore[misc,valid-type]
        def __torch_function__(
            self, func: Any, types: Any, args: Any = (), kwargs: Any = None
        ) -> Any:
            kwargs = dict(kwargs or {})
            if func in staying:
                return args[0]
            if is_accelerator(kwargs.get("device", "cpu")):
                kwargs["device"] = "cpu"
            if func is tensor.to and len(args) > 1 and is_accelerator(args[1]):
                args = (args[0], "cpu", *args[2:])
            return func(*args, **kwargs)

    return AcceleratorOnCpu


def patch_npu(recorder: Recorder, emulate: bool, torch_npu: ModuleType) -> None:
    """The torch_npu stand-in: its ``torch.npu.amp.autocast`` asks the base class for a
    disabled CPU region, so its request is recorded here; when emulating, its device is
    available and its autocast and GradScaler work as the CPU's."""
    import torch

    amp = sys.modules.get("torch_npu.npu.amp")
    npu = sys.modules.get("torch_npu.npu")
    if amp is None or npu is None:
        return
    base = torch.amp.autocast_mode.autocast

    def autocast_init(
        self: Any, enabled: bool = True, dtype: Any = torch.float16, cache_enabled: bool = True
    ) -> None:
        self._npu_migrate_request = autocast_request("npu", dtype, enabled)
        if emulate:
            base.__init__(self, "npu", dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)
        else:
            real_autocast_init(self, enabled=enabled, dtype=dtype, cache_enabled=cache_enabled)

    real_autocast_init = amp.autocast.__init__
    amp.autocast.__init__ = autocast_init
    if not emulate:
        return
    for name, answer in (("is_available", True), ("device_count", 1), ("is_bf16_supported", True)):
        setattr(npu, name, lambda *args, _answer=answer, **kwargs: _answer)

    def scaler_init(
        self: Any,
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
        enabled: bool = True,
        **kwargs: Any,
    ) -> None:
        torch.amp.GradScaler.__init__(
            self, "npu", init_scale, growth_factor, backoff_factor, growth_interval, enabled
        )

    amp.GradScaler.__init__ = scaler_init


def patch_amp(recorder: Recorder, amp: ModuleType) -> None:
    real_scale_loss = amp.scale_loss

    @contextlib.contextmanager
    @functools.wraps(real_scale_loss)
    def scale_loss(loss: Any, *args: Any, **kwargs: Any) -> Iterator[Any]:
        with real_scale_loss(loss, *args, **kwargs) as scaled:
            recorder.note_scaled(scaled, loss)
            yield scaled

    amp.scale_loss = scale_loss  # type: ignore[attr-defined]


def seed_numpy(seed: int, numpy: ModuleType) -> None:
    numpy.random.seed(seed)


def put_shim_first() -> None:
    """Make ``import torch_npu`` import the runtime's CPU stand-in."""
    try:
        from apex.testing.npu_shim import npu_shim_path
    except ImportError as error:
        sys.stderr.write(
            "npu-migrate verify: the migrated program needs the apex runtime's torch_npu "
            f"stand-in, and this Python cannot import it ({error}); install the runtime "
            "(pip install -e runtime, see README)\n"
        )
        sys.stderr.flush()
        os._exit(3)
    sys.path.insert(0, npu_shim_path())


def install() -> None:
    environ = os.environ
    seed = int(environ.get("NPU_MIGRATE_VERIFY_SEED", "0"))
    recorder = Recorder(
        environ["NPU_MIGRATE_VERIFY_RECORDS"],
        int(environ.get("NPU_MIGRATE_VERIFY_STEPS", "5")),
        seed,
    )
    random.seed(seed)
    if environ.get("NPU_MIGRATE_VERIFY_SHIM"):
        put_shim_first()
    synthetic = bool(environ.get("NPU_MIGRATE_VERIFY_SYNTHETIC"))
    emulate = bool(environ.get("NPU_MIGRATE_VERIFY_ACCELERATOR"))
    callbacks: dict[str, Callable[[ModuleType], None]] = {
        "torch": functools.partial(patch_torch, recorder, synthetic, emulate),
        "torch_npu": functools.partial(patch_npu, recorder, emulate),
        "numpy": functools.partial(seed_numpy, seed),
        "apex.amp": functools.partial(patch_amp, recorder),
    }
    for name in [name for name in callbacks if name in sys.modules]:
        # Imported before the program started: by the process verify forks the programs from
        # (it imports torch once for all of them), or by a shadowed ``sitecustomize``.
        callbacks.pop(name)(sys.modules[name])
    sys.meta_path.insert(0, _AfterImport(callbacks))

    previous_hook = sys.excepthook

    def excepthook(kind: type[BaseException], error: BaseException, trace: Any) -> None:
        recorder.on_uncaught(error, trace)
        previous_hook(kind, error, trace)

    sys.excepthook = excepthook
    atexit.register(recorder.finish)
