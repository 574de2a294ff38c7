"""runs/device.py: device names and the precision switch (bf16, fp16, fp32, auto)."""

import pytest
import torch

from common.errors import UserError
from runs.device import DeviceError, autocast, resolve_device, resolve_precision


def test_precision_names_and_auto():
    cpu = torch.device("cpu")
    assert [resolve_precision(p, cpu) for p in ("bf16", "fp16", "fp32")] == ["bf16", "fp16", "fp32"]
    assert resolve_precision("auto", cpu) == "fp32"  # float32 on a CPU unless asked
    with pytest.raises(UserError, match="precision=fp8: pass auto, bf16, fp16 or fp32"):
        resolve_precision("fp8", cpu)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_auto_on_a_gpu_is_bf16_where_it_has_it_else_fp16():
    expected = "bf16" if torch.cuda.is_bf16_supported() else "fp16"
    assert resolve_precision("auto", torch.device("cuda")) == expected


def test_autocast_follows_the_resolved_precision():
    cpu = torch.device("cpu")
    for precision, dtype in (("bf16", torch.bfloat16), ("fp16", torch.float16)):
        with autocast(cpu, precision):
            assert torch.get_autocast_dtype("cpu") == dtype and torch.is_autocast_enabled("cpu")
            assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == dtype
    with autocast(cpu, "fp32"):
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.float32


def test_device_names():
    assert resolve_device("cpu") == torch.device("cpu")
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert resolve_device("auto").type == expected


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_takes_the_local_rank():
    assert resolve_device("cuda", local_rank=0) == torch.device("cuda:0")


def test_unknown_or_unavailable_devices_are_one_line_naming_the_key():
    with pytest.raises(DeviceError, match=r"^trainer.device=foo: not a device name; pass auto"):
        resolve_device("foo", key="trainer.device")
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    with pytest.raises(DeviceError, match=rf"device=cuda:{count}: this machine has {count} usable"):
        resolve_device(f"cuda:{count}")
