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


def lowest_k_means(
    values: torch.Tensor, lengths: torch.Tensor, percentages: Sequence[int]
) -> torch.Tensor:
    """Mean of the lowest max(1, floor(P/100 * n)) values of each row, for each P.

    ``values`` is [docs, max_len] float64 with each row's first ``lengths[i]`` entries valid.
    Returns [docs, len(percentages)]; NaN where a document has no valid value.
    """
    n_docs, max_len = values.shape
    positions = torch.arange(max_len, device=values.device)
    valid = positions[None, :] < lengths[:, None]
    padded = torch.where(valid, values, torch.full_like(values, float("inf")))
    sorted_values, _ = padded.sort(dim=1)
    # Zero the padding after sorting so the running sums stay finite.
    cumulative = torch.where(valid, sorted_values, torch.zeros_like(sorted_values)).cumsum(dim=1)
    p = torch.tensor(list(percentages), device=values.device, dtype=torch.long)
    k = torch.clamp((p[None, :] * lengths[:, None]) // 100, min=1)  # integer floor, no float error
    k = torch.minimum(k, lengths[:, None].clamp_min(1))
    if max_len == 0:
        return torch.full((n_docs, len(p)), float("nan"), dtype=values.dtype, device=values.device)
    sums = cumulative.gather(1, k - 1)
    means = sums / k.to(values.dtype)
    return torch.where(lengths[:, None] > 0, means, torch.full_like(means, float("nan")))


def moving_average(
    values: torch.Tensor, lengths: torch.Tensor, window: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Row-wise moving averages over ``window`` valid values ('valid' mode: n - w + 1 of
    them), rows shorter than the window kept as they are. Returns (values, new lengths)."""
    if window <= 1 or values.shape[1] < window:
        return values, lengths
    valid = torch.arange(values.shape[1])[None, :] < lengths[:, None]
    cumulative = torch.nn.functional.pad(torch.where(valid, values, 0.0).cumsum(1), (1, 0))
    averaged = (cumulative[:, window:] - cumulative[:, :-window]) / window
    long_enough = lengths >= window
    width = values.shape[1] - window + 1
    smoothed = torch.where(long_enough[:, None], averaged, values[:, :width])
    smoothed = torch.cat([smoothed, values[:, width:]], dim=1)  # short rows keep their tail
    return smoothed, torch.where(long_enough, lengths - window + 1, lengths)


def document_scores(
    stats: TokenStats,
    lengths: torch.Tensor,
    texts: Sequence[str],
    k_percentages: Sequence[int],
    ablation_k_percentages: Sequence[int],
    gap_window: int = 3,
) -> dict[str, torch.Tensor]:
    """Aggregate flat per-token stats (documents laid end to end) into per-document scores.

    ``lengths[i]`` is the number of scored tokens of document i; ``stats`` vectors have
    ``lengths.sum()`` entries in document order. Returns float64 [docs] tensors keyed by
    `minkscan.methods.single_pass_columns`, NaN for documents with no scored token.
    """
    lengths = lengths.to(torch.long).cpu()
    n_docs = lengths.shape[0]
    max_len = int(lengths.max()) if n_docs else 0
    per_token = {
        "mink": stats.target_logprob,
        "minkpp": stats.minkpp(),
        "minkpp_mu": stats.target_logprob - stats.mean_logprob,
        "minkpp_sigma": safe_divide(stats.target_logprob, stats.std_logprob),
        "gapk": safe_divide(stats.target_logprob - stats.top1_logprob, stats.std_logprob),
    }
    doc_index = torch.repeat_interleave(torch.arange(n_docs), lengths)
    offsets = torch.cumsum(lengths, 0) - lengths
    column_index = torch.arange(int(lengths.sum())) - offsets[doc_index]
    padded: dict[str, torch.Tensor] = {}
    for name, flat in per_token.items():
        grid = torch.zeros(n_docs, max_len, dtype=torch.float64)
        grid[doc_index, column_index] = flat.detach().to(torch.float64).cpu()
        padded[name] = grid

    nan = torch.full((n_docs,), float("nan"), dtype=torch.float64)
    loss = torch.where(lengths > 0, padded["mink"].sum(1) / lengths.clamp_min(1), nan)
    compressed = torch.tensor([max(1, zlib_length(t)) for t in texts], dtype=torch.float64)
    scores = {"loss": loss, "zlib": loss / compressed}
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


def dcpdd_score(
    target_logprob: torch.Tensor,
    target_ids: Sequence[int],
    reference: ReferenceFrequencies,
    clip: float,
) -> float:
    """DC-PDD of one document (higher = member): over the first occurrence of each distinct
    scored token, the mean of min(p(x_t) * -log p_ref(x_t), clip).

    ``target_logprob[i]`` is log p of ``target_ids[i]``; p_ref comes from reference-corpus
    token counts (`minkscan.text.frequencies`). Repeated tokens count once, as the paper's
    code does, so a repeated rare token cannot dominate.
    """
    ids = np.asarray(target_ids, dtype=np.int64)
    if ids.size == 0:
        return float("nan")
    _, first = np.unique(ids, return_index=True)
    first = np.sort(first)
    probability = np.exp(target_logprob.detach().to(torch.float64).cpu().numpy()[first])
    terms = probability * -reference.of(ids[first])
    return float(np.minimum(terms, clip).mean())
