"""A deliberately naive float64 reference of every single-pass score, written from the papers'
definitions (Min-K%++: Zhang et al. 2025; Gap-K%: arXiv 2601.19936, window 3 by default).

One document at a time, full log-softmax over the vocabulary, no batching, no chunking: the
shape of the authors' reference code. Tests compare the fused, batched scorer against it.
"""

from __future__ import annotations

import zlib

import numpy as np
import torch
from minkscan.models.loading import LoadedModel


def naive_token_scores(loaded: LoadedModel, input_ids: list[int]) -> dict[str, torch.Tensor]:
    """Per scored token (every token after the first): log p, mu, sigma and the log p of the
    most likely token, in float64."""
    ids = torch.tensor([input_ids], device=loaded.device)
    with torch.no_grad():
        logits = loaded.model(input_ids=ids).logits[0, :-1].to(torch.float64)
    log_probs = torch.log_softmax(logits, dim=-1)
    probs = log_probs.exp()
    target = log_probs.gather(1, ids[0, 1:, None].cpu()).squeeze(1)
    mu = (probs * log_probs).sum(-1)
    sigma = ((probs * (log_probs - mu[:, None]) ** 2).sum(-1)).sqrt()
    top1 = log_probs.gather(1, logits.argmax(-1, keepdim=True)).squeeze(1)
    return {"logprob": target, "mu": mu, "sigma": sigma, "top1": top1}


def _lowest_mean(values: torch.Tensor, percent: int) -> float:
    k = max(1, percent * len(values) // 100)  # floor(P/100 * n), exactly
    return float(torch.sort(values).values[:k].mean())


def naive_document_scores(
    loaded: LoadedModel, text: str, input_ids: list[int], percentages: list[int]
) -> dict[str, float]:
    """Every single-pass score of one document, computed from scratch."""
    return naive_scores_of_tokens(naive_token_scores(loaded, input_ids), text, percentages)


def _gap_k(gap: torch.Tensor, percent: int, window: int) -> float:
    """Gap-K%: moving average over ``window`` tokens ('valid' convolution; unsmoothed when
    the document is shorter than the window), then the mean of its lowest k%."""
    values = gap.numpy()
    if values.size >= window:
        values = np.convolve(values, np.ones(window) / window, mode="valid")
    k = max(1, percent * values.size // 100)
    return float(np.sort(values)[:k].mean())


def naive_scores_of_tokens(
    token: dict[str, torch.Tensor], text: str, percentages: list[int], gap_window: int = 3
) -> dict[str, float]:
    """Every single-pass score of one document from its per-token log p, mu, sigma, top-1."""
    logprob, mu, sigma = token["logprob"], token["mu"], token["sigma"]
    loss = float(logprob.mean())
    scores = {"mean_logprob": loss, "zlib": loss / len(zlib.compress(text.encode("utf-8")))}
    for p in percentages:
        scores[f"mink_k{p}"] = _lowest_mean(logprob, p)
        scores[f"minkpp_k{p}"] = _lowest_mean((logprob - mu) / sigma, p)
        scores[f"minkpp_mu_k{p}"] = _lowest_mean(logprob - mu, p)
        scores[f"minkpp_sigma_k{p}"] = _lowest_mean(logprob / sigma, p)
        scores[f"gapk_k{p}"] = _gap_k((logprob - token["top1"]) / sigma, p, gap_window)
    return scores
