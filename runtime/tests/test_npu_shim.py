"""The torch_npu stand-in of apex.testing, exercised in fresh interpreters with real torch.

Every check runs in a subprocess: the shim patches torch process-wide (device name, Tensor
methods, a distributed backend), which must not leak into the other tests.
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from apex.testing import npu_shim_env, npu_shim_path


def run_python(code: str, env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def run_json(code: str, env: dict[str, str] | None = None) -> dict:
    """Run ``code`` under the shim; it prints one JSON object as its last line."""
    result = run_python(code, env if env is not None else npu_shim_env())
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_the_module_prints_the_directory_that_holds_the_shim() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "apex.testing.npu_shim"], capture_output=True, text=True, check=True
    )
    printed = Path(result.stdout.strip())
    assert printed == Path(npu_shim_path())
    assert (printed / "torch_npu" / "__init__.py").is_file()


@pytest.mark.skipif(
    importlib.util.find_spec("torch_npu") is not None, reason="a torch_npu is installed here"
)
def test_installing_the_runtime_does_not_make_torch_npu_importable() -> None:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    result = run_python("import torch_npu", env)
    assert result.returncode != 0
    assert "No module named 'torch_npu'" in result.stderr


def test_torch_npu_api_behaves_like_torch_cuda_without_the_device() -> None:
    facts = run_json(
        """
        import json, warnings
        import torch
        import torch_npu
        import torch_npu.npu as npu_module
        from torch_npu.npu.amp import GradScaler as GS, autocast

        facts = {}
        facts["shim"] = torch_npu.IS_NPU_MIGRATE_SHIM
        facts["torch.npu is the shim"] = torch.npu is npu_module
        facts["available"] = torch.npu.is_available()
        facts["count"] = torch.npu.device_count()
        torch.npu.set_device(0)
        torch.npu.synchronize()
        torch.npu.empty_cache()
        facts["allocated"] = torch.npu.max_memory_allocated()
        torch.npu.reset_peak_memory_stats()
        facts["capability"] = torch.npu.get_device_capability()

        # seeding the npu (directly, or through torch.manual_seed) must not touch the CPU RNG
        torch.manual_seed(0)
        expected = torch.rand(3).tolist()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            torch.manual_seed(0)
            torch.npu.manual_seed_all(123)
            torch.npu.manual_seed(7)
        facts["rng untouched"] = torch.rand(3).tolist() == expected

        model = torch.nn.Linear(3, 2).npu()
        x = torch.ones(4, 3).npu(0, non_blocking=True)
        facts["param device"] = next(model.parameters()).device.type
        facts["tensor device"] = x.device.type
        facts["is_npu"] = x.is_npu

        with torch.npu.amp.autocast():
            facts["autocast dtype"] = str(model(x).dtype)
        with autocast(dtype=torch.bfloat16):
            facts["imported autocast dtype"] = str(model(x).dtype)
        with torch.autocast("npu"):
            facts["torch.autocast('npu') dtype"] = str(model(x).dtype)
        scaler = GS()
        loss = model(x).sum()
        facts["scaler enabled"] = scaler.is_enabled()
        facts["scaled loss is loss"] = scaler.scale(loss) is loss

        stream = torch.npu.Stream()
        with torch.npu.stream(stream):
            start = torch.npu.Event(enable_timing=True)
            end = torch.npu.Event(enable_timing=True)
            start.record()
            end.record()
        torch.npu.current_stream().wait_stream(stream)
        facts["elapsed ms >= 0"] = start.elapsed_time(end) >= 0

        facts["device parses"] = str(torch.device("npu", 1))
        try:
            torch.ones(1, device="npu")
            facts["allocation"] = "worked"
        except (NotImplementedError, RuntimeError):
            facts["allocation"] = "fails"

        facts["torch.accelerator available"] = torch.accelerator.is_available()
        import apex._device
        facts["runtime device"] = apex._device.device_kind()
        print(json.dumps(facts))
        """
    )
    assert facts == {
        "shim": True,
        "torch.npu is the shim": True,
        "available": False,
        "count": 0,
        "allocated": 0,
        "capability": None,
        "rng untouched": True,
        "param device": "cpu",
        "tensor device": "cpu",
        "is_npu": False,
        "autocast dtype": "torch.float32",
        "imported autocast dtype": "torch.float32",
        "torch.autocast('npu') dtype": "torch.float32",
        "scaler enabled": False,
        "scaled loss is loss": True,
        "elapsed ms >= 0": True,
        "device parses": "npu:1",
        "allocation": "fails",
        "torch.accelerator available": False,
        "runtime device": "cpu",
    }


def test_optim_and_profiler_submodules() -> None:
    facts = run_json(
        """
        import json
        import torch
        import torch_npu
        from apex.optimizers import standalone

        def train(make):
            torch.manual_seed(0)
            model = torch.nn.Linear(4, 1).npu()
            optimizer = make(model.parameters())
            for _ in range(5):
                optimizer.zero_grad()
                model(torch.ones(2, 4)).pow(2).sum().backward()
                optimizer.step()
            return [p.detach().tolist() for p in model.parameters()]

        fused = train(lambda p: torch_npu.optim.NpuFusedSGD(p, lr=0.1, momentum=0.9))
        plain = train(lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9))

        activity = torch_npu.profiler.ProfilerActivity
        with torch_npu.profiler.profile(activities=[activity.CPU, activity.NPU]) as prof:
            torch.ones(8, 8).matmul(torch.ones(8, 8))
        names = {event.name for event in prof.events()}
        print(json.dumps({
            "same class": torch_npu.optim.NpuFusedAdamW is standalone.NpuFusedAdamW,
            "same result": fused == plain,
            "matmul recorded": any("matmul" in name for name in names),
        }))
        """
    )
    assert facts == {"same class": True, "same result": True, "matmul recorded": True}


def test_shim_warns_when_it_hides_a_real_torch_npu(tmp_path: Path) -> None:
    real = tmp_path / "torch_npu"
    real.mkdir()
    (real / "__init__.py").write_text("raise ImportError('the real one needs an NPU')\n")
    env = npu_shim_env()
    env["PYTHONPATH"] += os.pathsep + str(tmp_path)
    result = run_python("import torch_npu", env)
    assert result.returncode == 0, result.stderr
    assert "hiding the real torch_npu" in result.stderr


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_hccl_backend_runs_gloo_across_two_processes() -> None:
    code = """
        import json, os
        import torch
        import torch_npu
        import torch.distributed as dist

        dist.init_process_group("hccl", init_method="env://")
        value = torch.tensor([float(dist.get_rank() + 1)]).npu()
        dist.all_reduce(value)
        dist.barrier()  # looks up torch's accelerator: the renamed backend must answer
        print(json.dumps({
            "backend": dist.get_backend(),
            "sum": value.item(),
            "hccl available": dist.is_hccl_available(),
        }))
        dist.destroy_process_group()
    """
    port = str(free_port())
    workers = []
    for rank in range(2):
        env = npu_shim_env()
        env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port, RANK=str(rank), WORLD_SIZE="2")
        workers.append(
            subprocess.Popen(
                [sys.executable, "-c", textwrap.dedent(code)],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    outputs = [worker.communicate(timeout=120) for worker in workers]
    for worker, (_, stderr) in zip(workers, outputs, strict=True):
        assert worker.returncode == 0, stderr
    results = [json.loads(stdout.strip().splitlines()[-1]) for stdout, _ in outputs]
    assert results == [{"backend": "hccl", "sum": 3.0, "hccl available": True}] * 2


def test_the_hf32_switches_have_torch_npu_s_defaults_and_hold_what_is_set() -> None:
    """`torch.npu.matmul.allow_hf32` (off unless set) and `torch.npu.conv.allow_hf32` (on unless
    set): what NPU309 writes in place of the TF32 switches."""
    found = run_json(
        """
        import json
        import torch
        import torch_npu
        before = [torch.npu.matmul.allow_hf32, torch.npu.conv.allow_hf32]
        torch.npu.matmul.allow_hf32 = True
        torch.npu.conv.allow_hf32 = False
        after = [torch_npu.npu.matmul.allow_hf32, torch_npu.npu.conv.allow_hf32]
        print(json.dumps({"before": before, "after": after}))
        """
    )
    assert found == {"before": [False, True], "after": [True, False]}


def test_apex_amp_steps_under_the_shim_as_on_an_npu_with_inf_nan() -> None:
    """With an NPU reported available (as `npu-migrate verify --emulate-accelerator` does) the
    runtime takes its NPU path, which asks `torch_npu.npu.utils` whether the chip saturates;
    the stand-in answers as a chip with inf/NaN does, so amp finds the overflow in the
    gradients and skips that step, as on CPU."""
    found = run_json(
        """
        import json
        import torch
        import torch_npu
        from apex import amp
        from apex._device import device_kind
        from torch_npu.npu import utils

        torch.npu.is_available = lambda: True
        model = torch.nn.Linear(2, 1).npu()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        model, optimizer = amp.initialize(model, optimizer, opt_level="O1", verbosity=0)
        before = model.weight.detach().clone()
        loss = model(torch.full((1, 2), float("inf")).npu()).sum()
        with amp.scale_loss(loss, optimizer) as scaled:
            scaled.backward()
        optimizer.step()
        print(json.dumps({
            "kind": device_kind(),
            "inf/nan": utils.is_support_inf_nan(),
            "flag": utils.get_npu_overflow_flag(),
            "skipped": bool(torch.equal(before, model.weight.detach())),
        }))
        """
    )
    assert found == {"kind": "npu", "inf/nan": True, "flag": False, "skipped": True}
