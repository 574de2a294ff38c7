"""The training state: model, optimizer, schedule, sampler, fp16's scaler, RNG and the counters.

``TrainingState`` lists every field a resumed run needs once: ``state_dict()`` saves them,
``load_state_dict()`` restores them, so a checkpoint and a resume cannot drift apart.
"""

import math
from dataclasses import dataclass

import torch
import torch.distributed as dist

from data.batching import TokenBatchSampler


def rng_state(device: torch.device, world: int = 1) -> dict:
    """{"torch": [CPU state per rank], "cuda": [CUDA state per rank] or None, "device"}.

    §5.4 applies dropout on every GPU: rank r is seeded with seed + r (training/launch.py), so
    each rank draws its own masks, and a resumed run must continue every rank's stream. Under
    DDP (world > 1) this gathers all ranks' states: every rank calls it.
    """
    cuda = torch.cuda.get_rng_state(device) if device.type == "cuda" else None
    states = [{"torch": torch.get_rng_state(), "cuda": cuda}]
    if world > 1:
        states = [None] * world
        dist.all_gather_object(states, {"torch": torch.get_rng_state(), "cuda": cuda})
    return {
        "torch": [s["torch"] for s in states],
        "cuda": [s["cuda"] for s in states] if cuda is not None else None,
        "device": str(device),
    }


def set_rng_state(state: dict, device: torch.device, rank: int = 0) -> None:
    """Restore rank's states of rng_state(); the CUDA state only onto a CUDA device.

    An older checkpoint holds one CPU state (a tensor, not a list): rank 0's. A rank that the
    checkpoint holds no state for (a run resumed on more ranks) keeps its seed's stream.
    """
    cpu, cuda = state["torch"], state.get("cuda")
    cpu = [cpu] if isinstance(cpu, torch.Tensor) else cpu
    cuda = [cuda] if isinstance(cuda, torch.Tensor) else cuda
    if rank < len(cpu):
        torch.set_rng_state(cpu[rank])
    if cuda is not None and device.type == "cuda" and rank < len(cuda):
        torch.cuda.set_rng_state(cuda[rank], device)


@dataclass
class TrainingState:
    """Everything a run resumes from: its parts' state_dicts, the RNG and the counters."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    schedule: torch.optim.lr_scheduler.LRScheduler
    sampler: TokenBatchSampler
    device: torch.device
    rank: int = 0
    world: int = 1
    step: int = 0
    best_ppl: float = math.inf
    tokens_seen: int = 0
    scaler: torch.amp.GradScaler | None = None  # fp16's loss scale (None: bf16, fp32)

    PARTS = ("model", "optimizer", "schedule", "sampler")
    COUNTERS = ("step", "best_ppl", "tokens_seen")

    def parts(self) -> tuple[str, ...]:
        """The parts whose state_dicts a checkpoint holds: PARTS, and the scaler under fp16."""
        return self.PARTS + (("scaler",) if self.scaler is not None else ())

    def state_dict(self, all_ranks: bool = True) -> dict:
        """Tensors and plain values only, so the checkpoint loads with weights_only=True.

        all_ranks: every rank's RNG, gathered (under DDP every rank calls it); False: this
        rank's alone (best.pt, which rank 0 writes by itself and no run resumes from).
        """
        state = {name: getattr(self, name).state_dict() for name in self.parts()}
        state |= {name: getattr(self, name) for name in self.COUNTERS}
        return state | {"rng": rng_state(self.device, self.world if all_ranks else 1)}

    def load_state_dict(self, state: dict) -> None:
        """Restore what state_dict() saved (the model's weights included)."""
        for name in self.parts():  # a resume keeps the precision (runs/resume.py): the scaler too
            getattr(self, name).load_state_dict(state[name])
        for name in self.COUNTERS:
            setattr(self, name, state[name])
        set_rng_state(state["rng"], self.device, self.rank)
