"""Triton heads: Min-K%++ token statistics of final hidden states under a linear head.

Two ways, same TokenStats as `minkscan.scoring.token_stats.token_stats`:

* `token_stats_triton`, one kernel: each program owns BLOCK_N rows, sweeps the vocabulary in
  BLOCK_V tiles, computes the logits tile hidden @ weight[tile].T in registers (fp32
  accumulation) and folds it into per-row running statistics: target logit, online max m,
  softmax mass sum e^(x-m), p-weighted mean of x-m and the *centred* second moment, merged
  across tiles with Chan's parallel-variance rule. Nothing of size [N, V] is ever stored.
* `token_stats_chunked`: cuBLAS writes the logits of ``row_chunk`` rows at a time (in the
  head's dtype, as the model's own lm_head would), and one Triton pass per chunk streams them
  once into the same statistics. A hand-tiled product reaches under half of cuBLAS on
  Hopper (shared/gpu/README.md); this keeps the product on cuBLAS and adds one read of the
  chunk, bounded by ``row_chunk x V`` logits of workspace.

The kernel module is imported on first use (not at import), so TRITON_INTERPRET=1 set before
the first call runs it on CPU tensors (tests).
"""

from __future__ import annotations

import functools
import importlib.util
from typing import Any

import torch

from minkscan.scoring.token_stats import TokenStats

# One program = BLOCK_N rows; tiles of BLOCK_V vocabulary ids, contracted BLOCK_H at a time.
DEFAULT_BLOCKS = {"block_n": 64, "block_v": 128, "block_h": 64}


def triton_importable() -> bool:
    """True when the triton package is installed (it is optional: the `test`/`gpu` extra)."""
    return importlib.util.find_spec("triton") is not None


def triton_usable(device: torch.device) -> bool:
    """True when the Triton kernel can run natively on ``device`` (CUDA + triton installed)."""
    return device.type == "cuda" and triton_importable()


@functools.cache
def _kernels() -> Any:
    """The jitted kernels' module, imported on first use so TRITON_INTERPRET is read then."""
    from minkscan.kernels import triton_kernel

    return triton_kernel


def stats_from_moments(moments: torch.Tensor) -> TokenStats:
    """TokenStats from the kernels' [5, N] output: target logit, max, mass, mean(x - max), M2."""
    target_logit, run_max, mass, mean_shifted, m2 = moments
    log_mass = torch.log(mass)
    return TokenStats(
        target_logprob=(target_logit - run_max) - log_mass,
        mean_logprob=mean_shifted - log_mass,
        std_logprob=(m2 / mass).clamp_min(0).sqrt(),
        top1_logprob=-log_mass,
    )


def token_stats_triton(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    *,
    bias: torch.Tensor | None = None,
    softcap: float | None = None,
    block_n: int = DEFAULT_BLOCKS["block_n"],
    block_v: int = DEFAULT_BLOCKS["block_v"],
    block_h: int = DEFAULT_BLOCKS["block_h"],
) -> TokenStats:
    """TokenStats of rows ``hidden`` [N, H] under head ``weight`` [V, H] (same as the torch path).

    ``hidden`` and ``weight`` must share a dtype (bf16/fp16/fp32); block sizes must be powers
    of two >= 16 (tl.dot). fp32 inputs use exact IEEE products, not TF32.
    """
    if hidden.dtype != weight.dtype:
        raise ValueError(f"hidden dtype {hidden.dtype} != head weight dtype {weight.dtype}")
    if hidden.shape[-1] != weight.shape[1]:
        raise ValueError(f"hidden size {hidden.shape[-1]} != head input size {weight.shape[1]}")
    n_rows, vocab_size = hidden.shape[0], weight.shape[0]
    out = torch.empty((5, n_rows), dtype=torch.float32, device=hidden.device)
    if n_rows > 0:
        grid = ((n_rows + block_n - 1) // block_n,)
        _kernels().head_stats_kernel[grid](
            hidden.contiguous(),
            weight.contiguous(),
            bias if bias is not None else weight,  # dummy pointer, never read without HAS_BIAS
            targets.contiguous(),
            out,
            n_rows,
            vocab_size,
            weight.shape[1],
            float(softcap or 1.0),
            HAS_BIAS=bias is not None,
            HAS_SOFTCAP=bool(softcap),
            PRECISION="ieee",
            DOT_FP32=hidden.device.type != "cuda",
            BLOCK_N=block_n,
            BLOCK_V=block_v,
            BLOCK_H=block_h,
        )
    return stats_from_moments(out)


# Rows per program and vocabulary ids per step of the row pass: wide, contiguous loads.
ROW_BLOCKS = {"block_n": 4, "block_v": 2048}


def token_stats_chunked(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    *,
    row_chunk: int,
    bias: torch.Tensor | None = None,
    softcap: float | None = None,
    block_n: int = ROW_BLOCKS["block_n"],
    block_v: int = ROW_BLOCKS["block_v"],
) -> TokenStats:
    """TokenStats of rows ``hidden`` [N, H] under head ``weight`` [V, H]: logits of
    ``row_chunk`` rows at a time by the BLAS product (cuBLAS on CUDA) in the head's dtype,
    then one Triton pass over each chunk (softcap applied there, in fp32)."""
    n_rows = hidden.shape[0]
    out = torch.empty((5, n_rows), dtype=torch.float32, device=hidden.device)
    hidden = hidden.to(weight.dtype)
    for r0 in range(0, n_rows, row_chunk):
        r1 = min(r0 + row_chunk, n_rows)
        logits = torch.nn.functional.linear(hidden[r0:r1], weight, bias)
        _kernels().row_stats_kernel[((r1 - r0 + block_n - 1) // block_n,)](
            logits,
            targets[r0:r1].contiguous(),
            out[:, r0:],
            r1 - r0,
            logits.shape[1],
            logits.stride(0),
            n_rows,
            float(softcap or 1.0),
            HAS_SOFTCAP=bool(softcap),
            BLOCK_N=block_n,
            BLOCK_V=block_v,
        )
        del logits  # the next chunk reuses its memory
    return stats_from_moments(out)
