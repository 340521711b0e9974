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

with k = max(1, floor(P / 100 * n)), n the number of scored tokens (of smoothed values for
Gap-K%: n - w + 1 moving averages, or the n raw values when n < w, as the authors' code).
The columns and their order come from `minkscan.methods`.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence

import numpy as np
import torch

from minkscan.methods import SINGLE_PASS
from minkscan.scoring.token_stats import TokenStats, safe_divide
from minkscan.text.frequencies import ReferenceFrequencies


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


def document_scores(
    stats: TokenStats,
    lengths: Sequence[int],
    texts: Sequence[str],
    k_percentages: Sequence[int],
    ablation_k_percentages: Sequence[int],
    gap_window: int = 3,
) -> dict[str, torch.Tensor]:
    """Aggregate flat per-token stats (documents laid end to end) into per-document scores.

    ``lengths[i]`` (host integers) is the number of scored tokens of document i; ``stats``
    vectors have ``sum(lengths)`` entries in document order. Every document is aggregated
    at once on the stats' device, with no wait on it. Returns float64 [docs] tensors there,
    keyed by `minkscan.methods.single_pass_columns` (DC-PDD apart, see `dcpdd_scores`), NaN
    for documents with no scored token.
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    device = stats.target_logprob.device
    n_docs, max_len = lengths.size, int(lengths.max()) if lengths.size else 0
    per_token = {
        "mink": stats.target_logprob,
        "minkpp": stats.minkpp(),
        "minkpp_mu": stats.target_logprob - stats.mean_logprob,
        "minkpp_sigma": safe_divide(stats.target_logprob, stats.std_logprob),
        "gapk": safe_divide(stats.target_logprob - stats.top1_logprob, stats.std_logprob),
    }
    doc_index, column_index = (_on(index, device) for index in _grid_index(lengths))
    padded: dict[str, torch.Tensor] = {}
    for name, flat in per_token.items():
        grid = torch.zeros(n_docs, max_len, dtype=torch.float64, device=device)
        grid[doc_index, column_index] = flat.to(torch.float64)
        padded[name] = grid

    device_lengths = _on(lengths, device)
    loss = torch.where(
        device_lengths > 0, padded["mink"].sum(1) / device_lengths.clamp_min(1), float("nan")
    )
    compressed = torch.tensor([max(1, zlib_length(t)) for t in texts], dtype=torch.float64)
    scores = {"loss": loss, "zlib": loss / compressed.to(device, non_blocking=True)}
    counts = dict.fromkeys(padded, lengths)  # values per document behind each score
    padded["gapk"], counts["gapk"] = moving_average(padded["gapk"], lengths, gap_window)
    for method in SINGLE_PASS:
        if method.per_k is None:
            continue
        percentages = k_percentages if method.per_k == "k_percentages" else ablation_k_percentages
        means = lowest_k_means(padded[method.key], counts[method.key], percentages)
        for column, p in enumerate(percentages):
            scores[f"{method.key}_k{p}"] = means[:, column]
    return scores


def dcpdd_scores(
    target_logprob: torch.Tensor,
    target_ids: np.ndarray,
    lengths: Sequence[int],
    reference: ReferenceFrequencies,
    clip: float,
) -> torch.Tensor:
    """DC-PDD of each document (higher = member), all at once on the stats' device: over the
    first occurrence of each distinct scored token of a document, the mean of
    min(p(x_t) * -log p_ref(x_t), clip).

    ``target_logprob[i]`` is log p of ``target_ids[i]`` (host), documents laid end to end
    with ``lengths`` (host) tokens each; p_ref comes from reference-corpus token counts
    (`minkscan.text.frequencies`). Which tokens come first, and their p_ref, are found on
    the host from the ids alone. Repeated tokens count once, as the paper's code does, so a
    repeated rare token cannot dominate. NaN for documents with no scored token.
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    ids = np.asarray(target_ids, dtype=np.int64)
    doc_index = np.repeat(np.arange(lengths.size), lengths)
    _, first = np.unique(doc_index * (int(ids.max(initial=0)) + 1) + ids, return_index=True)
    doc_first, ids_first = doc_index[first], ids[first]
    device = target_logprob.device
    probability = target_logprob.index_select(0, _on(first, device)).to(torch.float64).exp()
    nll = torch.from_numpy(-reference.of(ids_first)).to(device, non_blocking=True)
    terms = torch.clamp(probability * nll, max=clip)
    sums = torch.zeros(lengths.size, dtype=torch.float64, device=device)
    sums.index_add_(0, _on(doc_first, device), terms)
    counts = np.bincount(doc_first, minlength=lengths.size)
    means = sums / _on(np.maximum(counts, 1), device)
    return torch.where(_on(counts, device) > 0, means, float("nan"))
