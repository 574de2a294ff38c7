"""The training state (model, optimizer, schedule, sampler, RNG, counters) and one update (§5.3).

``TrainingState`` lists every field a resumed run needs once: ``state_dict()`` saves them,
``load_state_dict()`` restores them, so a checkpoint and a resume cannot drift apart.
``train_step`` is the update train.py runs and the training benchmark times.
"""

import math
from contextlib import nullcontext
from dataclasses import dataclass

import torch
import torch.distributed as dist

from data.batching import TokenBatchSampler
from data.errors import UserError
from data.tokenizer import PAD_ID
from model.loss import forward_backward
from model.optim import clip_gradients


def rng_state(device: torch.device, world: int = 1) -> dict:
    """{"torch": [CPU state per rank], "cuda": [CUDA state per rank] or None, "device"}.

    §5.4 applies dropout on every GPU: rank r is seeded with seed + r (train.py), so each rank
    draws its own masks, and a resumed run must continue every rank's stream. Under DDP
    (world > 1) this gathers all ranks' states: every rank calls it.
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

    PARTS = ("model", "optimizer", "schedule", "sampler")
    COUNTERS = ("step", "best_ppl", "tokens_seen")

    def state_dict(self, all_ranks: bool = True) -> dict:
        """Tensors and plain values only, so the checkpoint loads with weights_only=True.

        all_ranks: every rank's RNG, gathered (under DDP every rank calls it); False: this
        rank's alone (best.pt, which rank 0 writes by itself and no run resumes from).
        """
        state = {name: getattr(self, name).state_dict() for name in self.PARTS}
        state |= {name: getattr(self, name) for name in self.COUNTERS}
        return state | {"rng": rng_state(self.device, self.world if all_ranks else 1)}

    def load_state_dict(self, state: dict) -> None:
        """Restore what state_dict() saved (the model's weights included)."""
        for name in self.PARTS:
            getattr(self, name).load_state_dict(state[name])
        for name in self.COUNTERS:
            setattr(self, name, state[name])
        set_rng_state(state["rng"], self.device, self.rank)


def accumulate_gradients(model, micro: list[dict], smoothing: float, device, bf16: bool, world):
    """Gradients of the mean label-smoothed loss per target token over micro-batches (and ranks).

    Returns the summed loss and NLL (this rank's, times the world size) and the target-token
    count over every rank, read from the device once, after the last backward pass.
    """
    n_tokens = torch.tensor(
        float(sum(int((b["tgt_out"] != PAD_ID).sum()) for b in micro)), device=device
    )
    if world > 1:
        dist.all_reduce(n_tokens)
    model.train()
    sums = torch.zeros(2, device=device)  # [loss, nll]
    for i, batch in enumerate(micro):
        batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
        sync = nullcontext() if world == 1 or i == len(micro) - 1 else model.no_sync()
        with sync:
            loss, nll = forward_backward(model, batch, smoothing, world / n_tokens, bf16)
        sums += torch.stack((loss, nll))
    loss_sum, nll_sum, tokens = torch.cat((sums * world, n_tokens[None])).tolist()
    return loss_sum, nll_sum, int(tokens)


@dataclass
class StepResult:
    """What one update reports: summed loss and NLL, target tokens, gradient norm."""

    loss_sum: float
    nll_sum: float
    tokens: int
    grad_norm: float


def train_step(
    model,
    optimizer: torch.optim.Optimizer,
    schedule: torch.optim.lr_scheduler.LRScheduler,
    micro: list[dict],
    smoothing: float,
    clip_norm: float | None,
    bf16: bool,
    world: int = 1,
) -> StepResult | None:
    """One update: gradients over the micro-batches, clipping, an Adam step and a schedule step.

    model may be wrapped (DDP, torch.compile). A non-finite loss or gradient norm skips the
    update (gradients dropped, optimizer and schedule untouched) and returns None.
    clip_norm None: no clipping (the paper names none); the norm is still measured.
    """
    device = next(model.parameters()).device
    loss_sum, nll_sum, tokens = accumulate_gradients(model, micro, smoothing, device, bf16, world)
    grad_norm = clip_gradients(model.parameters(), clip_norm)
    if not math.isfinite(loss_sum) or not torch.isfinite(grad_norm):
        optimizer.zero_grad(set_to_none=True)
        return None
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    schedule.step()
    return StepResult(loss_sum, nll_sum, tokens, float(grad_norm))


class DivergenceError(UserError, FloatingPointError):
    """Too many non-finite updates in a row: the run diverged (a setting to change)."""
