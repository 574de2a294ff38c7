"""Compute figures: the Transformer's matmul FLOPs per training step, measured GEMM peaks, and
the device's clock (synchronized on CUDA)."""

from __future__ import annotations

import time

import numpy as np
import torch

from runs.device import cpu_flags


def transformer_flops(dims: dict, vocab_size: int, batch: int, src_len: int, tgt_len: int) -> int:
    """Matmul FLOPs of one training step (forward + backward = 3 x forward), 2 per multiply-add.

    Per forward, with d = d_model, f = d_ff, S/T source/target tokens, B sentences:
    encoder layer  8 d^2 S (q, k, v, out) + 4 B S^2 d (scores, weighted values) + 4 d f S;
    decoder layer  8 d^2 T + 4 B T^2 d (self; causal masking not subtracted, as it is computed)
                   + 4 d^2 T + 4 d^2 S + 4 B T S d (cross: q, out on T; k, v on S)
                   + 4 d f T;
    output projection 2 d V T. Embedding lookups, norms, softmax and the loss are not counted.
    """
    d, f = dims["d_model"], dims["d_ff"]
    s, t = batch * src_len, batch * tgt_len
    encoder = 8 * d * d * s + 4 * batch * src_len**2 * d + 4 * d * f * s
    decoder = (
        8 * d * d * t
        + 4 * batch * tgt_len**2 * d
        + 4 * d * d * t
        + 4 * d * d * s
        + 4 * batch * tgt_len * src_len * d
        + 4 * d * f * t
    )
    forward = (
        dims["n_encoder_layers"] * encoder
        + dims["n_decoder_layers"] * decoder
        + 2 * d * vocab_size * t
    )
    return 3 * forward


def best_gflops(matmul, flops: float, repeats: int, clock=time.perf_counter) -> float:
    """Best GFLOP/s of matmul() (flops each call) over repeats timed calls after one warm-up."""
    rates = []
    for run in range(repeats + 1):
        start = clock()
        matmul()
        elapsed = clock() - start
        if run:
            rates.append(flops / elapsed / 1e9)
    return max(rates)


def gemm_peak(dtype, device, size: int = 2048, repeats: int = 10) -> float:
    """Measured matmul GFLOP/s of [size x size] @ [size x size] in dtype, best of repeats."""
    a = torch.randn(size, size, device=device).to(dtype)
    b = torch.randn(size, size, device=device).to(dtype)
    calls = 1 if device.type == "cpu" else 50

    def matmul() -> None:
        for _ in range(calls):
            a @ b

    return best_gflops(matmul, 2 * size**3 * calls, repeats, lambda: synchronized_time(device))


def numpy_blas_peak(size: int = 2048, repeats: int = 10) -> dict:
    """float32 GFLOP/s of the same square GEMM through numpy's BLAS, best of repeats, and its name.

    Not a system we compare: a second opinion on what this CPU's float32 GEMMs can reach. On
    a Zen 3 EPYC, numpy's OpenBLAS ran the base step's GEMM shapes a median 1.27x faster than
    torch's MKL (docs/performance.md), so an MFU against torch's own GEMM peak flatters every
    system there. numpy's BLAS starts as many threads as there are CPUs, whatever torch's.
    """
    a = np.random.default_rng(0).standard_normal((size, size), dtype=np.float32)
    out = np.empty_like(a)
    rate = best_gflops(lambda: np.matmul(a, a, out=out), 2 * size**3, repeats)
    blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
    return {"name": f"{blas['name']} {blas.get('version', '')}".strip(), "fp32": rate}


def native_bf16(device) -> bool:
    """True on CUDA and on CPUs with AVX512-BF16 or AMX; elsewhere bf16 GEMMs are emulated."""
    if device.type == "cuda":
        return True
    flags = cpu_flags()
    return "avx512_bf16" in flags or "amx_bf16" in flags


def default_precisions(device) -> list[str]:
    """bf16 on CUDA; fp32 on a CPU, plus bf16 where the CPU has it natively."""
    if device.type == "cuda":
        return ["bf16"]
    return ["fp32", "bf16"] if native_bf16(device) else ["fp32"]


def synchronized_time(device) -> float:
    """time.perf_counter() after the device has finished its queued work."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()
