"""The report of ``npu-migrate verify``: the tolerance used, a step table (rich), the verdict."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from migrator.verify.compare import Comparison, Tolerance


def print_comparison(
    out: Console,
    comparison: Comparison,
    tolerance: Tolerance,
    synthetic_layouts: Sequence[str],
) -> None:
    out.print(f"tolerance: {escape(tolerance.describe())}", soft_wrap=True)
    if synthetic_layouts:
        shapes = "; ".join(synthetic_layouts)
        out.print(f"synthetic data: random batches shaped like {escape(shapes)}", soft_wrap=True)
    out.print(step_table(comparison))
    out.print(verdict(comparison), soft_wrap=True)


def step_table(comparison: Comparison) -> Table:
    caption = None
    if comparison.ranks > 1:
        caption = f"losses of rank 0; parameter differences over all {comparison.ranks} ranks"
    table = Table(caption=caption)
    table.add_column("step", justify="right")
    table.add_column("loss original", justify="right")
    table.add_column("loss migrated", justify="right")
    table.add_column("max param diff", justify="right")
    for row in comparison.rows:
        table.add_row(
            str(row.step),
            losses(row.losses_original),
            losses(row.losses_migrated),
            "-" if row.max_param_difference is None else f"{row.max_param_difference:.3g}",
            style="bold red" if row.differs else None,
        )
    return table


def losses(values: tuple[float, ...] | None) -> str:
    if values is None:
        return "-"
    return " / ".join(f"{value:.6g}" for value in values) or "(none)"


def verdict(comparison: Comparison) -> str:
    difference = comparison.first_difference
    steps = len(comparison.rows)
    if difference is None:
        return f"[bold green]same[/]: {steps} step(s) agree within the tolerance"
    rank = f" (rank {difference.rank})" if comparison.ranks > 1 else ""
    return (
        f"[bold red]different[/] from step {difference.step}{rank}: "
        f"{escape(difference.what)}: {escape(difference.detail)}"
    )
