"""model/device.py: device names and the bf16 precision switch."""

import pytest
import torch

from data.errors import UserError
from model.device import resolve_device, use_bf16


def test_precision_names_and_auto():
    cpu = torch.device("cpu")
    assert use_bf16("bf16", cpu) and not use_bf16("fp32", cpu)
    assert not use_bf16("auto", cpu)  # float32 on a CPU unless asked
    with pytest.raises(UserError, match="precision=fp16: pass auto, bf16 or fp32"):
        use_bf16("fp16", cpu)


def test_device_names():
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("cuda", local_rank=3) == torch.device("cuda:3")
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert resolve_device("auto").type == expected
