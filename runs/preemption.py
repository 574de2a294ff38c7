"""Preemption: SIGTERM, SIGINT or SIGUSR2 end training after the step in progress, with a save.

SLURM sends SIGTERM when it preempts a job or at its time limit, and (the submitit launcher asks
for it) SIGUSR2 `signal_delay_s` before the limit; Ctrl-C is SIGINT. While `StopSignals` is
entered, the first of them only sets a flag: the training loop asks `stop_signal()` between
steps, writes a checkpoint and raises `TrainingInterrupted` (the run is not complete, so no
metrics.json). A second SIGINT exits at once (the OS default action, even inside a long step).
`hand_over()` then gives the signal to the handler installed before, if it was a Python one:
under submitit that handler requeues the job (USR2) or ignores the signal (TERM).
"""

import os
import signal
import threading

import torch
import torch.distributed as dist

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR2)


class TrainingInterrupted(Exception):
    """Training stopped on a signal after writing a checkpoint; rerunning the command resumes."""

    def __init__(self, signum: int, step: int, checkpoint, resume: str) -> None:
        self.signum, self.step, self.checkpoint = signum, step, checkpoint
        self.exit_code = 128 + signum  # the shell's convention for "ended by signal signum"
        # segments.json's outcome of the segment it ends
        self.outcome = f"interrupted by {signal.Signals(signum).name}; checkpoint {checkpoint}"
        super().__init__(
            f"interrupted by {signal.Signals(signum).name} after step {step}: checkpoint "
            f"{checkpoint}; the run is not complete (no metrics.json); resume: {resume}"
        )


class StopSignals:
    """A context that turns the first stop signal into a flag the loop reads between steps."""

    def __init__(self, signals=STOP_SIGNALS) -> None:
        self.signals = tuple(signals)
        self.received: int | None = None
        self._frame = None
        self._previous: dict[int, object] = {}

    def __enter__(self) -> "StopSignals":
        # signal.signal works in the main thread only; elsewhere (a caller's thread) do nothing.
        if threading.current_thread() is threading.main_thread():
            for signum in self.signals:
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous = {}

    def _handle(self, signum: int, frame) -> None:
        if self.received is not None:
            return  # a repeated TERM/USR2 changes nothing; a second SIGINT never gets here
        self.received, self._frame = signum, frame
        if signum == signal.SIGINT:
            signal.signal(signal.SIGINT, signal.SIG_DFL)  # the next Ctrl-C ends the process
        again = "; Ctrl-C again exits at once" if signum == signal.SIGINT else ""
        message = f"{signal.Signals(signum).name}: stopping after this step with a checkpoint"
        os.write(2, f"\n{message}{again}\n".encode())  # no logging lock inside a handler

    def stop_signal(self, world: int = 1, device=None) -> int:
        """The signal received by this rank or, under DDP, by any rank (0 = none): all agree."""
        if world == 1:
            return self.received or 0
        flag = torch.tensor([self.received or 0], device=device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return int(flag.item())

    def hand_over(self, signum: int) -> None:
        """Call the handler that was installed for signum before us, if it is a Python one."""
        previous = self._previous.get(signum)
        if callable(previous) and previous is not signal.default_int_handler:
            previous(signum, self._frame)  # submitit: requeue the job and exit (SIGUSR2)
