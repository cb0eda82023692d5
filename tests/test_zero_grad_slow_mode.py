"""NPU101's `model.zero_grad(set_to_none=False)` fix decides the same with the engine's
shortcuts on and off (``Engine(fast=False)``, the switch of tests/test_soundness.py).

With the candidate filters off every call of the file is a candidate, so the fix must not take
every call given something (`criterion(output, label)`, `netD(real)`) for an optimizer that may
hold the module's parameters: it would refuse, in slow mode only, the fix that fast mode applies.
Nor may it take every call for a known constructor when it looks for unknown optimizers given the
module's parameters (`torch.optim.Adagrad(model.parameters())`): both modes must refuse.
"""

from __future__ import annotations

import textwrap

import pytest

from migrator.engine import Engine
from migrator.registry import all_rules
from migrator.results import FileResult, Status
from migrator.settings import Settings

# apex's examples/dcgan/main_amp.py in miniature: two models through amp.initialize, a loss
# module called like a model, each model zeroed by its own `zero_grad()`.
DCGAN = textwrap.dedent(
    """
    import argparse

    import torch
    import torch.nn as nn
    import torch.optim as optim
    from apex import amp

    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=0.0002)
    parser.add_argument("--beta1", type=float, default=0.5)
    parser.add_argument("--opt_level", default="O1")
    opt = parser.parse_args()

    netG = nn.Sequential(nn.ConvTranspose2d(100, 3, 4), nn.Tanh()).cuda()
    netD = nn.Sequential(nn.Conv2d(3, 1, 4), nn.Flatten()).cuda()
    criterion = nn.BCEWithLogitsLoss()

    optimizerD = optim.Adam(netD.parameters(), lr=opt.lr, betas=(opt.beta1, 0.999))
    optimizerG = optim.Adam(netG.parameters(), lr=opt.lr, betas=(opt.beta1, 0.999))

    [netD, netG], [optimizerD, optimizerG] = amp.initialize(
        [netD, netG], [optimizerD, optimizerG], opt_level=opt.opt_level, num_losses=2)

    for epoch in range(2):
        netD.zero_grad()
        real = torch.randn(8, 3, 4, 4).cuda()
        label = torch.full((8, 1), 1.0).cuda()
        output = netD(real)
        errD = criterion(output, label)
        with amp.scale_loss(errD, optimizerD, loss_id=0) as errD_scaled:
            errD_scaled.backward()
        optimizerD.step()

        netG.zero_grad()
        fake = netG(torch.randn(8, 100, 1, 1).cuda())
        errG = criterion(netD(fake), label)
        with amp.scale_loss(errG, optimizerG, loss_id=1) as errG_scaled:
            errG_scaled.backward()
        optimizerG.step()
    """
)

# PyTorch-GAN's ClusterGAN in miniature: one optimizer over the generator and the encoder through
# `itertools.chain` (imported under another name, bound to a name read once), the discriminator's
# own, and `Tensor(...)`, a name for torch's tensor classes, called with sizes.
CLUSTER_GAN = textwrap.dedent(
    """
    from itertools import chain as ichain

    import torch
    import torch.nn as nn

    cuda = torch.cuda.is_available()
    Tensor = torch.cuda.FloatTensor if cuda else torch.FloatTensor
    generator, encoder = nn.Linear(4, 8).cuda(), nn.Linear(8, 4).cuda()
    discriminator = nn.Linear(8, 1).cuda()

    ge_chain = ichain(generator.parameters(), encoder.parameters())
    optimizer_GE = torch.optim.Adam(ge_chain, lr=1e-4, weight_decay=2.5e-5)
    optimizer_D = torch.optim.Adam(discriminator.parameters(), lr=1e-4)

    for step in range(4):
        generator.zero_grad()
        encoder.zero_grad()
        discriminator.zero_grad()
        z = torch.randn(8, 4).cuda()
        fake = generator(z)
        valid = Tensor(fake.size(0), 1).fill_(1.0)
        ((discriminator(fake) - valid).pow(2).mean() + (encoder(fake) - z).pow(2).mean()).backward()
        optimizer_GE.step()
        optimizer_D.zero_grad()
        discriminator(fake.detach()).mean().backward()
        optimizer_D.step()
    """
)

# A second optimizer over the same model, of a class npu-migrate does not fuse: the SGD beside it
# is not fused (two optimizers over one model), however Adagrad is spelled, and the zeros of
# `set_to_none=False` would reach it too, so no fix is offered.
BESIDE_ADAGRAD = textwrap.dedent(
    """
    import torch
    {imports}

    def train(model, batches, loss_fn):
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        extra = {adagrad}(model.parameters(), lr=0.1)
        for x, y in batches:
            model.zero_grad()
            loss_fn(model(x), y).backward()
            optimizer.step()
            extra.step()
    """
)
ADAGRAD_SPELLINGS = {  # imports, callee, why the SGD is not fused
    "attribute": (
        "",
        "torch.optim.Adagrad",
        "`torch.optim.Adagrad(...)` (line 7) also holds parameters of `model`",
    ),
    "from-import": (
        "from torch.optim import Adagrad",
        "Adagrad",
        "`Adagrad(...)` (line 7) also holds parameters of `model`",
    ),
}


def both_modes(source: str) -> tuple[FileResult, FileResult]:
    rules = all_rules()
    settings = Settings()
    fast = Engine(rules, settings).migrate(source.encode(), "train.py")
    slow = Engine(rules, settings, fast=False).migrate(source.encode(), "train.py")
    return fast, slow


def shown(result: FileResult) -> list[tuple[int, int, str, str, str]]:
    return [(d.line, d.column, d.code, d.severity.value, d.message) for d in result.diagnostics]


def test_dcgan_module_zero_grad_fixed_in_both_modes() -> None:
    fast, slow = both_modes(DCGAN)
    assert shown(slow) == shown(fast)
    assert slow.migrated == fast.migrated
    assert fast.status is Status.CHANGED
    migrated = fast.migrated.decode()
    assert migrated.count("NpuFusedAdam(") == 2
    assert "netD.zero_grad(set_to_none=False)" in migrated
    assert "netG.zero_grad(set_to_none=False)" in migrated
    assert "combine_grad=True" in migrated


def test_chained_models_fixed_in_both_modes() -> None:
    fast, slow = both_modes(CLUSTER_GAN)
    assert shown(slow) == shown(fast)
    assert slow.migrated == fast.migrated
    migrated = fast.migrated.decode()
    assert migrated.count("torch_npu.optim.NpuFusedAdam(") == 2
    for model in ("generator", "encoder", "discriminator"):
        assert f"{model}.zero_grad(set_to_none=False)" in migrated


@pytest.mark.parametrize("spelling", ADAGRAD_SPELLINGS)
def test_unknown_optimizer_beside_refuses_in_both_modes(spelling: str) -> None:
    imports, adagrad, why = ADAGRAD_SPELLINGS[spelling]
    fast, slow = both_modes(BESIDE_ADAGRAD.format(imports=imports, adagrad=adagrad))
    assert shown(slow) == shown(fast)
    assert slow.migrated == fast.migrated
    assert "set_to_none" not in fast.migrated.decode()
    assert "NpuFusedSGD" not in fast.migrated.decode()
    refusals = [d for d in fast.diagnostics if d.code == "NPU101" and d.line == 6]
    assert len(refusals) == 1
    assert refusals[0].severity.value == "manual"
    # Adagrad is an optimizer of torch's too: a second one over the model, so no fix is offered,
    # not even an unsafe one (fusing the SGD beside it would break the one-optimizer contract).
    assert why in refusals[0].message
    assert "--unsafe-fixes" not in refusals[0].message


# A class picked at run time builds an optimizer NPU101 maps or reports, but which class it is,
# and so whether it is fused, is known only at run time: no owner of the model's parameters that
# the fix could rely on, in either mode.
PICKED_AT_RUN_TIME = {
    "from-a-dict": (
        'picked = {"adamw": torch.optim.AdamW, "sgd": torch.optim.SGD}[args.optimizer]',
        "picked",
    ),
    "by-getattr": ("pass", "getattr(torch.optim, args.optimizer)"),
}
PICKED = textwrap.dedent(
    """
    import torch


    def train(model, args, batches):
        {pick}
        optimizer = {callee}(model.parameters(), lr=args.lr)
        for x, y in batches:
            model.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
    """
)


@pytest.mark.parametrize("picked", PICKED_AT_RUN_TIME)
def test_class_picked_at_run_time_refuses_in_both_modes(picked: str) -> None:
    pick, callee = PICKED_AT_RUN_TIME[picked]
    fast, slow = both_modes(PICKED.format(pick=pick, callee=callee))
    assert shown(slow) == shown(fast)
    assert slow.migrated == fast.migrated
    assert "set_to_none" not in fast.migrated.decode()
    refusals = [d for d in fast.diagnostics if d.code == "NPU101" and d.line == 7]
    assert [d.severity.value for d in refusals] == ["manual"]
    assert "unsafe because `model.zero_grad()` (line 9)" in refusals[0].message
