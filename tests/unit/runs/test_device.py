"""runs/device.py: device names and the bf16 precision switch."""

import pytest
import torch

from common.errors import UserError
from runs.device import DeviceError, resolve_device, use_bf16


def test_precision_names_and_auto():
    cpu = torch.device("cpu")
    assert use_bf16("bf16", cpu) and not use_bf16("fp32", cpu)
    assert not use_bf16("auto", cpu)  # float32 on a CPU unless asked
    with pytest.raises(UserError, match="precision=fp16: pass auto, bf16 or fp32"):
        use_bf16("fp16", cpu)


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
