"""`zero_grad` fixed with the optimizer swap keeps the numbers, in the shapes of NVIDIA's examples.

A program trains with a module's `zero_grad()` (the default sets the gradients to None) in five
shapes: two GAN models through `amp.initialize` (apex's dcgan), a model zeroed twice per step
(Tacotron2), the optimizer chosen per branch (FastPitch), a class picked from a dict (HiFiGAN)
and an optimizer that a second one over the whole model replaces under a flag (ModelZoo's vit).
NPU101 fuses every optimizer and rewrites each `zero_grad`; the original runs on the apex
runtime, the migrated copy on the runtime plus the CPU torch_npu stand-in, and the final
parameters must agree. EDSR's factory rides along: a class and the keys it takes chosen in each
arm of one `if`/`elif` chain, and a class derived from it on the spot that adds a scheduler,
mapped where the class statement reads the chosen class.
"""

from __future__ import annotations

import textwrap

import pytest
import torch

from migrator.engine import migrate_source
from migrator.registry import all_rules, select_rules
from migrator.results import Status
from migrator.settings import Settings

testing = pytest.importorskip("apex.testing", reason="needs the runtime: pip install -e runtime")

PROGRAM = textwrap.dedent(
    """
    import argparse
    import itertools
    import json

    import torch
    import torch.optim as optim
    from apex import amp
    from apex.optimizers import FusedAdam, FusedLAMB


    def net(seed, sizes=(4, 8, 4)):
        torch.manual_seed(seed)
        first, hidden, last = sizes
        return torch.nn.Sequential(
            torch.nn.Linear(first, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, last)
        )


    def batches(steps=4):
        generator = torch.Generator().manual_seed(1)
        for _ in range(steps):
            yield torch.randn(8, 4, generator=generator), torch.randn(8, 4, generator=generator)


    def flat(*models):
        return [p.detach().flatten().tolist() for m in models for p in m.parameters()]


    def gan():
        netD, netG = net(0, (4, 8, 1)), net(1)
        optimizerD = optim.Adam(netD.parameters(), lr=1e-2, betas=(0.5, 0.999))
        optimizerG = optim.Adam(netG.parameters(), lr=1e-2, betas=(0.5, 0.999))
        [netD, netG], [optimizerD, optimizerG] = amp.initialize(
            [netD, netG], [optimizerD, optimizerG], opt_level="O1", num_losses=2, verbosity=0
        )
        for real, noise in batches():
            netD.zero_grad()
            errD = netD(real).mean() - netD(netG(noise).detach()).mean()
            with amp.scale_loss(errD, optimizerD, loss_id=0) as scaled:
                scaled.backward()
            optimizerD.step()
            netG.zero_grad()
            with amp.scale_loss(-netD(netG(noise)).mean(), optimizerG, loss_id=1) as scaled:
                scaled.backward()
            optimizerG.step()
        return flat(netD, netG)


    def tacotron():
        model = net(2)
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-2, weight_decay=1e-4)
        for x, y in batches():
            model.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
            model.zero_grad(set_to_none=True)
        return flat(model)


    def fastpitch(args):
        model = net(3)
        kw = dict(lr=1e-2, betas=(0.9, 0.98), eps=1e-9, weight_decay=args.weight_decay)
        if args.optimizer == "adam":
            optimizer = FusedAdam(model.parameters(), **kw)
        elif args.optimizer == "lamb":
            optimizer = FusedLAMB(model.parameters(), **kw)
        else:
            raise ValueError(args.optimizer)
        for x, y in batches():
            model.zero_grad(set_to_none=True)
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
        return flat(model)


    def hifigan(args):
        gen, msd, mpd = net(4), net(5, (4, 8, 1)), net(6, (4, 8, 1))
        kw = {"lr": 1e-2, "betas": (0.8, 0.99)}
        proto = {"adamw": torch.optim.AdamW, "lamb": FusedLAMB}[args.optimizer]
        optim_g = proto(gen.parameters(), **kw)
        optim_d = proto(itertools.chain(msd.parameters(), mpd.parameters()), **kw)
        for x, y in batches():
            optim_d.zero_grad(set_to_none=True)
            (msd(y).mean() - mpd(gen(x).detach()).mean()).backward()
            optim_d.step()
            optim_g.zero_grad(set_to_none=True)
            (-msd(gen(x)).mean()).backward()
            optim_g.step()
        return flat(gen, msd, mpd)


    def vit(args):
        model = net(7)
        optimizer = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)
        if args.keep_dtype:
            optimizer = torch.optim.SGD(model.parameters(), lr=2e-2, momentum=0.5)
        model.zero_grad()
        for x, y in batches():
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
            model.zero_grad()
        return flat(model)


    def edsr(args, name):
        model = net(8)
        kwargs_optimizer = {"lr": 1e-2, "weight_decay": args.weight_decay}
        if name == "SGD":
            optimizer_class = optim.SGD
            kwargs_optimizer["momentum"] = 0.9
        elif name == "ADAM":
            optimizer_class = optim.Adam
            kwargs_optimizer["betas"] = (0.8, 0.99)
            kwargs_optimizer["eps"] = 1e-6
        else:
            optimizer_class = optim.RMSprop
            kwargs_optimizer["eps"] = 1e-6


        class CustomOptimizer(optimizer_class):
            def __init__(self, *args, **kwargs):
                super(CustomOptimizer, self).__init__(*args, **kwargs)

            def _register_scheduler(self, scheduler_class, **kwargs):
                self.scheduler = scheduler_class(self, **kwargs)

            def schedule(self):
                self.scheduler.step()

        optimizer = CustomOptimizer(model.parameters(), **kwargs_optimizer)
        optimizer._register_scheduler(optim.lr_scheduler.StepLR, step_size=2, gamma=0.5)
        for x, y in batches():
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
            optimizer.schedule()
        return flat(model)


    if __name__ == "__main__":
        parser = argparse.ArgumentParser()
        parser.add_argument("--optimizer", default="adam")
        parser.add_argument("--weight-decay", type=float, default=1e-3)
        args = parser.parse_args()
        results = {"gan": gan(), "tacotron": tacotron(), "fastpitch": fastpitch(args)}
        args.optimizer = "adamw"
        results["hifigan"] = hifigan(args)
        for args.keep_dtype in (False, True):
            results[f"vit {args.keep_dtype}"] = vit(args)
        for name in ("SGD", "ADAM", "RMSprop"):
            results[f"edsr {name}"] = edsr(args, name)
        print(json.dumps(results))
    """
)


@pytest.fixture(scope="module")
def migrated() -> str:
    rules = select_rules(all_rules(), ("NPU101", "NPU102"))
    result = migrate_source(PROGRAM.encode(), "program.py", rules, Settings())
    assert result.status is Status.CHANGED, result.diagnostics
    left = [d.message for d in result.diagnostics if d.severity != "fixed"]
    # Only the LAMB arms stay as written: they have no NPU counterpart.
    assert left and all("FusedLAMB" in message for message in left), left
    return result.migrated.decode()


def test_every_zero_grad_is_rewritten_with_its_optimizer(migrated: str) -> None:
    # netD, netG, Tacotron2's model twice, FastPitch's model, vit's model twice
    assert migrated.count("zero_grad(set_to_none=False)") == 7
    assert migrated.count("torch_npu.optim.NpuFusedSGD(model.parameters()") == 2  # vit's two
    assert "torch.optim.RMSprop: torch_npu.optim.NpuFusedRMSprop" in migrated  # EDSR's classes
    assert "}.get(optimizer_class, optimizer_class)):" in migrated  # ... as CustomOptimizer's base
    assert migrated.count("optim_d.zero_grad()") == migrated.count("optim_g.zero_grad()") == 1
    assert migrated.count("apex.optimizers.NpuFusedAdam(") == 2  # the GAN's, under amp
    assert "combine_grad=True" in migrated
    assert "torch_npu.optim.NpuFusedAdamW(model.parameters()" in migrated  # FastPitch's adam arm
    assert "torch.optim.AdamW: torch_npu.optim.NpuFusedAdamW" in migrated  # HiFiGAN's dict


def test_the_migrated_program_trains_the_same(migrated: str, run_json_program) -> None:
    original = run_json_program(PROGRAM, None, "original.py")
    after = run_json_program(migrated, testing.npu_shim_env(), "migrated.py")
    assert original.keys() == after.keys()
    for case, tensors in original.items():
        for before, now in zip(tensors, after[case], strict=True):
            # the fused kernels only change the summation order
            torch.testing.assert_close(
                torch.tensor(now), torch.tensor(before), rtol=1e-5, atol=1e-6, msg=case
            )
