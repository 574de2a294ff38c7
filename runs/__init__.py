"""Run management: run directory and its lock, checkpoints, resume checks, preemption, device."""
