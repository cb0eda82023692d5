"""NPU101: torch / apex optimizer constructors that have an NPU fused version."""

from __future__ import annotations

import ast
from collections.abc import Callable, Mapping, Sequence
from functools import cache, partial

from migrator.analysis.calls import Argument, arguments
from migrator.analysis.clipping import class_of
from migrator.analysis.effects import CallNames
from migrator.callargs import (
    add_keyword_only,
    append_arg,
    expression_as_written,
    keyword,
    no_space_equal,
    remove_arg_objects,
)
from migrator.callargs import argument as find_argument
from migrator.edits import NodeEdit
from migrator.lazy_imports import cst
from migrator.rule import FixSafety, Rule
from migrator.rules.normalization_parallel._ddp_order import (
    DDP_ORDER_KEY,
    MOVING_CODE,
    plan_ddp_order,
)
from migrator.rules.optimizers import _configs
from migrator.rules.optimizers._factories import (
    PASSED_CONDITION,
    OptimizerFactories,
    factory_arguments,
    factory_facts,
    handed_facts,
    lightning_doubt,
    shared_workers,
)
from migrator.rules.optimizers._fused_planner import (
    CODE,
    AmpParameter,
    FuncStyle,
    ImportRewrite,
    Rewrite,
    plan_fused,
)
from migrator.rules.optimizers._handed import delegated_wrappers
from migrator.rules.optimizers._hazards import GradFix
from migrator.rules.optimizers._kwargs import KeyDrop, alone_in_block
from migrator.rules.optimizers._method_callers import caller_fixes, methods_facts
from migrator.rules.optimizers._planned_amp import PlannedAmp
from migrator.rules.optimizers._plans import (
    AddedAmp,
    CombinableUnfused,
    DdpMoves,
    DroppedKeys,
    Fp16Rewrites,
    FusedPlan,
    FusedPlans,
    FusedSwaps,
    OptLevelSwitch,
    switched_level,
)
from migrator.rules.optimizers._tables import OPTIMIZER_TRIGGER, TORCH_NPU_HOME
from migrator.settings import AmpPolicy, Settings

# The start of the message of the edit that gives an optimizer wrapper its own zero_grad (not a
# construction: tools/migration_rates.py leaves it out).
DELEGATED_ZERO_GRAD = "added `zero_grad` to "
# What an optimizer wrapper's added zero_grad is preceded by.
_DELEGATED_COMMENT = (
    "# The wrapped optimizer zeroes its own gradients (an NPU fused one, in place)."
)


class NpuFusedOptimizer(OptimizerFactories, Rule):
    """
    ## What it does
    Replaces `torch.optim.SGD/Adam/AdamW/Adadelta/RMSprop` and apex `FusedSGD/FusedAdam`
    constructors with the NPU fused optimizers. An optimizer that reaches `amp.initialize` in
    the same module (following assignments in program order: only those that run before the call
    count) becomes `apex.optimizers.NpuFused*` (Ascend apex); any other, and one that reaches
    only `amp.initialize(..., enabled=False)`, becomes `torch_npu.optim.NpuFused*`, which works
    without amp. An optimizer that reaches an `amp.initialize` whose literal `opt_level` is O0
    or O3, or O2 with `master_weights=False`, is reported and left unfused: Ascend apex refuses
    NPU fused optimizers of either home there. A level computed in the module is read over every
    arm it shows (`'O1' if use_mixed_precision else 'O0'`, an `if`/`else`, a dict of levels, the
    default of an `--opt-level` option): one O0 or O3 arm counts as that literal level, since
    that path must keep running. An `if` around the `amp.initialize` that tests the level itself
    settles it there (`if args.opt_level == 'O0':`, `elif level in ('O1', 'O2'):`, the `else`
    of `!=`), unless it lets O0 or O3 through together with O1 or O2. A level, master-weights
    flag or `enabled` computed at run time otherwise is named in the message as a requirement,
    and NPU102's `opt-level` switch counts when NPU102 runs. A constructor whose model never
    leaves the CPU in the file (a test) is left as it is: the fused optimizers pack on the NPU
    only. A constructor that a function
    returns to other modules of the run (`create_optimizer(args, model)` called from `train.py`)
    is placed by every call site of that function there: `apex.optimizers` when all of them pass
    it to `amp.initialize`, `torch_npu.optim` when none does, reported when one would be refused
    or when a caller's code breaks a fused optimizer (`model.zero_grad()`); the message names the
    calls and their `amp.initialize`. When some calls pass it to `amp.initialize` and some do not,
    or one does only under a condition, the function gets a required keyword-only `apex_amp`,
    each call passes `True`, `False` or that condition (when it reads the same at the call), the
    constructors pick `(apex.optimizers.X if apex_amp else torch_npu.optim.X)`, and a function
    of the module that returns a call of it passes it on; reported where that cannot be done
    (the function used as a value, decorated, a condition that calls a function). A function of
    the module whose own calls decide whether the optimizer meets a gated `amp.initialize`
    (a script's `create_optimizer` called by its `main()`) gets the same parameter. An
    optimizer handed to a function of the module, or to the constructor of a class of the
    module (`AmpTrainer(model, optimizer)`), is followed into its `amp.initialize`. Reported,
    because neither class is right on every path: an optimizer handed to a class or function
    of another module that passes it to apex's `amp.initialize` (a `Trainer(model,
    optimizer)` whose constructor calls it), and one that
    a function returns when the function is used as a value (FastSpeech's
    `Trainer(..., optimizer_fn=get_optimizer)`) where apex's `amp.initialize` is in sight. An
    optimizer whose `amp.initialize` runs, or enables amp, only under a condition that does not
    also guard its construction (`if args.amp: model, optimizer = amp.initialize(...)`, the
    shape of Ascend's ModelZoo scripts; `enabled=args.amp`) gets the class picked by that
    condition, `(apex.optimizers.NpuFusedSGD if args.amp else
    torch_npu.optim.NpuFusedSGD)(...)`, as ModelZoo's engineers migrated such scripts: apex's
    raises in `step()` without amp, and torch_npu's steps stale gradients under apex amp (which
    sets the gradients of any other optimizer to None before each backward). That is done where
    the condition reads the same at the constructor (same function, one condition, names and
    attributes not assigned in between, mappings read by a constant key, `config["amp"]`,
    `os.getenv("USE_AMP")`, that nothing in between stores into at that key, calls a method of
    or hands on; or, in a method of a trainer class, a condition on `self` read in the method
    that builds the optimizer, called only as `self.<method>(...)` by the method that runs amp,
    before it, and changing nothing the condition reads); otherwise the constructor is
    reported. With `amp =
    "always"` in [tool.npu-migrate] (or `--amp always`: the project trains with amp on) such an
    `amp.initialize` counts as reached: `apex.optimizers.NpuFused*`, and the path without amp
    raises at its first step, which the message says. Arguments are mapped: apex FusedAdam's
    `adam_w_mode` picks `NpuFusedAdamW` or `NpuFusedAdam`, and `weight_decay=0.0` is passed
    explicitly when FusedAdam relied on its default; performance-only switches (`foreach`,
    `fused`, `capturable`, `set_grad_none`, `materialize_master_grads`) are dropped.
    Keyword arguments forwarded with `**` are read where the function builds the dict (`{...}`,
    `dict(...)`, `a if c else b`, `kw["x"] = ...`, `kw.update(...)`, `kw.setdefault(...)`):
    the performance-only keys are removed there (`dict(fused=True) if use_fused else dict()`
    becomes `dict() if use_fused else dict()`) unless the dict also serves something else; a
    mapping the module does not show (`**kwargs`, `**self.optimizer_config`) is passed on, since
    every key the NPU class takes means the same as for the class it replaces and any other key
    raises TypeError when the optimizer is built. FusedAdam's default `weight_decay` is pinned
    ahead of such a mapping, which still overrides it:
    `NpuFusedAdamW(params, **{"weight_decay": 0.0, **self.optimizer_config})`.
    `getattr(torch.optim, name)(args)` gets a mapping next to the lookup,
    `{"SGD": torch_npu.optim.NpuFusedSGD, ...}.get(name, getattr(torch.optim, name))`, for the
    names whose NPU fused class takes `args` exactly as written; other names keep torch's class.
    Under an `if` that tests the name (`if cfg.OPTIMIZER_NAME == 'SGD':`) the lookup is that
    class, and the call is rewritten as its constructor would be (`NpuFusedSGD(params,
    momentum=..., lr=0.001)`: torch's SGD defaults `lr`, the NPU class requires it).
    A lookup whose class is only tested and put in a registry (mmcv's and mmengine's
    `register_torch_optimizers`: `_optim = getattr(torch.optim, name)`, `inspect.isclass`,
    `issubclass`, `OPTIMIZERS.register_module()(_optim)`) builds nothing: the configs that name
    the class are NPU107's, and the lookup is not reported.
    A name holding one of several classes when called (`Optimizer = torch.optim.SGD` or
    `torch.optim.AdamW`, `cls = O.AdamW if c else O.SGD`, `{"adamw": AdamW, ...}[name]`) is
    mapped by identity at the call, `{torch.optim.SGD: torch_npu.optim.NpuFusedSGD,
    ...}.get(cls, cls)(...)` (with `import torch` added where only `from torch.optim import ...`
    names the classes); any other value is called as before. A key of a `**mapping` stored
    in one arm of an `if` chain does not count against the class another arm picks (EDSR's
    `kwargs["betas"]` beside `optimizer_class = optim.Adam`). A class statement that only adds
    methods to such a name (EDSR's `class CustomOptimizer(optimizer_class)`: an `__init__` that
    forwards every argument, no name an optimizer defines, no read of its groups, state or
    gradients, built once) gets the mapping as its base. A function returning such a call, or
    a lookup, has its callers in other files followed as a factory's are.
    A class handed to a gradient-clipping wrapper and called, `maybe_add_full_model_gradient_
    clipping(torch.optim.SGD)(params, ...)` (DETR; a function of the module that returns the
    class, or a class it derives from it whose one method, `step`, clips the gradients in place
    and then runs the class's) or detectron2's `maybe_add_gradient_clipping(cfg,
    torch.optim.SGD)(...)`, is that class's construction: the class is rewritten where it is
    written (the clipping scales the gradients in place, which the flat buffer sees).
    Reported for manual migration, never rewritten: arguments that change the update and have no
    NPU equivalent (`maximize`, `differentiable`, `amsgrad=True`, FusedAdam
    `bias_correction=False`, FusedSGD `wd_after_momentum=True`), also inside a forwarded dict,
    and performance-only keys that cannot be dropped where the dict is built; an optimizer built
    through `**`, a name lookup or a class value that a method returns to callers npu-migrate
    does not follow or that would break it (a method's callers in other files of the run are
    followed: nanoGPT's `configure_optimizers` is swapped when every `model.configure_optimizers`
    of the run is on a `GPT` and keeps the optimizer working, and so is a trainer's
    `build_optimizer` when every `self.build_optimizer(...)` of its class, its bases and its
    subclasses does); apex `FusedLAMB`,
    `FusedNovoGrad`, `FusedAdagrad`, `FusedMixedPrecisionLamb`, Hugging Face's
    `transformers.AdamW` (info: it runs on NPU unfused, and no NPU fused optimizer has its
    arithmetic: `eps` added before the bias correction, weight decay after the update; NPU102
    names it where it keeps `combine_grad` off), name lookups that stay dynamic
    (`getattr(torch.optim, args.name.upper())`, `getattr(apex.optimizers, name)`),
    subclasses of these optimizers and `FP16_Optimizer` wrappers (and the optimizer they wrap,
    at its own line); an optimizer whose surrounding code breaks a fused one
    (`p.grad = None`, bf16 casts of its model, sparse embeddings, `model.zero_grad()` that cannot
    be fixed, also in the code of another module of the run that the optimizer is handed to:
    `mp_trainer.optimize(opt)`, where the optimizer's own `zero_grad()` is no hazard, reached
    through a parameter, an attribute, a list written in the call and unpacked there
    (`optim_g, optim_d = optims`) or `**kwargs`), or another optimizer built beside it from
    the same model's parameters; where these are looked for: docs/rules-optimizers.md); an
    optimizer whose parameters are re-allocated while it is in use, which breaks the contract
    of every NPU fused optimizer (the line that breaks it is named): a move away from the
    device or a cast of its model or of a submodule (`.cpu()`, `.to("cpu")`, `.to(<dtype>)`,
    `.half()`, `.bfloat16()`, `.double()`, `._apply(fn)`), a store to a parameter or its
    `.data`, `setattr` / `register_parameter` / `del` on the model, wherever one may run
    between two of its steps (an epoch-end `model.cpu()` checkpoint, directly or in a function
    of the module it calls), and parameters owned by a sharding or partitioning layer, in any
    order: FSDP (`FullyShardedDataParallel`, `fully_shard`), tensor and sequence parallelism
    (`parallelize_module`, DTensor parameters), DeepSpeed (`deepspeed.initialize` given the
    model or the optimizer), `ZeroRedundancyOptimizer`, `share_memory()` hogwild workers (also
    when another file of the run starts them), Accelerate's `accelerator.prepare(...)` and Lightning
    Fabric's `fabric.setup(...)` (the launch configuration, not the code, decides between DDP,
    FSDP and DeepSpeed), a LightningModule's optimizers unless every Lightning `Trainer(...)`
    of the run rules out a sharding strategy, an optimizer handed to Hugging Face's `Trainer`
    (whose loop calls `model.zero_grad()`); optimizer classes used as values that
    stay dynamic (`{"adam": FusedAdam}[name]`); an optimizer built after its model is wrapped
    in DDP that stays there (NPU203 cannot move it above the wrap, or does not run: Ascend
    documents that an optimizer built after DDP initialisation only takes effect on the main
    card, and a fused one re-packs the parameters and gradients DDP was set up with).

    Fixed along with the swap, because torch >= 2.0 sets gradients to None and that detaches
    them from the fused optimizer's flat buffer: `optimizer.zero_grad(set_to_none=True)` (or a
    plain flag) on the optimizer itself loses the argument, and `model.zero_grad()` gets
    `set_to_none=False` (and NVIDIA's `for p in model.parameters(): p.grad = None` becomes
    `model.zero_grad(set_to_none=False)`) when the optimizer holds all of `model.parameters()`
    (alone, or with other whole models: `itertools.chain(G.parameters(), E.parameters())`, a sum
    of lists, a starred list, parameter groups; or those that require gradients, `filter(lambda
    p: p.requires_grad, ...)`; or two groups that split its `named_parameters()` by one test of
    the names and its negation, BERT's `no_decay` groups; or each parameter, or a group per
    parameter, added on every path of a loop over them, faster-rcnn's `params += [{...}]` and
    deep-text-recognition-benchmark's `filtered.append(p)`) and no other optimizer in scope may
    hold them
    (each fused optimizer steps every parameter it packed, None or zero, so nothing else could
    see the zeros; several optimizers over the whole model do when one holds it at a time, on
    exclusive branches or each replacing the one before in the same name, and each is NPU fused
    after the run, swapped or as written); otherwise that is an unsafe fix, applied with
    `--unsafe-fixes` and reported with the reason without it. The optimizer's own
    `zero_grad(set_to_none=...)` in another file of the run that gets it from a method
    (nanoGPT's `train.py`) loses the argument in the same run as the swap. An optimizer wrapper
    class of another module of the run that a file building an optimizer calls (timm's
    `Lookahead`, vendored in a project, which `create_optimizer` returns for `--opt
    lookahead_sgd`) and that inherits torch's `Optimizer.zero_grad` gets a `zero_grad` of its
    own that runs the wrapped optimizer's, `return self.base_optimizer.zero_grad(*args,
    **kwargs)`, where the class keeps the optimizer its `__init__` is given in one attribute and
    shares its `param_groups`: for torch's optimizers the two zero the same gradients the same
    way, and an NPU fused optimizer it wraps zeroes its flat buffer in place. A wrapper that
    stores a new tensor in place of the wrapped optimizer's state or a parameter's `.data` (a
    Lookahead that resets momentum buffers) is a hazard for the optimizers it is handed. A
    wrapper npu-migrate cannot give a `zero_grad` (the installed timm's `Lookahead`) that wraps
    the optimizer only under `if` tests of the constructor's function (BEiT's and ConvNeXt's
    `create_optimizer`: `if len(opt_split) > 1: if opt_split[0] == 'lookahead': optimizer =
    Lookahead(optimizer)`) keeps the written class on those paths and gets the fused one on the
    others, `(optim.SGD if len(opt_split) > 1 and opt_split[0] == 'lookahead' else
    torch_npu.optim.NpuFusedSGD)(...)`, where the tests read the same at the constructor: names,
    attributes, constants, comparisons, `len(x)` and `x[i]`, nothing of it assigned in between,
    and `x` a new sequence of the function (`opt_lower.split('_')`) that is only indexed or
    measured; and where the arguments need no change for the NPU class. NVIDIA's `FusedSGD`,
    which runs nowhere on Ascend, gets torch's SGD (the same update) on those paths instead,
    when every key it may be given is a parameter of both classes or of neither and `lr` is
    always given. Otherwise it is reported, with the reason.

    The `amp.initialize` calls that NPU105 and NPU106 write in the same run count as if they
    were in the file: an optimizer wrapped in an `FP16_Optimizer` that NPU106 rewrites goes
    through amp O2 with master weights (on the paths its wrappers cover; the class is picked
    by the condition of the others); one NPU105 puts under amp goes through NPU105's level with
    `combine_grad=True`, and under NPU105's `--amp` switch the class is picked by it,
    `(apex.optimizers.X if args.amp else torch_npu.optim.X)(...)`.

    Ascend apex's own classes written by hand (`apex.optimizers.NpuFusedSGD/Adam/AdamW/
    Adadelta/RMSprop`, under any import spelling) raise in `step()` where they reach no
    `amp.initialize`; torch_npu's class of the same name takes the same arguments and makes the
    same update. They are planned as the torch constructors are, with that class as target:
    `torch_npu.optim.X` where the optimizer reaches no enabled `amp.initialize` and stays in
    the module's sight (assigned to a name that is only stepped, read, tested, or given to an
    LR scheduler, a GradScaler or a function of the module that does the same with it: never
    returned, stored or handed elsewhere, where another module's `amp.initialize` could get
    it); the class picked by amp's condition (`apex_amp` for a factory whose callers use amp on
    some paths, the condition of a gated `amp.initialize` in the module); left as written, with
    nothing to say, where every path goes through amp. The same hazard, contract and call-site
    checks hold first: where one blocks a swap, or the optimizer leaves the module's sight, the
    constructor is reported; where amp runs on some paths and no condition can pick the class,
    it is left as written and nothing is said, as before (its paths with amp train).

    ## Why
    The NPU fused optimizers keep parameters, gradients and optimizer states in a few flat
    buffers and update them with one kernel per buffer; the unfused ones launch kernels per
    tensor. Ascend apex's versions raise in `step()` unless the optimizer went through
    `amp.initialize`, which is why an optimizer outside amp gets torch_npu's version. Their
    contract, as Ascend documents it: the parameter objects handed to the optimizer must not be
    re-allocated while it is in use. They are packed into the flat buffers at the first step;
    a parameter re-allocated after that is no longer in a buffer and silently stops being
    updated. Moves before the first step (`optimizer = SGD(model.parameters()); model.cuda()`)
    or after the last one (an export), copies (`copy.deepcopy(model).cpu()`, `tensor.cpu()`,
    a CPU state dict), `load_state_dict` and in-place updates keep the contract and are
    rewritten.

    ## Example
    ```python
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    model, optimizer = amp.initialize(model, optimizer, opt_level="O2")
    ```

    ## Use instead
    ```python
    optimizer = apex.optimizers.NpuFusedSGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    model, optimizer = amp.initialize(model, optimizer, opt_level="O2")
    ```

    ## Fix safety
    Safe: the NPU fused optimizers compute the same update as the optimizers they replace, and
    any argument that would make them differ blocks the rewrite, as does an `amp.initialize`
    that would refuse them. `model.zero_grad(set_to_none=False)` where another optimizer may
    hold the module's parameters is an unsafe fix (`--unsafe-fixes`): that optimizer would see
    zeros where it skipped None gradients. Optimizer checkpoints keep their
    per-parameter state keys.
    """

    CODE = CODE
    NAME = "npu-fused-optimizer"
    SUMMARY = "optimizer constructor that has an NPU fused version"
    FIX_SAFETY = FixSafety.SAFE
    TRIGGER = OPTIMIZER_TRIGGER
    PROVIDES = (FusedPlans, DroppedKeys, CombinableUnfused)
    RUN_PLANS = (FusedSwaps,)
    # NPU102's opt-level switch decides which amp levels the optimizers will run with; NPU105
    # and NPU106 write `amp.initialize` calls that the optimizers they name go through.
    READS = (OptLevelSwitch, Fp16Rewrites, AddedAmp, DdpMoves)

    @classmethod
    def run_plans(cls, settings: Settings) -> tuple[object, ...]:
        return (FusedSwaps(),)

    def check(self) -> None:
        """The planner decides (:mod:`~migrator.rules.optimizers._fused_planner`); this records
        its findings, turns its rewrites into edits, and publishes them for NPU102-NPU104."""
        decisions = plan_fused(
            self.view,
            level=switched_level(self),
            factories=factory_facts(self),
            suppressions=self.context.suppressions,
            shared=shared_workers(self),
            amp_always=self.settings.amp is AmpPolicy.ALWAYS,
            unsafe_fixes=self.settings.unsafe_fixes,
            planned_amp=PlannedAmp(self.read_plan(Fp16Rewrites), self.read_plan(AddedAmp)),
            methods=methods_facts(self, self.PROJECT_KEY),
            lightning=lightning_doubt(self),
            elsewhere=handed_facts(self),
            after_ddp=cache(self._left_after_ddp),  # computed once, where a constructor asks
            config_types=self._config_types(),
        )
        for finding in decisions.findings:
            self.report(finding.node, finding.message, finding.severity)
        for released in decisions.released_imports:
            self.remove_import_if_unused(released.module, released.obj, released.asname)
        published: dict[int, FusedPlan] = {}
        dropped: set[int] = set()
        # The functions given the amp parameter, and the calls passing it on, by an applied fix:
        # SimMIM's `build_optimizer` forwards to two factories, each threaded on its own.
        threaded: set[int] = set()
        # Whether the edits spell `apex` (`apex.optimizers.X`, on the runs with apex amp only):
        # its import must not stop the others where Ascend's apex is not installed.
        spells_apex = False
        lookups: dict[int, bool] = {}
        for rewrite in decisions.rewrites:
            edits = [self._call_edit(rewrite)]
            given = class_of(self.view, rewrite.call)
            if given is not rewrite.call.func:
                edits.append(self._given_class_edit(given, rewrite))
            adding: set[int] = set()
            if rewrite.func_at is not None:
                edits.append(self._base_edit(rewrite.func_at, rewrite.func_code))
            if rewrite.import_rewrite is not None:
                edits.append(self._import_edit(rewrite.import_rewrite))
            edits += [self._grad_fix_edit(fix) for fix in rewrite.grad_fixes]
            if rewrite.amp_parameter is not None:
                parameter_edits, adding = self._parameter_edits(rewrite.amp_parameter, threaded)
                edits += parameter_edits
            edits.extend(self._key_drop_edits(rewrite.key_drops))
            if not self.fix(rewrite.call, rewrite.message, *edits):
                continue
            threaded |= adding
            if rewrite.func_style == "lookup":
                lookups[id(rewrite.call)] = rewrite.mapped_on_every_path
                if rewrite.keyed_by_class:
                    self.add_import("torch")
                spells_apex |= rewrite.home != TORCH_NPU_HOME
                if rewrite.home == TORCH_NPU_HOME or rewrite.choice is not None:
                    self.add_import("torch_npu", after="torch")
                continue  # the class depends on a name at run time: nothing to publish
            if rewrite.kept is not None and rewrite.kept.replaces is not None:
                self.add_import("torch")  # `(torch.optim.SGD if ... else ...)`
            if rewrite.func_style == "dotted":
                if rewrite.home == TORCH_NPU_HOME or rewrite.choice is not None:
                    self.add_import("torch_npu", after="torch")
                spells_apex |= rewrite.home != TORCH_NPU_HOME
            if rewrite.kept is None:  # fused on some paths only: the other rules leave it be
                published[id(rewrite.call)] = self._published(rewrite)
            dropped.update(id(node) for node in _key_nodes(rewrite.key_drops))
        if spells_apex:  # next to the file's other apex imports, guarded as they are
            self.add_import("apex", after="apex", optional=True)
        self.publish(FusedPlans(published, lookups))
        self.publish(DroppedKeys(frozenset(dropped)))
        self.publish(CombinableUnfused(decisions.combinable))
        self._fix_method_callers()
        self._pass_amp_conditions()
        self._delegate_wrapper_zero_grads()

    def _config_types(self) -> frozenset[int]:
        """The `type` values of the optimizer dicts of an mmcv / mmengine config (NPU107's)."""
        if not _configs.is_config(self.index, self.context.path):
            return frozenset()
        found = set()
        for _, config in _configs.optimizer_dicts(self.index):
            entry = config.get("type")
            if entry is not None:
                found.add(id(entry.value))
        return frozenset(found)

    def _left_after_ddp(self) -> Mapping[int, str]:
        """The optimizer calls of the file built after their model's DDP wrap that stay after
        it (NPU203's plan, all of them when NPU203 does not run), with why."""
        if "DataParallel" not in self.context.source_text:
            return {}
        links = self.project.links(DDP_ORDER_KEY)
        plan = plan_ddp_order(self.view, CallNames(self.view, self.context.path, links, {}))
        covers = partial(self.context.suppressions.covers, code=MOVING_CODE)
        return plan.left_after_wraps(self.read_plan(DdpMoves) is not None, covers)

    def _fix_method_callers(self) -> None:
        """In a file that calls another module's method whose optimizer this run swaps for an
        NPU fused one (nanoGPT's `model.configure_optimizers(...)`): the link stage's fixes."""
        for fix, method in caller_fixes(self, self.PROJECT_KEY):
            self.fix(
                fix.call,
                f"dropped `set_to_none` from `{self.view.written(fix.call)}`: the optimizer "
                f"comes from {method}, which NPU101 makes an NPU fused optimizer in this run, "
                "and those zero their flat gradient buffer in place (`set_to_none=True` raises "
                "ValueError there)",
                self._grad_fix_edit(fix),
            )

    def _delegate_wrapper_zero_grads(self) -> None:
        """In a file that defines an optimizer wrapper that inherits torch's ``zero_grad``
        (timm's ``Lookahead``), called by a file of the run that builds an optimizer: the class
        gets a ``zero_grad`` that runs the wrapped optimizer's (the link stage decided it)."""
        for class_def, attribute in delegated_wrappers(self.view, handed_facts(self)):
            self.fix(
                class_def,
                f"{DELEGATED_ZERO_GRAD}`{class_def.name}`, which runs the wrapped optimizer's "
                f"(`self.{attribute}.zero_grad(...)`): the one it inherits, torch's "
                "Optimizer.zero_grad, sets the gradients to None by default, which detaches "
                "them from the flat gradient buffer of an NPU fused optimizer it wraps. For "
                "torch's optimizers the two zero the same parameters the same way (the class "
                "shares the wrapped optimizer's `param_groups`)",
                self.replace_statement(class_def, partial(_with_zero_grad, attribute=attribute)),
            )

    def _pass_amp_conditions(self) -> None:
        """In a file that calls another module's factory that NPU101 makes pick its NPU fused
        class by a new keyword-only parameter in this run: each call passes amp's condition
        there (the link stage found its value)."""
        for call, entry in factory_arguments(self):
            name, value = entry["keyword"], entry["value"]
            argument = keyword(name, cst.parse_expression(value))
            self.fix(
                call,
                f"{PASSED_CONDITION}`{self.view.written(call.func)}`: `{name}={value}`, whether "
                f"the optimizer it returns goes through apex's `amp.initialize` here; "
                f"{entry['factory']} builds Ascend apex's NPU fused class when it is true and "
                "torch_npu's otherwise",
                self.replace(call, cst.Call, partial(_appended, argument=argument)),
            )

    def _parameter_edits(
        self, parameter: AmpParameter, threaded: set[int]
    ) -> tuple[list[NodeEdit], set[int]]:
        """``def factory(args, model):`` -> ``def factory(args, model, *, apex_amp):``, and in
        each function that returns a call of it, the same parameter passed on in that call;
        none of what an earlier fix did (``threaded``, ids of functions and calls), with the
        ids of what these edits do."""
        name = parameter.name

        def edit(node: cst.FunctionDef) -> cst.FunctionDef:
            return node.with_changes(params=add_keyword_only(node.params, name))

        functions = [parameter.function, *dict.fromkeys(f for f, _ in parameter.forwarding)]
        functions = [function for function in functions if id(function) not in threaded]
        edits = [self.replace_statement(function, edit) for function in functions]
        adding = {id(function) for function in functions}
        passed_on = keyword(name, cst.Name(name))
        for _, inner in parameter.forwarding:
            if id(inner) not in threaded and id(inner) not in adding:
                edits.append(self.replace(inner, cst.Call, partial(_appended, argument=passed_on)))
                adding.add(id(inner))
        for own_call, value in parameter.own_calls:  # the module's own calls of the factory
            if id(own_call) not in threaded and id(own_call) not in adding:
                passed = keyword(name, cst.parse_expression(value))
                edits.append(self.replace(own_call, cst.Call, partial(_appended, argument=passed)))
                adding.add(id(own_call))
        return edits, adding

    # -- edits -----------------------------------------------------------------------------------

    def _import_edit(self, rewrite: ImportRewrite) -> NodeEdit:
        names, module = dict(rewrite.names), rewrite.module

        def rewrite_import(node: cst.ImportFrom) -> cst.ImportFrom:
            assert not isinstance(node.names, cst.ImportStar)
            aliases = [
                alias.with_changes(name=cst.Name(names[i])) if i in names else alias
                for i, alias in enumerate(node.names)
            ]
            node = node.with_changes(names=aliases)
            if module is not None:
                node = node.with_changes(module=cst.parse_expression(module))
            return node

        return self.replace(rewrite.statement, cst.ImportFrom, rewrite_import)

    def _grad_fix_edit(self, fix: GradFix) -> NodeEdit:
        """``optimizer.zero_grad(set_to_none=...)`` -> ``optimizer.zero_grad()``;
        ``model.zero_grad(...)`` -> ``model.zero_grad(set_to_none=False)``; ``for p in
        model.parameters(): p.grad = None`` -> ``model.zero_grad(set_to_none=False)``."""
        if fix.loop is not None:
            zeroed = cst.parse_statement(f"{fix.receiver}.zero_grad(set_to_none=False)\n")

            def replace_loop(node: cst.For) -> cst.BaseStatement:
                return zeroed.with_changes(leading_lines=node.leading_lines)

            return self.replace_statement(fix.loop, replace_loop)

        def edit(node: cst.Call) -> cst.Call:
            written = find_argument(node, "set_to_none", 0)
            if fix.receiver is None:
                return remove_arg_objects(node, [written]) if written is not None else node
            false = cst.Name("False")
            if written is None:
                return append_arg(node, keyword("set_to_none", false))
            args = [arg.with_changes(value=false) if arg is written else arg for arg in node.args]
            return node.with_changes(args=args)

        return self.replace(fix.call, cst.Call, edit)

    def _shift(self, rewrite: Rewrite) -> int:
        """How many characters longer the callee gets (what follows it on its line moves)."""
        func = class_of(self.view, rewrite.call)
        if rewrite.func_style == "alias" or rewrite.func_at is not None:
            return 0
        if func is not rewrite.call.func and func.end_lineno != rewrite.call.func.end_lineno:
            return 0  # the class is on a line of the wrapper's call above the parenthesis
        if rewrite.func_style == "lookup":
            assert rewrite.func_code is not None
            # The mapping spans lines: the parenthesis follows its last line, `    }.get(...)`.
            last_line = rewrite.func_code.rsplit("\n", 1)[-1]
            if last_line != rewrite.func_code:
                return len(last_line) - self.source.end_position(func)[1]
            return len(rewrite.func_code) - len(self.view.written(func))
        if rewrite.func_style == "attr" and isinstance(func, ast.Attribute):
            return len(rewrite.target) - len(func.attr)
        new = rewrite.target if rewrite.func_style == "rename" else rewrite.callee
        return len(new) - len(self.view.written(func))

    def _call_edit(self, rewrite: Rewrite) -> NodeEdit:
        """One edit of the call: its arguments (renamed, dropped, added), the continuation
        lines aligned with the opening parenthesis, which move with it, and the callee.

        The call arrives with its inside already edited (NPU103's merge of the parameter
        groups, a device rule's `.cuda()`): only argument positions are relied on here.
        """
        shift = self._shift(rewrite)
        style, target, qualified_target = (
            rewrite.func_style,
            rewrite.target,
            rewrite.callee,
        )
        func_code, func_at = rewrite.func_code, rewrite.func_at
        # The class given to a gradient-clipping wrapper (see class_of) is edited on its own.
        wrapped = class_of(self.view, rewrite.call) is not rewrite.call.func
        to_keyword = dict(rewrite.edits.to_keyword)
        pinned = dict(rewrite.edits.pinned)
        dropped = sorted(rewrite.edits.dropped)
        added = list(rewrite.edits.added)
        realign = self._realigned_arguments(rewrite) if shift else []

        def edit(node: cst.Call) -> cst.Call:
            args = list(node.args)
            for index, name in to_keyword.items():
                args[index] = args[index].with_changes(
                    keyword=cst.Name(name), equal=no_space_equal()
                )
            for index, defaults in pinned.items():
                args[index] = args[index].with_changes(value=_pinned(args[index].value, defaults))
            call = node.with_changes(args=args)
            call = remove_arg_objects(call, [args[index] for index in dropped])
            for name, value in added:
                call = append_arg(call, keyword(name, cst.parse_expression(value)))
            call = _realign(call, realign, shift)
            if func_at is not None or wrapped:
                return call  # the class is edited where it is written: a base, an argument
            if func_code is not None:
                return call.with_changes(func=expression_as_written(func_code))
            return call.with_changes(func=_new_func(node.func, style, target, qualified_target))

        return self.replace(rewrite.call, cst.Call, edit)

    def _given_class_edit(self, given: ast.expr, rewrite: Rewrite) -> NodeEdit:
        """The class a gradient-clipping wrapper is given,
        ``maybe_add_gradient_clipping(cfg, torch.optim.SGD)(params)``, becomes the new class."""
        style, target, callee = rewrite.func_style, rewrite.target, rewrite.callee
        kind = cst.Name if isinstance(given, ast.Name) else cst.Attribute

        def edit(node: cst.BaseExpression) -> cst.BaseExpression:
            new = _new_func(node, style, target, callee)
            if isinstance(new, cst.IfExp):  # an argument needs no parentheses of its own
                return new.with_changes(lpar=(), rpar=())
            return new

        return self.replace(given, kind, edit)

    def _base_edit(self, base: ast.Name, code: str | None) -> NodeEdit:
        """The base of a thin subclass, ``class CustomOptimizer(optimizer_class):``, becomes the
        mapping of its classes to their NPU fused ones."""
        assert code is not None
        mapping = expression_as_written(code)

        def edit(node: cst.Name) -> cst.BaseExpression:
            return mapping

        return self.replace(base, cst.Name, edit)

    def _key_drop_edits(self, drops: Sequence[KeyDrop]) -> list[NodeEdit]:
        """Edits that remove forwarded keys where their dict is built: one per node."""
        by_node: dict[int, list[KeyDrop]] = {}
        for drop in drops:
            by_node.setdefault(id(drop.node), []).append(drop)
        edits: list[NodeEdit] = []
        for same_node in by_node.values():
            node, kind = same_node[0].node, same_node[0].kind
            doomed = {drop.index for drop in same_node}
            if kind == "item":
                edits.append(self.replace(node, cst.Dict, _without_items(doomed)))
            elif kind == "keyword":
                edits.append(self.replace(node, cst.Call, _without_args(doomed)))
            else:
                assert isinstance(node, ast.stmt)
                alone = alone_in_block(self.index.parent(node), node)
                edits.append(self.replace_statement(node, _removed_statement(alone)))
        return edits

    def _realigned_arguments(self, rewrite: Rewrite) -> list[bool]:
        """For each argument of the rewritten call after the first: whether it starts a line
        aligned with the opening parenthesis (then it moves with the parenthesis).

        Arguments are recognised by their keyword or code, as written in the original call.
        """
        func_end = self.source.end_position(rewrite.call.func)
        opening = self._opening_paren(rewrite.call)
        aligned_column = func_end[1] + (opening - self._func_written_end(rewrite.call)) + 1
        aligned = {
            self._argument_label(arg)
            for arg in rewrite.arguments
            if self._argument_start(arg)[1] == aligned_column
        }
        labels = [
            rewrite.edits.to_keyword.get(arg.index) or self._argument_label(arg)
            for arg in rewrite.arguments
            if arg.index not in rewrite.edits.dropped
        ]
        labels += [name for name, _ in rewrite.edits.added]
        return [label in aligned for label in labels[1:]]

    def _func_written_end(self, call: ast.Call) -> int:
        return self.view.written_span(call.func)[1]

    def _opening_paren(self, call: ast.Call) -> int:
        return self.source.text.index("(", self._func_written_end(call))

    def _argument_label(self, arg: Argument) -> str:
        return arg.keyword if arg.keyword is not None else self.view.written(arg.value)

    def _argument_start(self, arg: Argument) -> tuple[int, int]:
        """1-based line and 0-based column where an argument starts, as libcst counts it."""
        if arg.keyword is not None or arg.star:
            line, column = self.source.position(arg.node)
            return line, column - 1
        start, _ = self.view.written_span(arg.value)
        line = self.source.line_of_offset(start)
        return line, start - self.source.line_starts[line - 1]

    def _published(self, rewrite: Rewrite) -> FusedPlan:
        """What NPU102 and NPU103 need to know of the rewrite of ``rewrite.call``."""
        shift = self._shift(rewrite)
        realigned: set[int] = set()
        if shift:
            kept = [arg for arg in rewrite.arguments if arg.index not in rewrite.edits.dropped]
            moving = self._realigned_arguments(rewrite)
            for previous, arg, moves in zip(kept, kept[1:], moving, strict=False):
                start_line, _ = self._argument_start(arg)
                if moves and start_line > previous.value.end_lineno:  # type: ignore[operator]
                    realigned.add(start_line)
        return FusedPlan(
            rewrite.call,
            rewrite.qualified_target,
            self.source.end_position(rewrite.call.func),
            shift,
            frozenset(realigned),
        )


def _new_func(
    func: cst.BaseExpression, style: FuncStyle, target: str, qualified_target: str
) -> cst.BaseExpression:
    if style == "alias":
        return func
    if style == "rename":
        return cst.Name(target)
    if style == "attr" and isinstance(func, cst.Attribute):
        return func.with_changes(attr=cst.Name(target))
    return cst.parse_expression(qualified_target)


def _pinned(mapping: cst.BaseExpression, defaults: Sequence[tuple[str, str]]) -> cst.BaseExpression:
    """``{"weight_decay": 0.0, **mapping}``: the defaults first, so the mapping overrides them
    (``mapping`` as the other edits left it)."""
    elements: list[cst.BaseDictElement] = [
        cst.DictElement(cst.SimpleString(f'"{key}"'), cst.parse_expression(value))
        for key, value in defaults
    ]
    elements.append(cst.StarredDictElement(mapping))
    return cst.Dict(elements)


def _key_nodes(drops: Sequence[KeyDrop]) -> list[ast.AST]:
    """The key nodes the drops remove: a dict display's key, a keyword argument."""
    nodes: list[ast.AST] = []
    for drop in drops:
        if drop.kind == "item" and isinstance(drop.node, ast.Dict):
            key = drop.node.keys[drop.index]
            if key is not None:
                nodes.append(key)
        elif drop.kind == "keyword" and isinstance(drop.node, ast.Call):
            nodes.append(arguments(drop.node)[drop.index].node)
    return nodes


def _without_items(doomed: set[int]) -> Callable[[cst.Dict], cst.Dict]:
    def edit(node: cst.Dict) -> cst.Dict:
        elements = list(node.elements)
        kept = [element for index, element in enumerate(elements) if index not in doomed]
        if kept and len(kept) < len(elements) and kept[-1] is not elements[-1]:
            kept[-1] = kept[-1].with_changes(comma=elements[-1].comma)
        return node.with_changes(elements=kept)

    return edit


def _without_args(doomed: set[int]) -> Callable[[cst.Call], cst.Call]:
    def edit(node: cst.Call) -> cst.Call:
        return remove_arg_objects(node, [arg for i, arg in enumerate(node.args) if i in doomed])

    return edit


def _removed_statement(alone: bool) -> Callable[[cst.SimpleStatementLine], object]:
    """The statement goes; ``pass`` takes its place when it was alone in its block."""

    def edit(node: cst.SimpleStatementLine) -> object:
        if alone:
            return node.with_changes(body=[cst.Pass()])
        return cst.RemovalSentinel.REMOVE

    return edit


def _realign(call: cst.Call, moves: Sequence[bool], shift: int) -> cst.Call:
    """Continuation lines aligned with the opening parenthesis move with it by ``shift``."""
    if not shift:
        return call
    args = list(call.args)
    for index, arg in enumerate(args[:-1]):
        comma = arg.comma
        if not isinstance(comma, cst.Comma) or index >= len(moves) or not moves[index]:
            continue
        after = comma.whitespace_after
        if isinstance(after, cst.ParenthesizedWhitespace):
            width = max(0, len(after.last_line.value) + shift)
            last_line = cst.SimpleWhitespace(" " * width)
            args[index] = arg.with_changes(
                comma=comma.with_changes(whitespace_after=after.with_changes(last_line=last_line))
            )
    return call.with_changes(args=args)


def _appended(node: cst.Call, argument: cst.Arg) -> cst.Call:
    return append_arg(node, argument)


def _with_zero_grad(node: cst.ClassDef, attribute: str) -> cst.ClassDef:
    """``class Lookahead(Optimizer): ...`` with a last method ``zero_grad`` that passes its
    arguments on to the wrapped optimizer's."""
    method = cst.ensure_type(
        cst.parse_statement(
            "def zero_grad(self, *args, **kwargs):\n"
            f"    return self.{attribute}.zero_grad(*args, **kwargs)\n"
        ),
        cst.FunctionDef,
    )
    method = method.with_changes(
        leading_lines=[
            cst.EmptyLine(indent=False),
            cst.EmptyLine(comment=cst.Comment(_DELEGATED_COMMENT)),
        ]
    )
    body = cst.ensure_type(node.body, cst.IndentedBlock)
    return node.with_changes(body=body.with_changes(body=[*body.body, method]))
