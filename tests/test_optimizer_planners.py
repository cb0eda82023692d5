"""NPU101's and NPU104's planners on their own: real decisions on small sources, no rule, no
libcst, no diagnostics (migrator.rules.optimizers._fused_planner, ._combine_ddp_planner)."""

from __future__ import annotations

import ast
import textwrap
from typing import Any

import pytest

from migrator.analysis.index import line_of
from migrator.analysis.parse import parse_index
from migrator.analysis.view import FileView
from migrator.diagnostics import Severity
from migrator.rules.optimizers._amp import amp_options, level_arms
from migrator.rules.optimizers._combine_ddp_planner import (
    WrapKept,
    WrapRemoval,
    plan_combine_ddp,
)
from migrator.rules.optimizers._fused_planner import FusedDecisions, Rewrite, plan_fused
from migrator.rules.optimizers._hazards import whole_models
from migrator.rules.optimizers._plans import FusedPlan
from migrator.suppressions import Suppressions


def view_of(code: str) -> FileView:
    return FileView(parse_index(textwrap.dedent(code), "train.py"))


def decide(
    code: str, *, level: str | None = None, factories: dict[str, Any] | None = None
) -> FusedDecisions:
    text = textwrap.dedent(code)
    return plan_fused(
        view_of(text),
        level=level,
        factories=factories or {},
        suppressions=Suppressions.scan(text),
    )


def only_rewrite(decisions: FusedDecisions) -> Rewrite:
    assert not decisions.findings, [f.message for f in decisions.findings]
    (rewrite,) = decisions.rewrites
    return rewrite


def test_an_optimizer_through_amp_gets_the_apex_class_with_its_arguments_mapped() -> None:
    decisions = decide(
        """
        import torch
        from apex import amp

        optimizer = torch.optim.SGD(params, 0.1, 0.9, foreach=True, nesterov=True)
        model, optimizer = amp.initialize(model, optimizer, opt_level="O2")
        """
    )
    rewrite = only_rewrite(decisions)
    assert rewrite.qualified_target == "apex.optimizers.NpuFusedSGD"
    assert rewrite.func_style == "dotted"
    assert rewrite.edits.dropped == frozenset({3})  # foreach
    assert rewrite.edits.to_keyword == {}  # params, lr, momentum line up with NpuFusedSGD
    assert rewrite.edits.added == ()
    assert "goes through `amp.initialize` (line 6)" in rewrite.message
    assert "dropped `foreach=True`" in rewrite.message
    assert decisions.released_imports == ()  # `import torch` stays


def test_an_optimizer_without_amp_gets_torch_npu_and_the_lr_torch_defaults_to() -> None:
    rewrite = only_rewrite(
        decide(
            """
            from torch.optim import SGD as Sgd

            optimizer = Sgd(model.parameters())
            """
        )
    )
    assert rewrite.qualified_target == "torch_npu.optim.NpuFusedSGD"
    assert rewrite.edits.added == (("lr", "0.001"),)
    # The from-import is rewritten in place and keeps its alias; this call carries that edit.
    assert rewrite.func_style == "alias"
    assert rewrite.import_rewrite is not None
    assert rewrite.import_rewrite.module == "torch_npu.optim"
    assert dict(rewrite.import_rewrite.names) == {0: "NpuFusedSGD"}


def test_an_import_rewritten_for_two_calls_is_carried_by_the_first_only() -> None:
    decisions = decide(
        """
        from torch.optim import Adam

        first = Adam(a.parameters(), lr=1e-3)
        second = Adam(b.parameters(), lr=1e-4)
        """
    )
    first, second = decisions.rewrites
    assert first.func_style == second.func_style == "rename"
    assert first.import_rewrite is not None and second.import_rewrite is None


def test_apex_fused_adam_picks_its_class_from_adam_w_mode_and_keeps_its_weight_decay() -> None:
    decisions = decide(
        """
        import apex

        adamw = apex.optimizers.FusedAdam(params, lr=1e-3)
        adam = apex.optimizers.FusedAdam(params, lr=1e-3, adam_w_mode=False)
        """
    )
    adamw, adam = decisions.rewrites
    assert adamw.target == "NpuFusedAdamW" and adamw.edits.added == (("weight_decay", "0.0"),)
    assert adam.target == "NpuFusedAdam" and adam.edits.dropped == frozenset({2})
    # No amp here: torch_npu's classes, spelled out (`apex.optimizers` is not their home).
    assert adamw.qualified_target == "torch_npu.optim.NpuFusedAdamW"
    assert adamw.func_style == adam.func_style == "dotted"


def test_a_refusing_opt_level_is_a_finding_and_no_rewrite() -> None:
    decisions = decide(
        """
        import torch
        from apex import amp

        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
        model, optimizer = amp.initialize(model, optimizer, opt_level="O3")
        """
    )
    assert decisions.rewrites == ()
    (finding,) = decisions.findings
    assert finding.severity is Severity.MANUAL
    assert line_of(finding.node) == 5
    assert "this call uses 'O3'" in finding.message


def test_the_switched_level_is_planned_for() -> None:
    code = """
        import torch
        from apex import amp

        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
        model, optimizer = amp.initialize(model, optimizer, opt_level="O3")
        """
    rewrite = only_rewrite(decide(code, level="O1"))
    assert rewrite.qualified_target == "apex.optimizers.NpuFusedAdam"
    assert 'NPU102 sets `opt_level="O1"` at line 6' in rewrite.message


def test_a_suppressed_constructor_is_neither_planned_nor_reported() -> None:
    decisions = decide(
        """
        import torch

        optimizer = torch.optim.SGD(params, lr=0.1)  # npu-migrate: ignore[NPU101]
        """
    )
    assert decisions.rewrites == () and decisions.findings == ()
    assert decisions.lines(Suppressions()) == set()


def test_the_call_sites_of_a_factory_decide_its_home() -> None:
    code = """
        import torch


        def create_optimizer(model):
            return torch.optim.AdamW(model.parameters(), lr=1e-3)
        """

    def site(at: str, disabled: bool) -> dict[str, Any]:
        """A call at line 4 whose result reaches an `amp.initialize` at ``at`` (link facts)."""
        options = {"refusal": None, "notes": [], "switch": None}
        amp = {"at": at, "disabled": disabled, "levels": {"": options}}
        return {"at": at.replace(":5", ":4"), "amp": [amp]}

    both = {"create_optimizer": {"line": 5, "sites": [site("train.py:5", False)]}}
    rewrite = only_rewrite(decide(code, factories=both))
    assert rewrite.home == "apex.optimizers"
    assert "every call of it passes it to `amp.initialize`" in rewrite.message
    without = {"create_optimizer": {"line": 5, "sites": [site("eval.py:5", True)]}}
    assert only_rewrite(decide(code, factories=without)).home == "torch_npu.optim"


def test_code_that_breaks_a_fused_optimizer_is_a_finding() -> None:
    decisions = decide(
        """
        import torch


        def train(model, loader):
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for x in loader:
                model(x).sum().backward()
                optimizer.step()
                for p in model.head.parameters():
                    p.grad = None
        """
    )
    assert decisions.rewrites == ()
    (finding,) = decisions.findings
    assert "would break here: `p.grad = None` (line 11)" in finding.message


def test_a_loop_that_sets_every_gradient_to_none_becomes_zero_grad() -> None:
    decisions = decide(
        """
        import torch


        def train(model, loader):
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for x in loader:
                model(x).sum().backward()
                optimizer.step()
                for p in model.parameters():
                    p.grad = None
        """
    )
    (rewrite,) = decisions.rewrites
    (fix,) = rewrite.grad_fixes
    assert fix.receiver == "model" and fix.loop is not None and fix.loop.lineno == 10
    assert "with `model.zero_grad(set_to_none=False)`" in rewrite.message


def test_set_to_none_of_the_optimizer_itself_is_dropped_with_the_swap() -> None:
    rewrite = only_rewrite(
        decide(
            """
            import torch


            def train(model, loader):
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                for x in loader:
                    model(x).sum().backward()
                    optimizer.step()
                    optimizer.zero_grad(set_to_none=True)
            """
        )
    )
    (fix,) = rewrite.grad_fixes
    assert fix.receiver is None and fix.line == 10
    assert "dropped `set_to_none` from `optimizer.zero_grad(set_to_none=True)`" in rewrite.message


GATED_AMP = """
import torch
from apex import amp
from apex.optimizers import FusedSGD


def main(args, model):
    torch_optimizer = torch.optim.SGD(model.encoder.parameters(), lr=0.1)
    apex_optimizer = FusedSGD(model.decoder.parameters(), lr=0.1)
    if args.fp16:
        model, [torch_optimizer, apex_optimizer] = amp.initialize(
            model, [torch_optimizer, apex_optimizer], opt_level="O1"
        )
"""


def test_amp_on_some_paths_only_picks_the_class_by_the_same_condition() -> None:
    decisions = decide(GATED_AMP)
    assert not decisions.findings, [f.message for f in decisions.findings]
    callees = [rewrite.callee for rewrite in decisions.rewrites]
    choice = "(apex.optimizers.NpuFusedSGD if args.fp16 else torch_npu.optim.NpuFusedSGD)"
    assert callees == [choice, choice]
    for rewrite in decisions.rewrites:
        assert rewrite.qualified_target == "apex.optimizers.NpuFusedSGD"  # the amp path's
        assert "runs only when `args.fp16` holds" in rewrite.message


def test_nested_and_elif_conditions_are_combined() -> None:
    rewrite = only_rewrite(
        decide(
            """
            import torch
            from apex import amp

            def main(args, model):
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                if args.fp16:
                    if args.amp == "pytorch":
                        scaler = torch.cuda.amp.GradScaler()
                    elif args.amp == "apex":
                        model, optimizer = amp.initialize(model, optimizer, enabled=args.on)
            """
        )
    )
    condition = 'args.fp16 and not (args.amp == "pytorch") and (args.amp == "apex") and args.on'
    assert rewrite.callee == (
        f"(apex.optimizers.NpuFusedSGD if {condition} else torch_npu.optim.NpuFusedSGD)"
    )


@pytest.mark.parametrize(
    ("test", "between"),
    [
        ('config["amp"]', "print(config)"),
        ('cfg["train"]["amp"] and cfg.get("fp16", False)', 'logger.info(cfg["train"])'),
        ('self.config["apex"]', 'lr = self.config.get("lr")'),
        ('not os.getenv("ALLOW_FP32") and os.environ.get("USE_AMP", "0") == "1"', "pass"),
        ('environ["USE_AMP"] == "1"', 'print(environ.get("USE_AMP"))'),
        ('config["amp"]', 'config["lr"] = scale(config["lr"])'),
        ('cfg["train"]["amp"]', 'cfg["data"].update(root="/data")'),
        ('os.environ["USE_AMP"]', 'os.environ["MASTER_ADDR"] = "localhost"'),
    ],
    ids=[
        "dict", "nested-and-get", "attribute", "environment", "environ-imported", "other-key",
        "other-part", "other-variable",
    ],
)  # fmt: skip
def test_a_condition_read_by_constant_keys_picks_the_class(test: str, between: str) -> None:
    rewrite = only_rewrite(
        decide(
            f"""
            import os
            from os import environ
            import torch
            from apex import amp

            def main(self, config, cfg, logger, model):
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                {between}
                if {test}:
                    model, optimizer = amp.initialize(model, optimizer)
            """
        )
    )
    assert rewrite.callee == (
        f"(apex.optimizers.NpuFusedSGD if {test} else torch_npu.optim.NpuFusedSGD)"
    )


@pytest.mark.parametrize(
    ("code", "reason"),
    [
        (
            """
            import torch
            from apex import amp

            def main(args, model):
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                args = reload(args)
                if args.fp16:
                    model, optimizer = amp.initialize(model, optimizer)
            """,
            "`args` may change between the two lines",
        ),
        (
            """
            import torch
            from apex import amp

            def main(args, model):
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                if use_amp(args):
                    model, optimizer = amp.initialize(model, optimizer)
            """,
            "`use_amp(args)` is not made of names, attributes, constants, comparisons and reads",
        ),
        (
            """
            import torch
            from apex import amp

            class Trainer:
                def __init__(self, model, fp16):
                    self.model, self.fp16 = model, fp16
                    self.optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

                def setup(self):
                    if self.fp16:
                        self.model, self.optimizer = amp.initialize(self.model, self.optimizer)
            """,
            "`amp.initialize` is not after the constructor in the same function",
        ),
        (
            """
            import torch
            from apex import amp

            def main(model):
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                from config import args
                if args.fp16:
                    model, optimizer = amp.initialize(model, optimizer)
            """,
            "`args` may change between the two lines",
        ),
        (
            """
            import torch
            from apex import amp

            def main(config, model):
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                config.update(overrides())
                if config["train"]["amp"]:
                    model, optimizer = amp.initialize(model, optimizer)
            """,
            "`config` may change at line 7",
        ),
        (
            """
            import torch
            from apex import amp

            def main(config, model):
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                apply_overrides(config["train"])
                if config["train"]["amp"]:
                    model, optimizer = amp.initialize(model, optimizer)
            """,
            "`config` may change at line 7",
        ),
        (
            """
            import torch
            from apex import amp

            def main(config, model):
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                config["amp"] = False
                if config["amp"] and config["fp16"]:
                    model, optimizer = amp.initialize(model, optimizer)
            """,
            "`config` may change at line 7",
        ),
        (
            """
            import os
            import torch
            from apex import amp

            def main(model):
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                os.putenv("USE_AMP", "0")
                if os.getenv("USE_AMP") == "1":
                    model, optimizer = amp.initialize(model, optimizer)
            """,
            "the environment may change at line 8",
        ),
        (
            """
            import torch
            from apex import amp

            def main(config, key, model):
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                if config[key]:
                    model, optimizer = amp.initialize(model, optimizer)
            """,
            "`config[key]` is not made of names",
        ),
        (
            """
            import torch
            from apex import amp
            from settings import getenv

            def main(model):
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                if getenv("USE_AMP"):
                    model, optimizer = amp.initialize(model, optimizer)
            """,
            '`getenv("USE_AMP")` is not made of names',
        ),
        (
            """
            import torch
            from apex import amp

            def main(cfg, model):
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                cfg.train.amp = False  # an EasyDict: the same place as cfg["train"]["amp"]
                if cfg["train"]["amp"]:
                    model, optimizer = amp.initialize(model, optimizer)
            """,
            "`cfg` may change at line 7",
        ),
    ],
    ids=[
        "rebound", "call", "other-method", "imported", "mapping-updated", "part-handed-on",
        "key-stored", "putenv", "computed-key", "not-os-getenv", "attribute-stored",
    ],
)  # fmt: skip
def test_a_condition_that_may_read_otherwise_at_the_constructor_is_reported(
    code: str, reason: str
) -> None:
    decisions = decide(code)
    assert not decisions.rewrites
    (finding,) = decisions.findings
    assert f"here {reason}" in finding.message


def test_amp_always_counts_a_gated_amp_initialize_as_reached() -> None:
    text = textwrap.dedent(GATED_AMP)
    decisions = plan_fused(
        view_of(text), level=None, factories={}, suppressions=Suppressions.scan(text),
        amp_always=True,
    )  # fmt: skip
    assert not decisions.findings, [f.message for f in decisions.findings]
    homes = [rewrite.qualified_target for rewrite in decisions.rewrites]
    assert homes == ["apex.optimizers.NpuFusedSGD", "apex.optimizers.NpuFusedSGD"]
    for rewrite in decisions.rewrites:
        assert "should be used with AMP" in rewrite.message


# -- NPU104 ----------------------------------------------------------------------------------------

DDP_SCRIPT = """
import contextlib
import torch
from apex import amp
from torch.nn.parallel import DistributedDataParallel as DDP


def main(args, model):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
    if args.distributed:
        model = DDP(model, device_ids=[args.rank], broadcast_buffers=False)
    with model.no_sync():
        model(args.x).sum().backward()
    torch.save(model.module.state_dict(), "m.pt")
"""


def fused_plans(view: FileView) -> dict[int, FusedPlan]:
    """NPU101's plans of the file, as NPU104 reads them (no layout shift needed here)."""
    decisions = plan_fused(view, level=None, factories={}, suppressions=Suppressions())
    return {
        id(r.call): FusedPlan(r.call, r.qualified_target, view.source.end_position(r.call.func))
        for r in decisions.rewrites
    }


def test_a_wrap_of_an_amp_model_with_fused_optimizers_gives_way_to_combine_ddp() -> None:
    view = view_of(DDP_SCRIPT)
    (removal,) = plan_combine_ddp(view, fused_plans(view))
    assert isinstance(removal, WrapRemoval)
    assert isinstance(removal.statement, ast.If) and removal.condition == "args.distributed"
    assert not removal.alone  # the `if` goes; the function keeps its other statements
    assert removal.target == removal.source == "model"
    assert [view.code(node) for node in removal.unwrapped] == ["model.module"]
    assert [view.code(node) for node in removal.no_sync] == ["model.no_sync()"]
    assert removal.imports == (("torch.nn.parallel", "DistributedDataParallel", "DDP"),)
    assert "`combine_ddp=True` when `args.distributed`" in removal.message


def test_a_wrap_stays_when_the_optimizer_is_not_fused() -> None:
    view = view_of(DDP_SCRIPT)
    (kept,) = plan_combine_ddp(view, {})  # NPU101 does not run
    assert isinstance(kept, WrapKept)
    assert "`optimizer` (line 9) is not an NPU fused optimizer" in kept.message


def test_a_wrap_stays_when_the_wrapper_is_used_in_a_way_it_cannot_follow() -> None:
    view = view_of(
        DDP_SCRIPT.replace('torch.save(model.module.state_dict(), "m.pt")', "hook(model)")
    )
    (kept,) = plan_combine_ddp(view, fused_plans(view))
    assert isinstance(kept, WrapKept)
    assert "passed to `hook`, which npu-migrate cannot see into (line 15)" in kept.message


# -- the fused optimizers' contract (NPU101) -------------------------------------------------------


def contract_findings(code: str) -> list[str]:
    decisions = decide(code)
    return [finding.message for finding in decisions.findings]


def test_a_move_between_two_steps_breaks_the_contract_and_names_its_line() -> None:
    (message,) = contract_findings(
        """
        import torch


        def main(model, loader):
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for epoch in range(3):
                for x in loader:
                    optimizer.step()
                model.cpu()
                model.cuda()
        """
    )
    assert "`model.cpu()` (line 10) moves this optimizer's parameters to the CPU" in message


def test_moves_before_the_first_step_or_after_the_last_keep_the_contract() -> None:
    assert not contract_findings(
        """
        import torch


        def main(model, loader):
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            model.half()
            for x in loader:
                optimizer.step()
            model.cpu()
        """
    )


def test_an_optimizer_built_again_for_each_run_starts_unpacked() -> None:
    # Each fold moves the model and then builds a new optimizer: nothing packed is moved.
    assert not contract_findings(
        """
        import torch


        def cross_validate(model, folds):
            for fold in folds:
                model.cpu()
                model.cuda()
                optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
                for x in fold:
                    optimizer.step()
        """
    )


def test_steps_of_another_optimizer_do_not_count() -> None:
    # The generator's optimizer is never stepped in the loop that moves the generator.
    assert not contract_findings(
        """
        import torch


        def main(netG, netD, loader):
            optG = torch.optim.Adam(netG.parameters(), lr=1e-3)
            optD = torch.optim.Adam(netD.parameters(), lr=1e-3)
            for x in loader:
                optD.step()
                netG.cpu()
            netG.cuda()
        """
    )


def test_a_step_in_another_module_counts_when_it_is_handed_the_optimizer() -> None:
    (message,) = contract_findings(
        """
        import torch
        from engine import train_one_epoch


        def main(model, loader):
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for epoch in range(3):
                train_one_epoch(model, optimizer, loader)
                model.to(torch.float16)
        """
    )
    assert "`model.to(torch.float16)` (line 10) casts this optimizer's parameters to float16" in (
        message
    )


def test_a_tensor_made_from_the_model_is_not_the_model() -> None:
    assert not contract_findings(
        """
        import torch


        def main(model, loader):
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for x in loader:
                optimizer.step()
                sample = model.decode(x).cpu()
                weight = model.fc.weight.cpu()
                state = {k: v.cpu() for k, v in model.state_dict().items()}
        """
    )


# -- opt levels computed at run time, and models that stay on the CPU (NPU101, NPU102) -------------


def amp_call(view: FileView) -> ast.Call:
    return next(
        call
        for call in view.index.nodes(ast.Call)
        if isinstance(call.func, ast.Attribute) and call.func.attr == "initialize"
    )


def test_every_arm_of_a_computed_level_is_read() -> None:
    view = view_of(
        """
        import argparse
        from apex import amp

        parser = argparse.ArgumentParser()
        parser.add_argument("--amp-level", dest="level", default="O2")
        args = parser.parse_args()
        TABLE = {"fp32": "O0", "fp16": args.level}
        if args.pure:
            chosen = "O3"
        else:
            chosen = TABLE[args.precision] if args.table else "O1"
        amp.initialize(model, optimizer, opt_level=chosen)
        """
    )
    call = amp_call(view)
    arms = level_arms(view, call, call.keywords[0].value)
    assert [(arm.level, arm.when, arm.line) for arm in arms] == [
        ("O3", "when `args.pure` holds", 10),
        ("O0", 'when `args.precision` is "fp32"', 8),
        ("O2", "by default (`--amp-level`)", 6),
        (None, 'when `args.precision` is "fp16"', 8),  # what the command line passes instead
        ("O1", "when `args.table` is false", 12),
    ]
    options = amp_options(view, call, None)
    assert options.level == "O3"
    assert options.level_shown() == (
        "'O3' on one path: `chosen` is 'O3' when `args.pure` holds (line 10)"
    )
    assert options.refuses_fused() is not None


def test_a_level_whose_arms_are_all_fused_needs_no_run_time_note() -> None:
    view = view_of(
        """
        from apex import amp

        level = "O2" if half else "O1"
        amp.initialize(model, optimizer, opt_level=level)
        """
    )
    options = amp_options(view, amp_call(view), None)
    assert options.level is None and options.arms_fused
    assert options.refuses_fused() is None and options.run_time_notes() == []


def test_a_model_that_stays_on_the_cpu_keeps_torch_optimizer() -> None:
    decisions = decide(
        """
        import torch


        def test_step():
            model = torch.nn.Linear(4, 2)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            model(torch.randn(3, 4)).sum().backward()
            optimizer.step()


        def test_moved(device):
            model = torch.nn.Linear(4, 2)
            model.to(device)
            return torch.optim.SGD(model.parameters(), lr=0.1)
        """
    )
    (finding,) = decisions.findings
    assert finding.severity is Severity.INFO and line_of(finding.node) == 7
    assert "its parameters stay on the CPU (`torch.nn.Linear(4, 2)`, line 6" in finding.message
    (rewrite,) = decisions.rewrites
    assert line_of(rewrite.call) == 15


# -- zero_grad fixes -------------------------------------------------------------------------------

GAN_LOOP = """
import torch

def train(netD, netG, loader):
    optimizerD = torch.optim.Adam(netD.parameters(), lr=2e-4)
    optimizerG = torch.optim.Adam(netG.parameters(), lr=2e-4{G_OPTIONS})
    for x in loader:
        netD.zero_grad()
        netD(x).mean().backward()
        optimizerD.step()
        netG.zero_grad()
        netD(netG(x)).mean().backward()
        optimizerG.step()
"""


def test_module_zero_grad_is_fixed_when_each_network_has_its_own_fused_optimizer() -> None:
    decisions = decide(GAN_LOOP.replace("{G_OPTIONS}", ""))
    assert not decisions.findings, [f.message for f in decisions.findings]
    fixed = [fix for rewrite in decisions.rewrites for fix in rewrite.grad_fixes]
    assert sorted((fix.receiver, fix.line) for fix in fixed) == [("netD", 8), ("netG", 11)]


def test_a_zero_grad_fix_that_relies_on_an_unfused_optimizer_is_not_made() -> None:
    # optimizerG cannot be fused (maximize=True): netG's gradients must stay None for it, so
    # netG.zero_grad() cannot change, and optimizerD, in the same loop, stays unfused too.
    decisions = decide(GAN_LOOP.replace("{G_OPTIONS}", ", maximize=True"))
    assert not decisions.rewrites
    by_line = {line_of(finding.node): finding.message for finding in decisions.findings}
    assert "`maximize=True`" in by_line[6]
    assert "the optimizer of `netG` (line 6) stays unfused" in by_line[5]


# The params argument of `Adam(...)` on the last line, and the models it holds whole.
WHOLE_MODELS = {
    "one model": ("Adam(g.parameters())", {"g"}),
    "chain, aliased": (
        "from itertools import chain as ichain\nAdam(ichain(g.parameters(), e.parameters()))",
        {"g", "e"},
    ),
    "list sum": ("Adam(list(g.parameters()) + list(e.parameters()) + extra)", {"g", "e"}),
    "starred": ("Adam([*g.parameters(), *e.parameters(), p])", {"g", "e"}),
    "groups": (
        'Adam([{"params": g.parameters()}, {"params": e.parameters(), "lr": 1}])',
        {"g", "e"},
    ),
    "bound once": ("params = [*g.parameters()]\nAdam(params)", {"g"}),
    "trainable": ("Adam(filter(lambda p: p.requires_grad, g.parameters()))", {"g"}),
    "named": ("Adam([p for n, p in g.named_parameters() if p.requires_grad])", {"g"}),
    # Not provably whole: nothing.
    "read before": ("params = list(g.parameters())\nparams.pop()\nAdam(params)", set()),
    "bound twice": (
        "params = g.parameters()\nif c:\n    params = e.parameters()\nAdam(params)",
        set(),
    ),
    "group unpacked": ('Adam([{"params": g.parameters(), **extra}])', set()),
    "group key computed": ('Adam([{"params": g.parameters(), key: e.parameters()}])', set()),
    "other filter": ("Adam(filter(lambda p: p.dim() > 1, g.parameters()))", set()),
    "other test": ("Adam([p for p in g.parameters() if p.dim() > 1])", set()),
    "names swapped": ("Adam([n for n, p in g.named_parameters()])", set()),
    "local chain": (
        "def chain(*a):\n    return a[0]\nAdam(chain(g.parameters(), e.parameters()))",
        set(),
    ),
    "recurse off": ("Adam(g.parameters(recurse=False))", set()),
    "conditional": ("Adam(g.parameters() if c else e.parameters())", set()),
}


@pytest.mark.parametrize("case", WHOLE_MODELS)
def test_whole_models_are_only_those_every_parameter_of_which_is_held(case: str) -> None:
    code, expected = WHOLE_MODELS[case]
    view = view_of(code)
    last = view.index.tree.body[-1]
    assert isinstance(last, ast.Expr) and isinstance(last.value, ast.Call)
    assert whole_models(view, last.value.args[0]) == expected


def test_a_hazard_met_many_times_names_its_first_lines_and_counts_the_rest() -> None:
    head = [
        "import torch",
        "",
        "def train(model, layer, batches):",
        "    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)",
        "    for batch in batches:",
        "        model(batch).sum().backward()",
    ]
    stores = ["        layer.weight.grad = None"] * 12
    code = "\n".join([*head, *stores, "        optimizer.step()", ""])
    decisions = plan_fused(
        view_of(code), level=None, factories={}, suppressions=Suppressions.scan(code)
    )
    assert not decisions.rewrites
    (finding,) = decisions.findings
    first = len(head) + 1  # the line of the first store
    named = ", ".join(str(first + i) for i in range(8))
    assert f"`layer.weight.grad = None` (lines {named} and 4 more)" in finding.message
    assert str(first + 8) not in finding.message
