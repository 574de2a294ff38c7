"""Memory probes for the benchmarks: peak resident memory, and what one training step holds."""

from __future__ import annotations

import resource
import sys
import threading

import torch


class PeakMemory:
    """Peak resident memory (MiB): sampled over the process tree in the block, and getrusage's.

    With psutil installed, a thread samples the sum of the RSS of this process and its children
    while the block runs (pages shared copy-on-write are counted once per process, so this
    overstates); ``rusage_mib`` gives the lifetime high-water marks of this process and of its
    largest finished child.
    """

    def __init__(self, interval: float = 0.2):
        self.interval = interval
        self.tree_peak_mib: float | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> PeakMemory:
        try:
            # psutil deferred: optional (the bench extra); without it, getrusage alone
            import psutil
        except ImportError:
            return self
        self.tree_peak_mib = 0.0
        process = psutil.Process()

        def sample() -> None:
            while True:
                total = 0
                for p in [process, *process.children(recursive=True)]:
                    try:
                        total += p.memory_info().rss
                    except psutil.Error:
                        pass
                self.tree_peak_mib = max(self.tree_peak_mib, total / 2**20)
                if self._stop.wait(self.interval):
                    return

        self._thread = threading.Thread(target=sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    @staticmethod
    def rusage_mib() -> tuple[float, float]:
        """High-water RSS of this process and of its largest waited-for child (MiB, Linux)."""
        own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        child = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        unit = 1 if sys.platform == "darwin" else 1024  # ru_maxrss: bytes on macOS, KiB on Linux
        return own * unit / 2**20, child * unit / 2**20


class StepMemory:
    """Memory (MiB) one training step holds: what autograd saves for backward, and CUDA's peak.

    ``saved_mib``: distinct storages autograd keeps for the backward pass (activations and
    bf16 weight copies; the parameters themselves are not counted), the same measure for any
    model and device (None with track_saved off, for compiled models). ``peak_mib`` (CUDA
    only): the allocator's peak above its level at entry.
    """

    def __init__(self, device, parameters, track_saved: bool = True):
        self.device = device
        self.track_saved = track_saved
        self.saved_mib: float | None = None
        self.peak_mib: float | None = None
        self._params = {p.untyped_storage().data_ptr() for p in parameters}
        self._storages: dict[int, int] = {}

    def _pack(self, tensor):
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in self._params:
            self._storages[storage.data_ptr()] = storage.nbytes()
        return tensor

    def __enter__(self) -> StepMemory:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            self._base = torch.cuda.memory_allocated(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
        if self.track_saved:
            self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t)
            self._hooks.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self.track_saved:
            self._hooks.__exit__(*exc)
            self.saved_mib = sum(self._storages.values()) / 2**20
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            self.peak_mib = (torch.cuda.max_memory_allocated(self.device) - self._base) / 2**20
