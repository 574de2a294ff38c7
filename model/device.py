"""Where to run and in which precision: the device name, and whether to use bf16 autocast."""

import torch

from data.errors import UserError


def resolve_device(name: str, local_rank: int = 0) -> torch.device:
    """cuda:<local rank> if asked for or available (auto), else the named device."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(f"cuda:{local_rank}") if name == "cuda" else torch.device(name)


def use_bf16(precision: str, device: torch.device) -> bool:
    """bf16 autocast for precision bf16, or auto on a bf16 GPU; float32 otherwise (CPU: fp32).

    On a CPU, bf16 is opt-in: results then differ from float32 within seed noise (README).
    """
    if precision not in ("auto", "bf16", "fp32"):
        raise UserError(f"precision={precision}: pass auto, bf16 or fp32")
    if precision == "auto":
        return device.type == "cuda" and torch.cuda.is_bf16_supported()
    return precision == "bf16"
