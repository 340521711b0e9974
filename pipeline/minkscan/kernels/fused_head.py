"""Triton kernel: linear head + Min-K%++ token statistics in one pass over vocabulary tiles.

Each program owns BLOCK_N rows of final hidden states. It sweeps the vocabulary in BLOCK_V
tiles, computes the logits tile hidden @ weight[tile].T in registers (fp32 accumulation),
and folds it into per-row running statistics: target logit, online max m, softmax mass
sum e^(x-m), p-weighted mean of x-m and the *centred* second moment, merged across tiles with
Chan's parallel-variance rule -- the same algebra as `minkscan.scoring.token_stats.token_stats`,
so the result is the same TokenStats. Nothing of size [N, V] is ever stored.

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
def _compiled_kernel() -> Any:
    """The jitted kernel, imported on first use so TRITON_INTERPRET is read then."""
    from minkscan.kernels.triton_kernel import head_stats_kernel

    return head_stats_kernel


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
        _compiled_kernel()[grid](
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
    target_logit, run_max, mass, mean_shifted, m2 = out
    log_mass = torch.log(mass)
    return TokenStats(
        target_logprob=(target_logit - run_max) - log_mass,
        mean_logprob=mean_shifted - log_mass,
        std_logprob=(m2 / mass).clamp_min(0).sqrt(),
        top1_logprob=-log_mass,
    )
