"""Random state per DDP rank: seeds that differ by rank, and every rank's RNG in checkpoints.

The paper (§5.4) applies dropout on every GPU; each rank must draw its own masks, so rank r
seeds torch with seed + r (rank 0 of a DDP run draws what a one-process run draws; DDP copies
rank 0's initial weights to the others, so their different initialisations never matter).
Checkpoints keep every rank's CPU RNG state and, on a GPU, its CUDA RNG state, so a resumed run
continues each rank's stream where it stopped.
"""

import torch
import torch.distributed as dist


def seed_rank(seed: int, rank: int) -> None:
    """Seed torch's CPU and CUDA generators with seed + rank (reproducible, distinct per rank)."""
    torch.manual_seed(seed + rank)


def rng_states(device: torch.device, world: int) -> dict:
    """{"torch": [CPU state per rank], "cuda": [CUDA state per rank] or None}; DDP: collective."""
    cuda = torch.cuda.get_rng_state(device) if device.type == "cuda" else None
    local = {"torch": torch.get_rng_state(), "cuda": cuda}
    states = [local]
    if world > 1:
        states = [None] * world
        dist.all_gather_object(states, local)
    return {
        "torch": [s["torch"] for s in states],
        "cuda": [s["cuda"] for s in states] if cuda is not None else None,
    }


def restore_rng_states(rng: dict, rank: int, device: torch.device, warn=print) -> None:
    """Restore this rank's states from rng_states(); CUDA's only on a CUDA device.

    A checkpoint of an older layout holds one CPU state ({"torch": tensor}): rank 0 takes it.
    A rank the checkpoint has no state for (a run resumed on more ranks) keeps its seed's.
    """
    cpu = rng["torch"] if isinstance(rng["torch"], list) else [rng["torch"]]
    if rank < len(cpu):
        torch.set_rng_state(cpu[rank])
    else:
        warn(f"the checkpoint holds RNG states for {len(cpu)} ranks: rank {rank} keeps its seed")
    cuda = rng.get("cuda")
    if device.type == "cuda" and cuda is not None and rank < len(cuda):
        torch.cuda.set_rng_state(cuda[rank], device)
    elif device.type == "cuda" and rank == 0:
        warn("the checkpoint holds no CUDA RNG state (trained on a CPU): CUDA keeps its seed")
