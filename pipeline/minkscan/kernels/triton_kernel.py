"""The Triton kernels behind `minkscan.kernels.fused_head` (imports triton: load lazily).

Both write per row: target logit, online max m, softmax mass sum e^(x-m), mean of x-m under
p and the centred second moment, merged tile by tile with Chan's rule (`_merge_tile`):

* `head_stats_kernel` computes each logits tile from hidden states and the head weight in
  registers (the whole head in one kernel);
* `row_stats_kernel` reads logits that cuBLAS already wrote (one row chunk at a time), so
  the product runs at cuBLAS speed and this pass only streams the logits once.
"""

import triton
import triton.language as tl


@triton.jit
def _softcap(logits, softcap):
    """cap * tanh(x / cap), tanh via exp (tl builtins only)."""
    return softcap * (2.0 / (1.0 + tl.exp(-2.0 * logits / softcap)) - 1.0)


@triton.jit
def _merge_tile(logits, cols, col_ok, targets, run_target, run_max, run_mass, run_mean, run_m2):
    """Fold one [rows, cols] fp32 logits tile into the rows' running statistics."""
    run_target += tl.sum(tl.where(cols[None, :] == targets[:, None], logits, 0.0), axis=1)
    tile_max = tl.max(tl.where(col_ok[None, :], logits, float("-inf")), axis=1)
    shifted = tl.where(col_ok[None, :], logits - tile_max[:, None], 0.0)
    weights = tl.where(col_ok[None, :], tl.exp(shifted), 0.0)
    tile_mass = tl.sum(weights, axis=1)
    tile_mean = tl.sum(weights * shifted, axis=1) / tile_mass
    deviation = shifted - tile_mean[:, None]
    tile_m2 = tl.sum(weights * deviation * deviation, axis=1)
    new_max = tl.maximum(run_max, tile_max)
    # Before the first tile run_mass is 0: a zero shift keeps -inf out of the merge.
    shift_run = tl.where(run_mass > 0, run_max - new_max, 0.0)
    shift_tile = tile_max - new_max
    mass_run = run_mass * tl.exp(shift_run)
    mass_tile = tile_mass * tl.exp(shift_tile)
    mass = mass_run + mass_tile
    mean_run = run_mean + shift_run
    delta = tile_mean + shift_tile - mean_run
    run_mean = mean_run + delta * (mass_tile / mass)
    run_m2 = (
        run_m2 * tl.exp(shift_run)
        + tile_m2 * tl.exp(shift_tile)
        + delta * delta * (mass_run * mass_tile / mass)
    )
    return run_target, new_max, mass, run_mean, run_m2


@triton.jit
def _store_rows(out_ptr, out_stride, rows, row_ok, target, run_max, mass, mean, m2):
    tl.store(out_ptr + rows, target, mask=row_ok)
    tl.store(out_ptr + out_stride + rows, run_max, mask=row_ok)
    tl.store(out_ptr + 2 * out_stride + rows, mass, mask=row_ok)
    tl.store(out_ptr + 3 * out_stride + rows, mean, mask=row_ok)
    tl.store(out_ptr + 4 * out_stride + rows, m2, mask=row_ok)


@triton.jit
def head_stats_kernel(
    hidden_ptr,
    weight_ptr,
    bias_ptr,
    targets_ptr,
    out_ptr,
    n_rows,
    vocab_size,
    hidden_size,
    softcap,
    HAS_BIAS: tl.constexpr,
    HAS_SOFTCAP: tl.constexpr,
    PRECISION: tl.constexpr,
    DOT_FP32: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_V: tl.constexpr,
    BLOCK_H: tl.constexpr,
):
    """Writes out[5, n_rows]: target logit, max, mass, mean(x - max), centred M2 (all fp32)."""
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = rows < n_rows
    targets = tl.load(targets_ptr + rows, mask=row_ok, other=0)
    run_max = tl.full([BLOCK_N], float("-inf"), tl.float32)
    run_mass = tl.full([BLOCK_N], 0.0, tl.float32)
    run_mean = tl.full([BLOCK_N], 0.0, tl.float32)
    run_m2 = tl.full([BLOCK_N], 0.0, tl.float32)
    run_target = tl.full([BLOCK_N], 0.0, tl.float32)
    for v0 in range(0, vocab_size, BLOCK_V):
        cols = v0 + tl.arange(0, BLOCK_V)
        col_ok = cols < vocab_size
        logits = tl.full([BLOCK_N, BLOCK_V], 0.0, tl.float32)
        for h0 in range(0, hidden_size, BLOCK_H):
            hs = h0 + tl.arange(0, BLOCK_H)
            h_ok = hs < hidden_size
            a = tl.load(
                hidden_ptr + rows[:, None] * hidden_size + hs[None, :],
                mask=row_ok[:, None] & h_ok[None, :],
                other=0.0,
            )
            b = tl.load(
                weight_ptr + cols[None, :] * hidden_size + hs[:, None],
                mask=col_ok[None, :] & h_ok[:, None],
                other=0.0,
            )
            if DOT_FP32:  # off-GPU (interpreter): its bf16 dot is wrong; bf16 products are exact
                a = a.to(tl.float32)
                b = b.to(tl.float32)
            logits = tl.dot(a, b, logits, input_precision=PRECISION)
        if HAS_BIAS:
            bias = tl.load(bias_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)
            logits = logits + bias[None, :]
        if HAS_SOFTCAP:
            logits = _softcap(logits, softcap)
        run_target, run_max, run_mass, run_mean, run_m2 = _merge_tile(
            logits, cols, col_ok, targets, run_target, run_max, run_mass, run_mean, run_m2
        )
    _store_rows(out_ptr, n_rows, rows, row_ok, run_target, run_max, run_mass, run_mean, run_m2)


@triton.jit
def row_stats_kernel(
    logits_ptr,
    targets_ptr,
    out_ptr,
    n_rows,
    vocab_size,
    row_stride,
    out_stride,
    softcap,
    HAS_SOFTCAP: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_V: tl.constexpr,
):
    """Reads logits [n_rows, vocab_size] (any float dtype, rows ``row_stride`` apart) once and
    writes out[5, out_stride] at columns 0..n_rows-1, as `head_stats_kernel` does."""
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = rows < n_rows
    targets = tl.load(targets_ptr + rows, mask=row_ok, other=0)
    run_max = tl.full([BLOCK_N], float("-inf"), tl.float32)
    run_mass = tl.full([BLOCK_N], 0.0, tl.float32)
    run_mean = tl.full([BLOCK_N], 0.0, tl.float32)
    run_m2 = tl.full([BLOCK_N], 0.0, tl.float32)
    run_target = tl.full([BLOCK_N], 0.0, tl.float32)
    for v0 in range(0, vocab_size, BLOCK_V):
        cols = v0 + tl.arange(0, BLOCK_V)
        col_ok = cols < vocab_size
        logits = tl.load(
            logits_ptr + rows[:, None].to(tl.int64) * row_stride + cols[None, :],
            mask=row_ok[:, None] & col_ok[None, :],
            other=0.0,
        ).to(tl.float32)
        if HAS_SOFTCAP:
            logits = _softcap(logits, softcap)
        run_target, run_max, run_mass, run_mean, run_m2 = _merge_tile(
            logits, cols, col_ok, targets, run_target, run_max, run_mass, run_mean, run_m2
        )
    _store_rows(out_ptr, out_stride, rows, row_ok, run_target, run_max, run_mass, run_mean, run_m2)
