"""Where to run and in which precision (device name; bf16/fp16 autocast), and on what machine."""

import platform
from pathlib import Path

import torch

from common.errors import UserError


class DeviceError(UserError):
    """A device that does not exist or is not available here."""


def resolve_device(name: str, local_rank: int = 0, key: str = "device") -> torch.device:
    """cuda:<local rank> if asked for or available (auto), else the named device.

    key names the setting in errors (trainer.device for training). A name torch does not know,
    or a CUDA device on a machine without one, is a DeviceError.
    """
    name = str(name)
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(f"cuda:{local_rank}") if name == "cuda" else torch.device(name)
    except RuntimeError:
        raise DeviceError(
            f"{key}={name}: not a device name; pass auto, cpu, cuda or cuda:N"
        ) from None
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if (device.index or 0) >= count:
            raise DeviceError(
                f"{key}={name}: this machine has {count} usable CUDA device(s) (torch "
                f"{torch.__version__}, CUDA build {torch.version.cuda}); pass {key}=cpu or auto"
            )
    return device


# The autocast dtype of each resolved precision; fp32 runs without autocast.
AUTOCAST_DTYPES = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


def resolve_precision(precision: str, device: torch.device, key: str = "precision") -> str:
    """What precision (auto, bf16, fp16 or fp32) resolves to on device: "bf16", "fp16" or "fp32".

    auto: bf16 on a GPU that has it, fp16 (with a gradient scaler in training) on one that has
    not, float32 on a CPU: there bf16 and fp16 are opt-in, and then differ from float32 within
    seed noise (README). key names the setting in the error (trainer.precision for training).
    """
    if precision not in ("auto", *AUTOCAST_DTYPES):
        raise UserError(f"{key}={precision}: pass auto, bf16, fp16 or fp32")
    if precision != "auto":
        return precision
    if device.type != "cuda":
        return "fp32"
    return "bf16" if torch.cuda.is_bf16_supported() else "fp16"


def autocast(device: torch.device, precision: str):
    """torch.autocast to a resolved precision's dtype on device ("fp32": autocast off)."""
    dtype = AUTOCAST_DTYPES[precision]
    return torch.autocast(device.type, dtype=dtype, enabled=dtype is not None)


def use_cuda_device(device: torch.device) -> None:
    """Make a CUDA device current, with TF32 matmuls and convolutions; nothing on other devices.

    It lives here, importable, so the SLURM launcher's cloudpickle refers to it by name: code in
    train.py run as __main__ is pickled by value, and torch.backends.cudnn cannot be pickled.
    """
    if device.type == "cuda":
        torch.cuda.set_device(device)
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True


def cpu_flags() -> list[str]:
    """The CPU flags that decide bf16 speed (avx2, avx512f, avx512_bf16, amx_*) from cpuinfo."""
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text()
    except OSError:
        return []
    lines = [line for line in cpuinfo.splitlines() if line.startswith("flags")]
    words = set(lines[0].split(":", 1)[1].split()) if lines else set()
    wanted = ("avx2", "avx512f", "avx512_bf16")
    return sorted(w for w in words if w in wanted or w.startswith("amx"))


def hardware_name(device) -> str:
    """The GPU's name, or the CPU's model name from /proc/cpuinfo (else the architecture)."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.machine()
    names = [line.split(":", 1)[1].strip() for line in cpuinfo.splitlines() if "model name" in line]
    return names[0] if names else platform.machine()


def machine_description(device) -> str:
    """What trained or measured: hardware name, a CPU's bf16-relevant flags, torch version.

    Float32 kernels differ between CPU generations (AVX2 vs AVX-512), so runs of one seed on
    two machines agree only up to rounding, and their trajectories drift apart from there.
    """
    flags = cpu_flags() if device.type == "cpu" else []
    extra = f" ({', '.join(flags)})" if flags else ""
    return f"{hardware_name(device)}{extra}, torch {torch.__version__}"
