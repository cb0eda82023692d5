"""Step-by-step comparison of two recorded runs, and the tolerance it uses.

A run is what the probe (``child/_npu_migrate_verify_probe.py``) recorded in each process: per
training step, the losses ``backward()`` was called on and, per optimizer step, a digest of the
optimizer's parameters. Two runs agree when every loss and every digest entry of the migrated
run is within ``atol + rtol * |original|`` of the original's (the rule of ``numpy.allclose`` and
``torch.testing.assert_close``).

Pure Python on purpose: the migrator never imports torch or numpy.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

# Optimizer pairs (original class name, migrated class name) that do the same arithmetic in the
# runtime, so that under amp both sides round identically (docs/verify.md, "Which tolerance").
SAME_ARITHMETIC = frozenset(
    {("SGD", "NpuFusedSGD"), ("FusedSGD", "NpuFusedSGD"), ("Adam", "NpuFusedAdam")}
)
HALF_DTYPES = frozenset({"bfloat16", "float16"})


@dataclass(frozen=True)
class ParamDigest:
    name: str | None  # the model's name for it (``layer1.0.conv1.weight``), when known
    shape: tuple[int, ...]
    values: tuple[float, ...]  # every entry, or an evenly spread sample of a large tensor


@dataclass(frozen=True)
class OptimizerStep:
    class_name: str  # qualified: ``torch.optim.adam.Adam``
    lr: float  # the largest learning rate of its groups at this step
    params: tuple[ParamDigest, ...]

    @property
    def short_name(self) -> str:
        return self.class_name.rsplit(".", 1)[-1]


@dataclass(frozen=True)
class Autocast:
    """An autocast region a step entered, as the program asked for it."""

    device: str  # "accelerator" (cuda or npu), "cpu", ...
    dtype: str
    enabled: bool

    def describe(self) -> str:
        shown = f"autocast({self.device}, {self.dtype})"
        return shown if self.enabled else f"{shown} turned off"


@dataclass(frozen=True)
class Step:
    losses: tuple[float, ...]
    optimizers: tuple[OptimizerStep, ...]
    amp: dict[str, str] | None  # {"opt_level": "O2", "half_dtype": "bfloat16"} under apex amp
    autocast: tuple[Autocast, ...] = ()  # in the order first entered
    # Per optimizer of the step: its parameters before its first step (in the step where that
    # first step is; None at later steps).
    initial: tuple[OptimizerStep | None, ...] = ()


def step_from_json(line: dict[str, Any]) -> Step:
    return Step(
        losses=tuple(float(value) for value in line["losses"]),
        optimizers=tuple(_optimizer_step(optimizer) for optimizer in line["optimizers"]),
        amp=line.get("amp"),
        autocast=tuple(
            Autocast(str(region["device"]), str(region["dtype"]), bool(region["enabled"]))
            for region in line.get("autocast", [])
        ),
        initial=tuple(
            None if optimizer is None else _optimizer_step(optimizer)
            for optimizer in line.get("initial", ())
        ),
    )


def _optimizer_step(optimizer: dict[str, Any]) -> OptimizerStep:
    return OptimizerStep(
        class_name=optimizer["class"],
        lr=float(optimizer["lr"]),
        params=tuple(
            ParamDigest(p["name"], tuple(p["shape"]), tuple(p["values"]))
            for p in optimizer["params"]
        ),
    )


# -- tolerance -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Tolerance:
    rtol: float
    atol: float
    rule: str  # "fp32", "amp", "amp-rounding" or "amp-added" (docs/verify.md)
    reason: str  # why that rule applies to these two runs, for the report
    # "amp-added" only: how far, relative to the original's update of a parameter tensor since
    # its first step (L2 norms), the migrated update may be from it.
    update_rtol: float | None = None

    def allows(self, actual: float, expected: float) -> bool:
        if math.isnan(actual) or math.isnan(expected):
            return math.isnan(actual) and math.isnan(expected)
        return abs(actual - expected) <= self.atol + self.rtol * abs(expected)

    def excess(self, actual: float, expected: float) -> float:
        """How far ``actual`` is outside the tolerance (<= 0 inside; inf for a lone NaN)."""
        if self.allows(actual, expected):
            return 0.0
        if math.isnan(actual) or math.isnan(expected):
            return math.inf
        return abs(actual - expected) - (self.atol + self.rtol * abs(expected))

    def describe(self) -> str:
        return f"rtol={self.rtol:g} atol={self.atol:.2g} ({self.rule}: {self.reason})"


# "amp-added": the migration turned half precision on (NPU105), so the two runs round
# differently by design. A bfloat16 value has 8 significant bits; losses computed in it move by
# tenths of a percent, and gradients by a few percent (far more in entries whose gradient is
# noise, which Adam-like optimizers then turn into full-size updates). The rule compares losses
# within 2**-5 (3.1%), and each optimizer's whole update since its first step, all parameters
# as one vector in L2 norm, within 2**-2 (25%) of the original's: several times what bfloat16
# moves them by over the handful of steps verify records, several times less than what a wiring
# mistake does (gradients that never reach the optimizer, or unscaled: 100% and beyond).
AMP_ADDED_LOSS_RTOL = 2.0**-5
AMP_ADDED_UPDATE_RTOL = 2.0**-2


def automatic_tolerance(original: Sequence[Step], migrated: Sequence[Step]) -> Tolerance:
    """The rule of docs/verify.md that fits what the two runs did (amp, dtype, optimizers)."""
    amp = next((s.amp for s in (*original[:1], *migrated[:1]) if s.amp is not None), None)
    added = _half_amp_on_one_side(original, migrated)
    if added is not None:
        side, facts = added
        reason = (
            f"the {side} run computes in {facts.get('half_dtype')} (amp {facts.get('opt_level')}), "
            f"the other in float32: losses within {AMP_ADDED_LOSS_RTOL:g}, each parameter's update "
            f"within {AMP_ADDED_UPDATE_RTOL:g} of the original's"
        )
        return Tolerance(AMP_ADDED_LOSS_RTOL, 1e-7, "amp-added", reason, AMP_ADDED_UPDATE_RTOL)
    if amp is None or amp.get("half_dtype") not in HALF_DTYPES:
        reason = "no mixed precision" if amp is None else "amp computes in float32"
        regions = {r for s in (*original[:1], *migrated[:1]) for r in s.autocast if r.enabled}
        if amp is None and regions:
            # torch's autocast computes the same on both sides when both ask for the same: the
            # regions are compared as such (compare_step), the numbers as fp32.
            shown = ", ".join(sorted(region.describe() for region in regions))
            reason = f"no apex amp; {shown} asked for, compared region by region"
        return Tolerance(1e-5, 1e-7, "fp32", reason)
    precision = f"amp {amp.get('opt_level')} in {amp.get('half_dtype')}"
    pairs = optimizer_pairs(original, migrated)
    differ = [(a, b) for a, b in pairs if a != b and (a, b) not in SAME_ARITHMETIC]
    if not differ:
        shown = ", ".join(f"{a} -> {b}" for a, b in pairs) or "no optimizer"
        return Tolerance(1e-6, 1e-7, "amp", f"{precision}, same optimizer arithmetic ({shown})")
    # A different rounding of one formula can flip the half-precision rounding of a weight, which
    # moves that step's update by up to a bf16 ulp (2**-8) of the learning rate; twice that bound
    # accumulated over the steps (docs/verify.md).
    steps = max(len(original), len(migrated))
    lr = max((o.lr for s in (*original, *migrated) for o in s.optimizers), default=0.0)
    atol = max(1e-7, steps * lr * 2.0**-7)
    shown = ", ".join(f"{a} -> {b}" for a, b in differ)
    reason = f"{precision}, {shown} round differently: atol = {steps} steps x lr {lr:g} x 2**-7"
    return Tolerance(1e-5, atol, "amp-rounding", reason)


def _half_amp_on_one_side(
    original: Sequence[Step], migrated: Sequence[Step]
) -> tuple[str, dict[str, str]] | None:
    """("migrated", its amp facts) when only the migrated run computes in half precision (or
    the same for the original)."""
    sides = {"original": original[:1], "migrated": migrated[:1]}
    half = {
        label: steps[0].amp
        for label, steps in sides.items()
        if steps and steps[0].amp is not None and steps[0].amp.get("half_dtype") in HALF_DTYPES
    }
    plain = [label for label, steps in sides.items() if steps and steps[0].amp is None]
    if len(half) == 1 and len(plain) == 1:
        ((label, facts),) = half.items()
        return label, facts
    return None


def optimizer_pairs(original: Sequence[Step], migrated: Sequence[Step]) -> list[tuple[str, str]]:
    if not original or not migrated:
        return []
    pairs = zip(original[0].optimizers, migrated[0].optimizers, strict=False)
    return list(dict.fromkeys((a.short_name, b.short_name) for a, b in pairs))


def with_overrides(tolerance: Tolerance, rtol: float | None, atol: float | None) -> Tolerance:
    if rtol is None and atol is None:
        return tolerance
    given = " and ".join(
        name for name, value in (("rtol", rtol), ("atol", atol)) if value is not None
    )
    return Tolerance(
        tolerance.rtol if rtol is None else rtol,
        tolerance.atol if atol is None else atol,
        tolerance.rule,
        f"{tolerance.reason}; {given} given on the command line",
        tolerance.update_rtol,
    )


# -- comparison ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Difference:
    step: int  # 1-based
    rank: int
    what: str  # "the loss", "parameter 'conv1.weight' of optimizer 1 (Adam -> NpuFusedAdam)"
    detail: str


@dataclass(frozen=True)
class Row:
    """One line of the table (rank 0's losses; the parameter difference over every rank)."""

    step: int
    losses_original: tuple[float, ...] | None
    losses_migrated: tuple[float, ...] | None
    max_param_difference: float | None
    differs: bool


@dataclass(frozen=True)
class Comparison:
    rows: list[Row]
    first_difference: Difference | None
    ranks: int


def compare(
    original: dict[int, list[Step]], migrated: dict[int, list[Step]], tolerance: Tolerance
) -> Comparison:
    """Compare rank by rank, step by step; the first difference is the earliest step's."""
    differences: list[Difference] = []
    largest: dict[int, float] = {}
    for rank in sorted(original.keys() | migrated.keys()):
        if rank not in original or rank not in migrated:
            side = "original" if rank not in original else "migrated"
            differences.append(
                Difference(1, rank, f"rank {rank}", f"the {side} run has no rank {rank}")
            )
            continue
        starts: dict[int, tuple[OptimizerStep | None, OptimizerStep | None]] = {}
        ours, theirs = without_idle_regions(original[rank]), without_idle_regions(migrated[rank])
        for index in range(max(len(ours), len(theirs))):
            step = index + 1
            if index >= len(ours) or index >= len(theirs):
                differences.append(
                    Difference(step, rank, "the number of steps", steps_detail(ours, theirs))
                )
                break
            remember_starts(starts, ours[index], theirs[index])
            difference, worst = compare_step(
                step, rank, ours[index], theirs[index], tolerance, starts
            )
            if worst is not None:
                largest[step] = max(largest.get(step, 0.0), worst)
            if difference is not None:
                differences.append(difference)
    first = min(differences, key=lambda d: (d.step, d.rank), default=None)
    differing = {d.step for d in differences}
    rows = table_rows(original.get(0, []), migrated.get(0, []), largest, differing)
    return Comparison(rows, first, len(original.keys() | migrated.keys()))


def without_idle_regions(steps: Sequence[Step]) -> list[Step]:
    """The steps of one run without the autocast regions that turn autocast off for a device no
    region has turned on yet (at this step or before): autocast is off there already, so they
    change nothing. `autocast(enabled=args.amp)` run without `--amp` computes what a migration
    that enters no region computes. Regions are only dropped, never added, and only where they
    are no-ops, so no difference is hidden."""
    enabled: set[str] = set()
    kept = []
    for step in steps:
        enabled.update(region.device for region in step.autocast if region.enabled)
        regions = tuple(r for r in step.autocast if r.enabled or r.device in enabled)
        kept.append(step if regions == step.autocast else replace(step, autocast=regions))
    return kept


def steps_detail(original: Sequence[Step], migrated: Sequence[Step]) -> str:
    return f"the original recorded {len(original)} steps, the migrated program {len(migrated)}"


def table_rows(
    original: Sequence[Step],
    migrated: Sequence[Step],
    largest: dict[int, float],
    differing: set[int],
) -> list[Row]:
    rows = []
    for index in range(max(len(original), len(migrated))):
        step = index + 1
        rows.append(
            Row(
                step,
                original[index].losses if index < len(original) else None,
                migrated[index].losses if index < len(migrated) else None,
                largest.get(step),
                step in differing,
            )
        )
    return rows


Starts = dict[int, tuple["OptimizerStep | None", "OptimizerStep | None"]]


def remember_starts(starts: Starts, original: Step, migrated: Step) -> None:
    """Keep, per optimizer slot, each side's parameters from before its first step."""
    for slot in range(max(len(original.initial), len(migrated.initial))):
        before = original.initial[slot] if slot < len(original.initial) else None
        after = migrated.initial[slot] if slot < len(migrated.initial) else None
        if before is not None or after is not None:
            known = starts.get(slot, (None, None))
            starts[slot] = (before or known[0], after or known[1])


def compare_step(
    step: int,
    rank: int,
    original: Step,
    migrated: Step,
    tolerance: Tolerance,
    starts: Starts | None = None,
) -> tuple[Difference | None, float | None]:
    """The first difference of one step (losses first, then parameters in optimizer order) and
    the largest parameter difference of the step."""
    found: list[Difference] = []
    # Under apex amp the regions are amp's own (its casts enter and leave autocast), which the
    # amp tolerances already account for: only the program's own regions are compared.
    own_regions = original.amp is None and migrated.amp is None
    if own_regions and set(original.autocast) != set(migrated.autocast):
        # Before the losses: it explains them (and on a machine without the accelerator the
        # losses may agree while the accelerator would compute in another precision).
        detail = f"{describe_autocast(migrated)}, the original {describe_autocast(original)}"
        found.append(Difference(step, rank, "the autocast regions", detail))
    if len(original.losses) != len(migrated.losses):
        detail = f"{len(migrated.losses)} losses, the original {len(original.losses)}"
        found.append(Difference(step, rank, "the losses", detail))
    else:
        for expected_loss, loss in zip(original.losses, migrated.losses, strict=True):
            if not tolerance.allows(loss, expected_loss):
                detail = f"{loss:.9g}, the original {expected_loss:.9g}"
                found.append(Difference(step, rank, "the loss", detail))
                break
    if len(original.optimizers) != len(migrated.optimizers):
        counts = len(migrated.optimizers), len(original.optimizers)
        detail = f"{counts[0]} optimizers stepped, the original {counts[1]}"
        found.append(Difference(step, rank, "the optimizers", detail))
        return found[0], None
    worst: float | None = None
    for slot, (expected, actual) in enumerate(
        zip(original.optimizers, migrated.optimizers, strict=True), 1
    ):
        label = f"optimizer {slot} ({expected.short_name} -> {actual.short_name})"
        start = (starts or {}).get(slot - 1, (None, None))
        difference, largest = compare_params(step, rank, label, expected, actual, tolerance, start)
        if difference is not None:
            found.append(difference)
        if largest is not None:
            worst = largest if worst is None else max(worst, largest)
    return (found[0] if found else None), worst


def describe_autocast(step: Step) -> str:
    if not step.autocast:
        return "no autocast"
    return ", ".join(region.describe() for region in step.autocast)


def compare_params(
    step: int,
    rank: int,
    label: str,
    original: OptimizerStep,
    migrated: OptimizerStep,
    tolerance: Tolerance,
    start: tuple[OptimizerStep | None, OptimizerStep | None] = (None, None),
) -> tuple[Difference | None, float | None]:
    pairs = matched_params(original.params, migrated.params)
    if pairs is None:
        detail = f"{len(migrated.params)} parameters, the original {len(original.params)}"
        return Difference(step, rank, label, detail), None
    if tolerance.update_rtol is not None:
        updates = compare_updates(original, migrated, start, tolerance)
        if updates is not None:
            away, largest = updates
            difference = None
            if away is not None:
                difference = Difference(step, rank, f"{away[0]} of {label}", away[1])
            return difference, largest
    first: Difference | None = None
    worst = 0.0
    for position, (expected, actual) in enumerate(pairs, 1):
        name = (
            f"parameter '{expected.name}'"
            if expected.name
            else f"parameter #{position} {list(expected.shape)}"
        )
        if expected.shape != actual.shape:
            first = first or Difference(
                step,
                rank,
                f"{name} of {label}",
                f"shape {list(actual.shape)}, the original {list(expected.shape)}",
            )
            continue
        largest, outside, index = tensor_difference(expected.values, actual.values, tolerance)
        worst = max(worst, largest)
        if outside and first is None:
            detail = (
                f"{outside} of {len(expected.values)} compared entries differ, the worst "
                f"{actual.values[index]:.9g} vs the original's {expected.values[index]:.9g}"
            )
            first = Difference(step, rank, f"{name} of {label}", detail)
    return first, worst


def compare_updates(
    original: OptimizerStep,
    migrated: OptimizerStep,
    start: tuple[OptimizerStep | None, OptimizerStep | None],
    tolerance: Tolerance,
) -> tuple[tuple[str, str] | None, float] | None:
    """The "amp-added" comparison of one optimizer: its update since its first step (every
    compared entry of every parameter, as one vector), migrated against original, in L2 norm.
    ((what, detail) when outside the tolerance, else None; the largest entry difference), or
    None when the parameters before the first step are not known."""
    begin_original = start[0]
    begin_migrated = start[1] or start[0]
    assert tolerance.update_rtol is not None
    if begin_original is None or begin_migrated is None:
        return None
    pairs = matched_params(original.params, migrated.params)
    firsts = matched_params(begin_original.params, original.params)
    seconds = matched_params(begin_migrated.params, migrated.params)
    if pairs is None or firsts is None or seconds is None:
        return None
    begins_original = {id(after): before for before, after in firsts}
    begins_migrated = {id(after): before for before, after in seconds}
    error = reference = largest = 0.0
    entries = 0
    furthest: tuple[float, str] = (-1.0, "")
    for position, (expected, actual) in enumerate(pairs, 1):
        before_original = begins_original.get(id(expected))
        before_migrated = begins_migrated.get(id(actual))
        if before_original is None or before_migrated is None:
            return None
        sizes = {len(v.values) for v in (expected, actual, before_original, before_migrated)}
        if len(sizes) != 1:
            return None
        tensor_error = 0.0
        for e, a, e0, a0 in zip(
            expected.values, actual.values, before_original.values, before_migrated.values,
            strict=True,
        ):  # fmt: skip
            difference = a - e
            largest = max(largest, abs(difference) if not math.isnan(difference) else math.inf)
            tensor_error += ((a - a0) - (e - e0)) ** 2
            reference += (e - e0) ** 2
        error += tensor_error
        entries += len(expected.values)
        if tensor_error > furthest[0] or math.isnan(tensor_error):
            name = expected.name or f"#{position} {list(expected.shape)}"
            furthest = (math.inf if math.isnan(tensor_error) else tensor_error, name)
    error, reference = math.sqrt(error), math.sqrt(reference)
    allowed = tolerance.update_rtol * reference + tolerance.atol * math.sqrt(entries)
    if not (math.isnan(error) or error > allowed):
        return None, largest
    ratio = error / reference if reference else math.inf
    detail = (
        f"their update since the first step is {ratio:.3g} of the original's away from it "
        f"(L2 norm {error:.3g} vs {reference:.3g} over {entries} entries; allowed "
        f"{tolerance.update_rtol:g}), most of it in '{furthest[1]}'"
    )
    return ("the parameters", detail), largest


def matched_params(
    original: Sequence[ParamDigest], migrated: Sequence[ParamDigest]
) -> list[tuple[ParamDigest, ParamDigest]] | None:
    """Pair the parameters by name when both sides name all of them (a migration may regroup
    them), else by position; None when the counts differ."""
    if len(original) != len(migrated):
        return None
    names = [p.name for p in original]
    by_name = {p.name: p for p in migrated}
    if None not in names and len(set(names)) == len(names) and set(names) == set(by_name):
        return [(p, by_name[p.name]) for p in original]
    return list(zip(original, migrated, strict=True))


def tensor_difference(
    expected: Sequence[float], actual: Sequence[float], tolerance: Tolerance
) -> tuple[float, int, int]:
    """(largest absolute difference, entries outside the tolerance, index of the worst one)."""
    largest, outside, worst_index, worst_excess = 0.0, 0, 0, 0.0
    for index, (e, a) in enumerate(zip(expected, actual, strict=True)):
        difference = abs(a - e)
        largest = max(largest, difference if not math.isnan(difference) else math.inf)
        excess = tolerance.excess(a, e)
        if excess > 0:
            outside += 1
            if excess > worst_excess:
                worst_index, worst_excess = index, excess
    return largest, outside, worst_index
