"""NPU201's planner on its own (rules/normalization_parallel/_layer_norm.py): what becomes
torch's LayerNorm / RMSNorm and what is reported instead, decided on small sources without the
rule, libcst or diagnostics. The fixtures (fixtures/npu201) hold the rule's output; these tests
hold the decisions it is made from."""

from __future__ import annotations

import ast
import textwrap
from collections.abc import Callable

from migrator.analysis.parse import parse_index
from migrator.analysis.view import FileView
from migrator.rules.normalization_parallel._common import NewHome
from migrator.rules.normalization_parallel._layer_norm import (
    CLASSES,
    AmbiguousName,
    AttributeRewrite,
    CallRewrite,
    ImportRewrite,
    LayerNormPlan,
    NoNpuVersion,
    SharedLineImport,
    StarImport,
    StarredArguments,
    UnsafeClass,
    plan_layer_norm,
)


def planned(
    source: str, *, unsafe_fixes: bool = False, suppressed: Callable[[int], bool] | None = None
) -> tuple[FileView, LayerNormPlan]:
    view = FileView(parse_index(textwrap.dedent(source), "model.py"))
    if suppressed is None:
        return view, plan_layer_norm(view, unsafe_fixes=unsafe_fixes)
    return view, plan_layer_norm(view, unsafe_fixes=unsafe_fixes, suppressed=suppressed)


def only_import(plan: LayerNormPlan) -> ImportRewrite:
    [rewrite] = [d for d in plan.imports if isinstance(d, ImportRewrite)]
    return rewrite


FALLBACK = """\
import torch
from torch import nn

try:
    from apex.normalization.fused_layer_norm import FusedLayerNorm as BertLayerNorm
    APEX_AVAILABLE = True
except ImportError:
    APEX_AVAILABLE = False

    class BertLayerNorm(nn.Module):
        def __init__(self, hidden_size, eps=1e-12):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(hidden_size))


norm = BertLayerNorm(768, eps=1e-12)
"""


def test_a_try_except_fused_layer_norm_fallback_plans_the_collapse() -> None:
    """Importing torch's LayerNorm cannot fail: the handler can never run, so the try goes,
    the import is re-homed under its alias, and the alias's use (bound twice in the original,
    once after the collapse) needs nothing."""
    _, plan = planned(FALLBACK)
    [collapsed] = plan.collapsed
    assert isinstance(collapsed, ast.Try) and collapsed.lineno == 4
    rewrite = only_import(plan)
    assert rewrite.statement.lineno == 5
    assert dict(rewrite.moves) == {"FusedLayerNorm": NewHome("torch.nn", "LayerNorm")}
    assert rewrite.renamed_uses == () and not rewrite.spells_out
    assert plan.reported == [] and plan.calls == ()
    assert plan.nn == "nn"  # the file imports `from torch import nn`


def test_the_collapse_is_not_planned_where_the_import_is_suppressed() -> None:
    _, plan = planned(FALLBACK, suppressed=lambda line: line == 5)
    assert plan.collapsed == ()
    assert plan.imports == ()  # kept as written, and its name with it
    [ambiguous] = plan.names  # the use may be apex's or the fallback's
    assert isinstance(ambiguous, AmbiguousName) and ambiguous.node.lineno == 16


def test_an_rms_norm_fallback_stays_reachable_and_keeps_its_name() -> None:
    """torch before 2.4 has no RMSNorm: the fallback may still run, so the try stays and the
    unaliased name stays bound (as torch's class under apex's name)."""
    _, plan = planned(
        """\
        try:
            from apex.normalization import FusedRMSNorm
        except ImportError:
            FusedRMSNorm = None
        """
    )
    assert plan.collapsed == ()
    assert dict(only_import(plan).moves) == {
        "FusedRMSNorm": NewHome("torch.nn", "RMSNorm", keep_local=True)
    }


def test_a_try_that_does_more_than_import_is_kept() -> None:
    _, plan = planned(
        """\
        try:
            from apex.normalization import FusedLayerNorm as Norm
            import apex_extras
        except ImportError:
            Norm = None
        """
    )
    assert plan.collapsed == ()


def test_uses_of_an_unaliased_import_are_renamed_with_it() -> None:
    view, plan = planned(
        """\
        from apex.normalization import FusedLayerNorm

        norm = FusedLayerNorm(768)
        """
    )
    [use] = only_import(plan).renamed_uses
    assert (view.code(use.name), use.becomes, use.spelled_out) == (
        "FusedLayerNorm",
        "LayerNorm",
        False,
    )


def test_a_file_s_own_layer_norm_makes_the_uses_spell_torch_out() -> None:
    _, plan = planned(
        """\
        from apex.normalization import FusedLayerNorm


        class LayerNorm:
            pass


        norm = FusedLayerNorm(32)
        custom = LayerNorm()
        """
    )
    rewrite = only_import(plan)
    assert dict(rewrite.moves) == {"FusedLayerNorm": NewHome(None, "LayerNorm")}
    assert rewrite.spells_out
    [use] = rewrite.renamed_uses
    assert (use.name.lineno, use.becomes, use.spelled_out) == (8, "torch.nn.LayerNorm", True)


def test_calls_plan_the_arguments_torch_does_not_take_and_apex_s_eps() -> None:
    view, plan = planned(
        """\
        from apex.normalization import FusedLayerNorm, FusedRMSNorm

        a = FusedLayerNorm(768, 1e-5, True, True)
        b = FusedRMSNorm(768, memory_efficient=True)
        c = FusedRMSNorm(768, eps=1e-6)
        d = FusedLayerNorm(768)
        """
    )
    first, second = plan.calls  # c passes its eps, d has nothing to change
    assert isinstance(first, CallRewrite) and isinstance(second, CallRewrite)
    assert [view.code(a.value) for a in first.dropped] == ["True"]
    assert first.dropped[0].index == 3 and not first.add_eps
    assert [a.keyword for a in second.dropped] == ["memory_efficient"] and second.add_eps


def test_a_call_with_star_arguments_is_reported() -> None:
    view, plan = planned(
        """\
        from apex.normalization import FusedRMSNorm

        norm = FusedRMSNorm(*shape, **options)
        """
    )
    [reported] = plan.calls
    assert isinstance(reported, StarredArguments)
    assert view.code(reported.starred.node) == "*shape" and reported.norm.needs_eps


def test_subclasses_initialise_the_migrated_class_with_the_same_fixes() -> None:
    _, plan = planned(
        """\
        import apex


        class Norm(apex.normalization.FusedRMSNorm):
            def __init__(self, size):
                super().__init__(size, memory_efficient=True)
        """
    )
    [attribute] = plan.attributes
    assert isinstance(attribute, AttributeRewrite)
    assert attribute.becomes == "torch.nn.RMSNorm"
    assert attribute.base_import == ("apex", None, None)
    [call] = plan.calls
    assert isinstance(call, CallRewrite) and call.call.lineno == 6 and call.add_eps


def test_mixed_classes_are_reported_unless_unsafe_fixes_are_on() -> None:
    source = """\
    import apex.normalization

    norm = apex.normalization.MixedFusedLayerNorm(768)
    """
    _, plan = planned(source)
    [reported] = plan.attributes
    assert isinstance(reported, UnsafeClass) and reported.norm is CLASSES["MixedFusedLayerNorm"]
    _, unsafe = planned(source, unsafe_fixes=True)
    [rewrite] = unsafe.attributes
    assert isinstance(rewrite, AttributeRewrite)
    assert rewrite.base_import == ("apex.normalization", None, None)


def test_functional_forms_are_reported_with_their_torch_equivalent() -> None:
    _, plan = planned(
        """\
        from apex.normalization.fused_layer_norm import fused_layer_norm_affine

        y = fused_layer_norm_affine(x, weight, bias, shape)
        """
    )
    [reported] = plan.names
    assert isinstance(reported, NoNpuVersion)
    assert reported.advice.startswith("use `torch.nn.functional.layer_norm`: reorder")


def test_imports_that_cannot_be_rewritten_are_reported_and_keep_their_names() -> None:
    _, plan = planned(
        """\
        from apex.normalization import *
        import torch; from apex.normalization import FusedLayerNorm

        norm = FusedLayerNorm(8, memory_efficient=True)
        """
    )
    star, shared = plan.imports
    assert isinstance(star, StarImport) and isinstance(shared, SharedLineImport)
    assert plan.rewrites == []  # the call keeps `memory_efficient`: its class stays apex's
