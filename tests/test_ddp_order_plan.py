"""NPU203's planner on its own (rules/normalization_parallel/_ddp_order.py): which statement
lines of a block move above which DDP wrap, which optimizers are reported and why, on small
sources, without the rule, libcst or diagnostics. The fixtures (fixtures/npu203) hold the
rule's output; these tests hold the decisions it is made from."""

from __future__ import annotations

import ast
import textwrap

from migrator.analysis.effects import CallNames
from migrator.analysis.parse import parse_index
from migrator.analysis.view import FileView
from migrator.rules.normalization_parallel._ddp_order import (
    NOT_MOVABLE,
    DdpOrderPlan,
    Move,
    plan_ddp_order,
)
from migrator.rules.normalization_parallel._ddp_proof import jumped_lines


def view_of(source: str) -> FileView:
    return FileView(parse_index(textwrap.dedent(source), "train.py"))


def plan_of(view: FileView, removed_wraps: frozenset[int] = frozenset()) -> DdpOrderPlan:
    return plan_ddp_order(view, CallNames(view, "train.py", {}, {}), removed_wraps)


def only_move(plan: DdpOrderPlan) -> Move:
    [move] = plan.moves
    return move


def moved_code(view: FileView, move: Move) -> list[str]:
    return [view.code(move.lines[index][0]).splitlines()[0] for index in move.moved]


DINO = """\
import torch
import torch.nn as nn

from checkpoints import load_pretrained


def get_params_groups(model):
    decayed, plain = [], []
    for name, param in model.named_parameters():
        if name.endswith(".bias") or len(param.shape) == 1:
            plain.append(param)
        else:
            decayed.append(param)
    return [{"params": decayed}, {"params": plain, "weight_decay": 0.0}]


def train(args, student, teacher):
    teacher = nn.parallel.DistributedDataParallel(teacher, device_ids=[args.gpu])
    load_pretrained(student, args.weights)
    student = nn.parallel.DistributedDataParallel(student, device_ids=[args.gpu])
    teacher.module.load_state_dict(student.module.state_dict())
    print("built")
    params_groups = get_params_groups(student)
    if args.optimizer == "adamw":
        optimizer = torch.optim.AdamW(params_groups)
    else:
        optimizer = torch.optim.SGD(params_groups, lr=0, momentum=0.9)
    return student, teacher, optimizer
"""
STUDENT_WRAP = "    student = nn.parallel.DistributedDataParallel(student, device_ids=[args.gpu])\n"


def test_a_dino_shaped_function_moves_the_optimizer_above_the_student_wrap() -> None:
    """The student's optimizer cannot go above the teacher's wrap (line 18): line 19 changes
    the student before it. It reads nothing of the teacher, so it goes above the student's wrap
    (line 20) instead, with the line that builds its parameter groups, and the move states what
    it assumes about the student."""
    view = view_of(DINO)
    plan = plan_of(view)
    move = only_move(plan)
    assert move.wrap_line == 20
    assert view.code(move.lines[move.above][0]) == STUDENT_WRAP.strip()
    assert moved_code(view, move) == [
        "params_groups = get_params_groups(student)",
        'if args.optimizer == "adamw":',
    ]
    assert move.moved_lines == [23, 24]
    assert [statement.lineno for statement in move.optimizers] == [24]
    assert move.needed == (23,)  # the line the optimizer needs moves with it
    assert move.unwraps == ()  # above its wrap, `student` is the model itself
    assert move.assumptions == (
        "`student` has no parameter of its own named `bias` (`get_params_groups` tests its "
        "parameter names, which DDP prefixes with `module.`)",
    )
    assert plan.refusals == []  # refused above the teacher's wrap, moved above the student's


def test_without_a_line_that_changes_the_student_it_goes_above_the_first_wrap() -> None:
    view = view_of(DINO.replace("    load_pretrained(student, args.weights)\n", ""))
    assert only_move(plan_of(view)).wrap_line == 18


def test_a_moved_dino_function_has_nothing_left_to_plan() -> None:
    """The output of the move: the optimizer after the teacher's wrap concerns only the
    student, whose wrap is below it now; no move, and nothing to report."""
    optimizer = DINO[DINO.index("    params_groups") : DINO.rindex("    return")]
    moved = DINO.replace(optimizer, "").replace(STUDENT_WRAP, optimizer + STUDENT_WRAP)
    assert moved != DINO
    plan = plan_of(view_of(moved))
    assert plan.moves == [] and plan.refusals == [] and plan.after_hidden_wraps == []


IMAGENET = """\
import torch
from torch.nn.parallel import DistributedDataParallel as DDP


def main(model, args):
    model.cuda(args.gpu)
    model = DDP(model, device_ids=[args.gpu])
    criterion = torch.nn.CrossEntropyLoss().cuda(args.gpu)
    optimizer = torch.optim.SGD(model.module.parameters(), args.lr, momentum=args.momentum)
    return model, criterion, optimizer
"""


def test_model_module_becomes_the_model_above_the_wrap() -> None:
    view = view_of(IMAGENET)
    move = only_move(plan_of(view))
    assert (move.wrap_line, move.moved_lines, move.needed) == (7, [9], ())
    [unwrap] = move.unwraps
    assert view.code(unwrap.node) == "model.module"
    assert (unwrap.becomes, unwrap.receiver_only) == (("model",), False)


def test_the_wrapper_s_parameters_become_the_model_s() -> None:
    view = view_of(
        """\
        import torch
        from torch.nn.parallel import DistributedDataParallel


        def main(model):
            ddp_model = DistributedDataParallel(model)
            optimizer = torch.optim.Adam(ddp_model.parameters(), lr=1e-3)
            return ddp_model, optimizer
        """
    )
    [unwrap] = only_move(plan_of(view)).unwraps
    assert view.code(unwrap.node) == "ddp_model.parameters"
    assert (unwrap.becomes, unwrap.receiver_only) == (("model",), True)


def test_an_optimizer_in_a_loop_is_refused_with_the_wrap_it_should_precede() -> None:
    view = view_of(
        """\
        import torch
        from torch.nn.parallel import DistributedDataParallel as DDP


        def main(models):
            model = DDP(models[0])
            for _ in range(2):
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            return optimizer
        """
    )
    plan = plan_of(view)
    assert plan.moves == []
    [refusal] = plan.refusals
    assert (view.code(refusal.call)[:19], refusal.wrap_line) == ("torch.optim.SGD(mod", 6)
    assert refusal.reason == NOT_MOVABLE


def test_an_unknown_call_in_what_would_move_is_refused_and_named() -> None:
    view = view_of(
        """\
        import torch
        from torch.nn.parallel import DistributedDataParallel as DDP
        from helpers import build_groups


        def main(model):
            model = DDP(model)
            optimizer = torch.optim.SGD(build_groups(model.module), lr=0.1)
            return optimizer
        """
    )
    [refusal] = plan_of(view).refusals
    assert refusal.reason.startswith("it calls `build_groups(...)`, which might depend on")


def test_a_line_in_between_that_the_optimizer_needs_moves_with_it() -> None:
    view = view_of(
        """\
        import torch
        from torch.nn.parallel import DistributedDataParallel as DDP


        def main(model, args):
            model = DDP(model)
            args.lr = args.lr * 8
            optimizer = torch.optim.SGD(model.module.parameters(), lr=args.lr)
            return optimizer
        """
    )
    move = only_move(plan_of(view))
    assert (move.moved_lines, move.needed) == ([7, 8], (7,))


def test_a_line_the_optimizer_needs_that_cannot_move_keeps_the_order() -> None:
    view = view_of(
        """\
        import torch
        from torch.nn.parallel import DistributedDataParallel as DDP


        def main(model, args):
            model = DDP(model)
            with open(args.config) as config:
                lr = float(config.read())
            optimizer = torch.optim.SGD(model.module.parameters(), lr=lr)
            return optimizer
        """
    )
    plan = plan_of(view)
    assert plan.moves == []
    [refusal] = plan.refusals
    assert refusal.reason == (
        "it needs what line 7 sets between the wrap and here, which cannot be moved"
    )


def test_an_optimizer_after_a_function_that_wraps_is_reported_at_the_wrap_inside() -> None:
    view = view_of(
        """\
        import torch
        from torch.nn.parallel import DistributedDataParallel


        def wrap(model):
            return DistributedDataParallel(model)


        def main(model):
            model = wrap(model)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            return optimizer
        """
    )
    plan = plan_of(view)
    assert plan.moves == [] and plan.refusals == []
    [found] = plan.after_hidden_wraps
    assert (found.call.lineno, found.wrap_line) == (11, 6)
    assert found.why == "`wrap()` wraps the model in DDP"


def test_a_wrap_that_npu104_removes_is_no_wrap_to_move_above() -> None:
    view = view_of(IMAGENET)
    [wrap] = [
        call
        for call in view.index.nodes(ast.Call)
        if isinstance(call.func, ast.Name) and call.func.id == "DDP"
    ]
    assert plan_of(view).moves  # the same file, with the wrap kept
    plan = plan_of(view, removed_wraps=frozenset({id(wrap)}))
    assert plan.moves == [] and plan.refusals == [] and plan.after_hidden_wraps == []


def test_a_file_without_a_wrap_has_an_empty_plan() -> None:
    plan = plan_of(view_of("import torch\noptimizer = torch.optim.SGD([], lr=0.1)\n"))
    assert plan == DdpOrderPlan()


def test_a_line_to_move_is_checked_against_the_staying_lines_before_it() -> None:
    """Wrap at 2, lines 4 and 7 to move: 4 changes places with 2 and 3 only (5 and 6 stay
    after it), 7 with 2, 3, 5 and 6, whether 4 was accepted for an earlier target or not."""
    assert jumped_lines(2, [4, 7]) == {4: [2, 3], 7: [2, 3, 5, 6]}
    assert jumped_lines(2, [5]) == {5: [2, 3, 4]}


def test_a_loop_that_changes_the_groups_through_its_variable_keeps_the_order() -> None:
    """`for group in groups: group.setdefault(...)` changes the dicts the optimizer is given:
    built above the loop, SGD would fill in its default weight decay first."""
    view = view_of(
        """\
        import torch
        from torch.nn.parallel import DistributedDataParallel as DDP


        def build(model):
            groups = [{"params": model.backbone.parameters()}]
            model = DDP(model)
            for group in groups:
                group.setdefault("weight_decay", 0.0)
            optimizer = torch.optim.SGD([*groups, {"params": model.module.head.parameters()}])
            return optimizer
        """
    )
    plan = plan_of(view)
    assert plan.moves == []
    [refusal] = plan.refusals
    assert refusal.reason == (
        "it needs what line 8 sets between the wrap and here, which cannot be moved"
    )


def test_a_loop_that_only_reads_its_elements_is_crossed() -> None:
    view = view_of(
        """\
        import torch
        from torch.nn.parallel import DistributedDataParallel as DDP


        def build(model, groups):
            model = DDP(model)
            for group in groups:
                print(group["lr"])
            optimizer = torch.optim.SGD(model.module.parameters(), lr=0.1)
            return optimizer
        """
    )
    assert only_move(plan_of(view)).moved_lines == [9]
