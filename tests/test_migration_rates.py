"""tools/migration_rates.py on a small repository, through the real command line."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

FILES = {
    # Rewritten (no amp here: torch_npu's class), and its amp call completed by NPU102.
    "train.py": """\
        import torch
        from apex import amp


        def main(model):
            optimizer = torch.optim.SGD(model.cuda().parameters(), lr=0.1)
            model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
            return model, optimizer
        """,
    # Reported: FusedLAMB has no NPU counterpart (it does not run on Ascend at all), and so its
    # amp call stays as it is.
    "lamb.py": """\
        from apex import amp
        from apex.optimizers import FusedLAMB


        def build(model):
            optimizer = FusedLAMB(model.cuda().parameters(), lr=0.1)
            return amp.initialize(model, optimizer, opt_level="O1")
        """,
    # Rewritten: the optimizer a method returns, fixed in its caller (one construction).
    "gpt.py": """\
        import torch


        class GPT(torch.nn.Module):
            def configure_optimizers(self, lr):
                return torch.optim.AdamW(self.parameters(), lr=lr)
        """,
    "loop.py": """\
        from gpt import GPT


        def main(batches):
            model = GPT().cuda()
            optimizer = model.configure_optimizers(1e-3)
            for batch in batches:
                model(batch).sum().backward()
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
        """,
    # Reported: its parameters are re-allocated between two steps.
    "halves.py": """\
        import torch


        def train(model, batches):
            model = model.cuda()
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for batch in batches:
                model(batch).sum().backward()
                optimizer.step()
                model.half()
                model.float()
        """,
    # Reported, and right as written: Ascend apex refuses NPU fused optimizers at opt level O0.
    "fp32.py": """\
        import torch
        from apex import amp


        def main(model):
            optimizer = torch.optim.Adam(model.cuda().parameters(), lr=0.1)
            return amp.initialize(model, optimizer, opt_level="O0")
        """,
}


def test_the_rates_count_rewritten_reported_and_missing_counterparts(tmp_path: Path) -> None:
    repository = tmp_path / "project"
    repository.mkdir()
    for name, code in FILES.items():
        (repository / name).write_text(textwrap.dedent(code))
    before = {path: path.read_bytes() for path in repository.iterdir()}
    done = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "migration_rates.py"), "--markdown", str(repository)],
        capture_output=True,
        text=True,
        check=True,
    )
    rows = [line for line in done.stdout.splitlines() if line.startswith("| project ")]
    # loop.py's fixed `zero_grad` is not a construction of its own; halves.py is kept by the
    # fused optimizers' contract, fp32.py by Ascend apex's opt levels, and lamb.py's amp call
    # has only an optimizer without counterpart: the second rates leave them aside (fp32.py's
    # amp call, which Ascend apex gives no combine_grad at O0, stays a reported one).
    expected = "| project | 2 | 3 | 1 | 50% | 2 | 100% | 1 | 2 | 1 | 33% | 50% |"
    assert rows == [expected], done.stdout
    # It only checks: the repository is left as it was.
    assert {path: path.read_bytes() for path in repository.iterdir()} == before
