"""Where to run and in which precision: the device name, and whether to use bf16 autocast."""

import re
from pathlib import Path

import torch


def resolve_device(name: str, local_rank: int = 0) -> torch.device:
    """cuda:<local rank> if asked for or available (auto), else the named device."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(f"cuda:{local_rank}") if name == "cuda" else torch.device(name)


def native_bf16(device: torch.device) -> bool:
    """Whether the device multiplies bf16 natively: a bf16 GPU, or a CPU with AVX512-BF16/AMX."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return re.search(r"\b(avx512_bf16|amx_bf16)\b", cpuinfo) is not None


def use_bf16(precision: str, device: torch.device) -> bool:
    """bf16 autocast for precision bf16, or auto on a native-bf16 device; fp32 otherwise."""
    if precision not in ("auto", "bf16", "fp32"):
        raise ValueError(f"precision={precision}: pass auto, bf16 or fp32")
    return precision == "bf16" or (precision == "auto" and native_bf16(device))
