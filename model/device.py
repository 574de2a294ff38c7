"""Where to run and in which precision: the device name, and whether to use bf16 autocast."""

import torch

from data.errors import UserError


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


def use_bf16(precision: str, device: torch.device) -> bool:
    """bf16 autocast for precision bf16, or auto on a bf16 GPU; float32 otherwise (CPU: fp32).

    On a CPU, bf16 is opt-in: results then differ from float32 within seed noise (README).
    """
    if precision not in ("auto", "bf16", "fp32"):
        raise UserError(f"precision={precision}: pass auto, bf16 or fp32")
    if precision == "auto":
        return device.type == "cuda" and torch.cuda.is_bf16_supported()
    return precision == "bf16"


def use_cuda_device(device: torch.device) -> None:
    """Make a CUDA device current, with TF32 matmuls and convolutions; nothing on other devices.

    It lives here, importable, so the SLURM launcher's cloudpickle refers to it by name: code in
    train.py run as __main__ is pickled by value, and torch.backends.cudnn cannot be pickled.
    """
    if device.type == "cuda":
        torch.cuda.set_device(device)
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
