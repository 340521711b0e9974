"""Per-token statistics of the next-token distribution, computed chunk by chunk.

For each scored position with logits x (over the model's full vocabulary) and target token t:

    log p(t)  = x_t - logsumexp(x)
    mu        = E_p[log p]   = E_p[x] - logsumexp(x)
    sigma     = Std_p[log p] = Std_p[x]
    log p_top1 = max(x) - logsumexp(x)   (Gap-K%; the running max the sweep keeps anyway)

The vocabulary is swept in tiles. Each tile contributes its own max, softmax mass,
p-weighted mean and *centred* second moment, merged with the parallel-variance rule
(Chan et al.) under an online max. Means are kept relative to the running max, so large
logit offsets cost no precision. Nothing of size [rows x vocab] is ever held in float32
beyond one [row_chunk x vocab_chunk] tile, and the variance never comes from
E[x^2] - E[x]^2.

Pure torch, no model or framework knowledge: callers supply a function that returns
the logits of a (row slice, vocab slice) tile.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

# (row_start, row_stop, vocab_start, vocab_stop) -> logits tile, any float dtype.
LogitTileFn = Callable[[int, int, int, int], torch.Tensor]


@dataclass(frozen=True)
class TokenStats:
    """Float32 vectors over scored positions: log p(target), mu and sigma of log p, and the
    log-probability of the most likely token."""

    target_logprob: torch.Tensor
    mean_logprob: torch.Tensor
    std_logprob: torch.Tensor
    top1_logprob: torch.Tensor

    def minkpp(self) -> torch.Tensor:
        """Min-K%++ token score (log p - mu) / sigma; 0 where sigma is 0 (degenerate p)."""
        return safe_divide(self.target_logprob - self.mean_logprob, self.std_logprob)

    def minkpp_mu(self) -> torch.Tensor:
        """Min-K%++ without its sigma normalisation: log p - mu (ablation)."""
        return self.target_logprob - self.mean_logprob

    def minkpp_sigma(self) -> torch.Tensor:
        """Min-K%++ without its mu calibration: log p / sigma (ablation)."""
        return safe_divide(self.target_logprob, self.std_logprob)

    def gap(self) -> torch.Tensor:
        """Gap-K% token score: (log p - log p_top1) / sigma, the gap to the most likely token."""
        return safe_divide(self.target_logprob - self.top1_logprob, self.std_logprob)

    def _map(self, function: Callable[[torch.Tensor], torch.Tensor]) -> TokenStats:
        return TokenStats(*(function(getattr(self, name)) for name in _FIELDS))

    def index_select(self, index: torch.Tensor) -> TokenStats:
        """The stats of the positions ``index`` lists, in its order."""
        return self._map(lambda values: values.index_select(0, index))

    def slice(self, start: int, stop: int) -> TokenStats:
        return self._map(lambda values: values[start:stop])

    @staticmethod
    def cat(parts: Sequence[TokenStats]) -> TokenStats:
        """Stats laid end to end (e.g. the batches of one call, in launch order)."""
        return TokenStats(*(torch.cat([getattr(part, name) for part in parts]) for name in _FIELDS))


_FIELDS = ("target_logprob", "mean_logprob", "std_logprob", "top1_logprob")


def safe_divide(numerator: torch.Tensor, denominator: torch.Tensor) -> torch.Tensor:
    """numerator / denominator, 0 where the denominator is 0 (sigma = 0 means p is degenerate)."""
    nonzero = denominator > 0
    return torch.where(nonzero, numerator / torch.where(nonzero, denominator, 1.0), 0.0)


def _tile_moments(
    tile: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Max, softmax mass and weighted mean relative to that max, and centred M2 of one tile.

    Consumes ``tile`` (float32, modified in place) to avoid extra [rows x vocab] buffers.
    """
    tile_max = tile.amax(dim=1)
    shifted = tile.sub_(tile_max[:, None])  # x - max, <= 0
    weights = torch.exp(shifted)
    mass = weights.sum(dim=1)
    mean_shifted = torch.linalg.vecdot(weights, shifted) / mass
    deviation = shifted.sub_(mean_shifted[:, None])
    m2 = torch.linalg.vecdot(weights.mul_(deviation), deviation)
    return tile_max, mass, mean_shifted, m2


@functools.cache
def _compiled_tile_moments() -> Callable[[torch.Tensor], tuple[torch.Tensor, ...]]:
    """`_tile_moments` through torch.compile: one fused loop instead of ~8 tensor passes."""
    return torch.compile(_tile_moments, dynamic=True)


def token_stats(
    logit_tile: LogitTileFn,
    targets: torch.Tensor,
    vocab_size: int,
    *,
    row_chunk: int = 2048,
    vocab_chunk: int = 1024,
    compiled: bool = False,
) -> TokenStats:
    """Sweep rows x vocabulary tiles and return per-row TokenStats.

    ``targets`` holds the target token id of each row; ``logit_tile(r0, r1, v0, v1)`` must
    return a fresh tensor (it is reused in place) of the logits of rows r0:r1 over ids v0:v1.
    ``compiled`` runs the per-tile moments through torch.compile (same numbers, fewer passes
    over memory; the first call compiles for ~5-20 s).
    """
    tile_moments = _compiled_tile_moments() if compiled else _tile_moments
    n_rows = targets.shape[0]
    device = targets.device
    target_logprob = torch.empty(n_rows, dtype=torch.float32, device=device)
    mean_logprob = torch.empty_like(target_logprob)
    variance = torch.empty_like(target_logprob)
    top1_logprob = torch.empty_like(target_logprob)

    for r0 in range(0, n_rows, row_chunk):
        r1 = min(r0 + row_chunk, n_rows)
        rows_target = targets[r0:r1]
        run_max = run_mass = run_mean = run_m2 = run_target = None
        for v0 in range(0, vocab_size, vocab_chunk):
            v1 = min(v0 + vocab_chunk, vocab_size)
            tile = logit_tile(r0, r1, v0, v1).to(torch.float32)
            in_tile = (rows_target >= v0) & (rows_target < v1)
            local = (rows_target - v0).clamp(0, v1 - v0 - 1)
            tile_target = tile.gather(1, local[:, None]).squeeze(1)
            t_max, t_mass, t_mean, t_m2 = tile_moments(tile)
            if run_max is None:
                run_max, run_mass, run_mean, run_m2 = t_max, t_mass, t_mean, t_m2
                run_target = torch.where(in_tile, tile_target, torch.zeros_like(tile_target))
                continue
            run_target = torch.where(in_tile, tile_target, run_target)
            new_max = torch.maximum(run_max, t_max)
            shift_run, shift_tile = run_max - new_max, t_max - new_max  # <= 0
            mass_run = run_mass * torch.exp(shift_run)
            mass_tile = t_mass * torch.exp(shift_tile)
            mass = mass_run + mass_tile
            mean_run, mean_tile = run_mean + shift_run, t_mean + shift_tile  # relative to new_max
            delta = mean_tile - mean_run
            run_mean = mean_run + delta * (mass_tile / mass)
            run_m2 = (
                run_m2 * torch.exp(shift_run)
                + t_m2 * torch.exp(shift_tile)
                + delta * delta * (mass_run * mass_tile / mass)
            )
            run_mass, run_max = mass, new_max
        log_mass = torch.log(run_mass)  # log-normaliser minus the running max
        target_logprob[r0:r1] = (run_target - run_max) - log_mass
        mean_logprob[r0:r1] = run_mean - log_mass
        variance[r0:r1] = (run_m2 / run_mass).clamp_min(0)
        top1_logprob[r0:r1] = -log_mass

    return TokenStats(
        target_logprob=target_logprob,
        mean_logprob=mean_logprob,
        std_logprob=variance.sqrt(),
        top1_logprob=top1_logprob,
    )


def token_stats_from_hidden(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    *,
    bias: torch.Tensor | None = None,
    softcap: float | None = None,
    row_chunk: int = 2048,
    vocab_chunk: int = 1024,
    compiled: bool = False,
) -> TokenStats:
    """Fused linear head + reduction: logits tiles are hidden[r] @ weight[v].T, never all at once.

    ``softcap`` applies Gemma-2 style final logit soft-capping (cap * tanh(x / cap)).
    """

    def tile(r0: int, r1: int, v0: int, v1: int) -> torch.Tensor:
        logits = torch.nn.functional.linear(
            hidden[r0:r1], weight[v0:v1], None if bias is None else bias[v0:v1]
        ).to(torch.float32)
        if softcap:
            logits = torch.tanh(logits.div_(softcap)).mul_(softcap)
        return logits

    return token_stats(
        tile,
        targets,
        weight.shape[0],
        row_chunk=row_chunk,
        vocab_chunk=vocab_chunk,
        compiled=compiled,
    )


def token_stats_from_logits(
    logits: torch.Tensor,
    targets: torch.Tensor,
    *,
    row_chunk: int = 2048,
    vocab_chunk: int = 1024,
    compiled: bool = False,
) -> TokenStats:
    """Reduction over precomputed logits [rows, vocab] (any dtype), upcast one tile at a time."""

    def tile(r0: int, r1: int, v0: int, v1: int) -> torch.Tensor:
        return logits[r0:r1, v0:v1].to(torch.float32, copy=True)

    return token_stats(
        tile,
        targets,
        logits.shape[1],
        row_chunk=row_chunk,
        vocab_chunk=vocab_chunk,
        compiled=compiled,
    )
