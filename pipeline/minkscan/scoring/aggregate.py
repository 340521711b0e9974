"""From per-token statistics to per-document scores (pure torch).

Every score is oriented so that higher means "more likely a member":

    loss                 mean log p(x_t)                                  (Loss attack)
    zlib                 loss / zlib-compressed byte length of the text   (Zlib attack)
    mink_k{P}            mean of the lowest P% of log p                   (Min-K%)
    minkpp_k{P}          mean of the lowest P% of (log p - mu) / sigma    (Min-K%++)
    gapk_k{P}            mean of the lowest P% of the w-token moving average of
                         (log p - log p_top1) / sigma                     (Gap-K%)
    minkpp_mu_k{P}       ... of (log p - mu)          (ablation: no sigma normalisation)
    minkpp_sigma_k{P}    ... of log p / sigma         (ablation: no mu calibration)
    dcpdd, aeca          from log p and reference-corpus token frequencies (see below)

with k = max(1, floor(P / 100 * n)), n the number of scored tokens (of smoothed values for
Gap-K%: n - w + 1 moving averages, or the n raw values when n < w, as the authors' code).
Which methods, their per-token values and their order come from `minkscan.methods`; this
module owns the lowest-k% means, the moving average and the whole-document scores
(`Documents`).
"""

from __future__ import annotations

import functools
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from minkscan.config import ScoringConfig
from minkscan.methods import Method
from minkscan.scoring.token_stats import TokenStats
from minkscan.text.frequencies import ReferenceFrequencies

# AECA's self-information for a token id the frequency file does not cover (its authors'
# `default_i_ref`).
AECA_UNSEEN_INFORMATION = 0.5


def zlib_length(text: str) -> int:
    """Byte length of the zlib-compressed UTF-8 text (the Zlib attack's denominator)."""
    return len(zlib.compress(text.encode("utf-8")))


def _on(values: Sequence[int] | np.ndarray, device: torch.device) -> torch.Tensor:
    """Host integers as a long tensor on ``device`` (a copy that does not wait)."""
    return torch.as_tensor(np.asarray(values, dtype=np.int64)).to(device, non_blocking=True)


def lowest_k_means(
    values: torch.Tensor, lengths: Sequence[int] | torch.Tensor, percentages: Sequence[int]
) -> torch.Tensor:
    """Mean of the lowest max(1, floor(P/100 * n)) values of each row, for each P.

    ``values`` is [docs, max_len] float64 with each row's first ``lengths[i]`` entries valid
    (``lengths`` on the host, so nothing here waits for the device). Returns
    [docs, len(percentages)]; NaN where a document has no valid value.
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    n_docs, max_len = values.shape
    p = np.asarray(list(percentages), dtype=np.int64)
    if max_len == 0:
        return torch.full((n_docs, len(p)), float("nan"), dtype=values.dtype, device=values.device)
    # k on the host: integer floor, no float error; at least 1 and at most n.
    k = np.clip(p[None, :] * lengths[:, None] // 100, 1, np.maximum(lengths, 1)[:, None])
    device_lengths = _on(lengths, values.device)
    valid = torch.arange(max_len, device=values.device)[None, :] < device_lengths[:, None]
    sorted_values, _ = torch.where(valid, values, float("inf")).sort(dim=1)
    # Zero the padding after sorting so the running sums stay finite.
    cumulative = torch.where(valid, sorted_values, 0.0).cumsum(dim=1)
    k_device = _on(k, values.device)
    means = cumulative.gather(1, k_device - 1) / k_device.to(values.dtype)
    return torch.where(device_lengths[:, None] > 0, means, float("nan"))


def moving_average(
    values: torch.Tensor, lengths: Sequence[int] | np.ndarray, window: int
) -> tuple[torch.Tensor, np.ndarray]:
    """Row-wise moving averages over ``window`` valid values ('valid' mode: n - w + 1 of
    them), rows shorter than the window kept as they are. Returns (values, new lengths)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    if window <= 1 or values.shape[1] < window:
        return values, lengths
    device_lengths = _on(lengths, values.device)
    valid = torch.arange(values.shape[1], device=values.device)[None, :] < device_lengths[:, None]
    cumulative = torch.nn.functional.pad(torch.where(valid, values, 0.0).cumsum(1), (1, 0))
    averaged = (cumulative[:, window:] - cumulative[:, :-window]) / window
    long_enough = device_lengths >= window
    width = values.shape[1] - window + 1
    smoothed = torch.where(long_enough[:, None], averaged, values[:, :width])
    smoothed = torch.cat([smoothed, values[:, width:]], dim=1)  # short rows keep their tail
    return smoothed, np.where(lengths >= window, lengths - window + 1, lengths)


def _grid_index(lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(document, position) of every entry of flat per-token values laid end to end."""
    doc_index = np.repeat(np.arange(lengths.size), lengths)
    offsets = np.cumsum(lengths) - lengths
    return doc_index, np.arange(int(lengths.sum())) - offsets[doc_index]


@dataclass(frozen=True)
class Documents:
    """A group of documents as their whole-document scores see them: per-token ``stats``
    laid end to end, ``lengths`` (host integers, scored tokens of each), their ``texts``,
    and for DC-PDD the scored target ids (host) with the reference-corpus frequencies and
    the clip. Each score is a float64 [docs] tensor on the stats' device, NaN for a
    document with no scored token, computed without waiting on the device."""

    stats: TokenStats
    lengths: np.ndarray
    texts: Sequence[str]
    target_ids: np.ndarray | None = None
    reference: ReferenceFrequencies | None = None
    dcpdd_clip: float | None = None
    aeca_lambda: float | None = None

    @property
    def device(self) -> torch.device:
        return self.stats.target_logprob.device

    @functools.cached_property
    def _grid(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(document, position) of every flat entry, on the device."""
        doc_index, column_index = _grid_index(self.lengths)
        return _on(doc_index, self.device), _on(column_index, self.device)

    def padded(self, flat: torch.Tensor) -> torch.Tensor:
        """Flat per-token values as a float64 [docs, longest] grid, zero past each length."""
        grid = torch.zeros(
            self.lengths.size, int(self.lengths.max(initial=0)), dtype=torch.float64,
            device=self.device,
        )  # fmt: skip
        grid[self._grid] = flat.to(torch.float64)
        return grid

    def loss(self) -> torch.Tensor:
        """Mean log p of each document (the Loss attack, negated so higher = member)."""
        return self._loss

    @functools.cached_property
    def _loss(self) -> torch.Tensor:  # Zlib divides it: computed once per group
        lengths = _on(self.lengths, self.device)
        sums = self.padded(self.stats.target_logprob).sum(1)
        return torch.where(lengths > 0, sums / lengths.clamp_min(1), float("nan"))

    def zlib(self) -> torch.Tensor:
        """Loss over the zlib-compressed byte length of the text (the Zlib attack)."""
        compressed = [max(1, zlib_length(text)) for text in self.texts]
        denominator = torch.tensor(compressed, dtype=torch.float64)
        return self.loss() / denominator.to(self.device, non_blocking=True)

    def dcpdd(self) -> torch.Tensor:
        """DC-PDD: over the first occurrence of each distinct scored token of a document, the
        mean of min(p(x_t) * -log p_ref(x_t), clip), p_ref from reference-corpus token
        counts (`minkscan.text.frequencies`). Which tokens come first, and their p_ref, are
        found on the host from the ids alone. Repeated tokens count once, as the paper's
        code does, so a repeated rare token cannot dominate."""
        assert self.target_ids is not None and self.reference is not None, "DC-PDD needs ids"
        assert self.dcpdd_clip is not None, "DC-PDD needs its clip"
        lengths = self.lengths
        ids = np.asarray(self.target_ids, dtype=np.int64)
        doc_index = np.repeat(np.arange(lengths.size), lengths)
        _, first = np.unique(doc_index * (int(ids.max(initial=0)) + 1) + ids, return_index=True)
        doc_first, ids_first = doc_index[first], ids[first]
        device = self.device
        logprob = self.stats.target_logprob.index_select(0, _on(first, device))
        nll = torch.from_numpy(-self.reference.of(ids_first)).to(device, non_blocking=True)
        terms = torch.clamp(logprob.to(torch.float64).exp() * nll, max=self.dcpdd_clip)
        sums = torch.zeros(lengths.size, dtype=torch.float64, device=device)
        sums.index_add_(0, _on(doc_first, device), terms)
        counts = np.bincount(doc_first, minlength=lengths.size)
        means = sums / _on(np.maximum(counts, 1), device)
        return torch.where(_on(counts, device) > 0, means, float("nan"))

    def aeca(self) -> torch.Tensor:
        """AECA, as its authors' `evaluate_aeca` computes it: the potential stream
        phi_t = p(x_t) * I_ref(x_t), with I_ref = -log p_ref from the token-frequency file
        (0.5 for an id past its vocabulary, as their code), high-passed into
        s_t = phi_t - phi_{t+1} (s_n = phi_n); the score is std(s) - lambda * std(-log p),
        population standard deviations, higher = member. Temperature 1, as their code
        calls it, so the main pass's log p is all it needs."""
        assert self.target_ids is not None and self.reference is not None, "AECA needs ids"
        assert self.aeca_lambda is not None, "AECA needs its lambda"
        ids = np.asarray(self.target_ids, dtype=np.int64)
        inside = ids < self.reference.log_p.size
        information = np.where(
            inside, -self.reference.log_p[np.where(inside, ids, 0)], AECA_UNSEEN_INFORMATION
        )
        lengths = _on(self.lengths, self.device)
        valid = torch.arange(int(self.lengths.max(initial=0)), device=self.device)[None, :]
        valid = valid < lengths[:, None]
        logprob = self.padded(self.stats.target_logprob)
        potential = logprob.exp() * self.padded(torch.from_numpy(information).to(self.device))
        potential = torch.where(valid, potential, 0.0)
        following = torch.nn.functional.pad(potential[:, 1:], (0, 1))  # zero after the last
        spectrum = torch.where(valid, potential - following, 0.0)

        def std(values: torch.Tensor) -> torch.Tensor:
            n = lengths.clamp_min(1).to(torch.float64)
            mean = values.sum(1) / n
            return (torch.where(valid, values - mean[:, None], 0.0).square().sum(1) / n).sqrt()

        scores = std(spectrum) - self.aeca_lambda * std(torch.where(valid, -logprob, 0.0))
        return torch.where(lengths > 0, scores, float("nan"))


def document_scores(
    documents: Documents, methods: Sequence[Method], scoring: ScoringConfig
) -> dict[str, torch.Tensor]:
    """Every column of ``methods`` (single-pass, from `minkscan.methods`) for ``documents``,
    all at once on the stats' device: float64 [docs] tensors keyed by column, in order.

    A per-k method's column is the lowest-k% mean of its per-token values (smoothed first
    when it has a window); any other's comes from its whole-document score.
    """
    scores: dict[str, torch.Tensor] = {}
    for method in methods:
        if method.per_k is None:
            scores[method.key] = method.document(documents)
            continue
        values, counts = (documents.padded(method.token(documents.stats)), documents.lengths)
        if method.window is not None:
            values, counts = moving_average(values, counts, getattr(scoring, method.window))
        percentages = getattr(scoring, method.per_k)
        means = lowest_k_means(values, counts, percentages)
        for column, p in enumerate(percentages):
            scores[f"{method.key}_k{p}"] = means[:, column]
    return scores
