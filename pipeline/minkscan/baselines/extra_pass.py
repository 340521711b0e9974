"""Baselines that need extra forward passes per document on top of the main scoring.

All compare against the main pass's ``loss`` column (mean log p, higher = member):

    lowercase = loss(text) - loss(text.lower())          same model, lowercased text
    ref       = loss_target(text) - loss_reference(text)  each model on its OWN tokenizer
    neighbor  = loss(text) - mean_i loss(neighbour_i)     N token-replaced neighbours

so, like every score here, higher means "more likely a member". Each has a runner class
(`Lowercase`, `Ref`, `Neighbor`) that the registry (`minkscan.methods`) names; the model
stages build it once per actor and call it per batch with a `RunnerBatch`: the batch's
documents, already encoded by that actor's tokenizer (the scoring actor's own, so the
target-model runners do not tokenise again), and the main pass's loss. Column names come
from the registry.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl
import torch
from transformers import (
    AutoModelForMaskedLM,
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from minkscan.baselines.batch import RunnerBatch
from minkscan.config import BaselinesConfig
from minkscan.methods import LOSS, method_named, neighbor_source
from minkscan.schema import N_TOKENS
from minkscan.scorer import DocumentScorer
from minkscan.text.tokenize import EncodedDocument


def _difference(base_loss: pl.Series, other: dict[str, list[Any]], key: str) -> pl.DataFrame:
    """Method ``key``'s columns: the base loss minus ``other``'s, then the tokens behind it."""
    score, n_tokens = method_named(key).output_columns
    loss = pl.Series(other[LOSS], dtype=pl.Float64)
    return pl.DataFrame(
        {score: base_loss - loss, n_tokens: other[N_TOKENS]},
        schema={score: pl.Float64, n_tokens: pl.Int64},
    )


def lowercase_scores(
    scorer: DocumentScorer, documents: Sequence[EncodedDocument], base_loss: pl.Series
) -> pl.DataFrame:
    """Columns ``lowercase`` and ``lowercase_n_tokens`` (tokens of the lowercased text, which
    is encoded here: its ids are not the document's)."""
    lowered = scorer.encode([document.text.lower() for document in documents])
    return _difference(base_loss, scorer.score_documents(lowered), "lowercase")


def reference_scores(
    reference: DocumentScorer, documents: Sequence[EncodedDocument], base_loss: pl.Series
) -> pl.DataFrame:
    """Columns ``ref`` and ``ref_n_tokens``; ``documents`` are encoded by the reference
    model's own tokenizer."""
    return _difference(base_loss, reference.score_documents(documents), "ref")


@torch.inference_mode()
def propose_replacements(scorer: DocumentScorer, input_ids: Sequence[int]) -> list[int]:
    """For every position t >= 1, the causal LM's top token given ids[:t], other than ids[t].

    One forward pass over the original document (one per window when the scorer scores it
    with sliding windows). Position 0 (no prefix) keeps its token.
    """
    proposals = [int(input_ids[0])]
    for window in scorer.windows(len(input_ids)):
        window_ids = list(input_ids[window.start : window.end])
        ids = torch.tensor([window_ids], device=scorer.loaded.device)
        logits = scorer.loaded.model(input_ids=ids).logits[0, :-1].float()
        logits = logits[:, : len(scorer.loaded.tokenizer)]  # never propose a padded-vocab id
        logits.scatter_(1, ids[0, 1:, None], float("-inf"))
        proposals += logits[window.first_kept :].argmax(dim=1).tolist()
    return proposals


def make_neighbours(
    document: EncodedDocument,
    proposals: Sequence[int],
    n_neighbors: int,
    fraction: float,
    rng: np.random.Generator,
) -> list[tuple[int, ...]]:
    """``n_neighbors`` copies of the ids, each with ``fraction`` of positions >= 1 replaced.

    At least one position is replaced; the length never changes.
    """
    ids = document.input_ids
    n_replace = max(1, round(fraction * (len(ids) - 1)))
    neighbours = []
    for _ in range(n_neighbors):
        perturbed = list(ids)
        for position in rng.choice(np.arange(1, len(ids)), size=n_replace, replace=False):
            perturbed[position] = proposals[position]
        neighbours.append(tuple(perturbed))
    return neighbours


@dataclass(frozen=True)
class MaskedLM:
    """A masked LM that proposes neighbour words, with the name it was loaded under."""

    name: str
    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase


def load_masked_lm(name: str) -> MaskedLM:
    """Load a Hugging Face masked LM (hub id or local directory) in eval mode."""
    model = AutoModelForMaskedLM.from_pretrained(name).eval()
    return MaskedLM(name, model, AutoTokenizer.from_pretrained(name))


@torch.inference_mode()
def masked_lm_neighbour(
    masked_lm: MaskedLM, text: str, fraction: float, rng: np.random.Generator
) -> str:
    """``text`` with ``fraction`` of its (non-special) MLM tokens masked in one pass and each
    replaced by the masked LM's top token other than the original and the special tokens."""
    tokenizer = masked_lm.tokenizer
    encoded = tokenizer(text, truncation=True, return_special_tokens_mask=True)
    ids = list(encoded["input_ids"])
    candidates = [i for i, special in enumerate(encoded["special_tokens_mask"]) if not special]
    if not candidates:
        return text
    positions = rng.choice(
        candidates, size=max(1, round(fraction * len(candidates))), replace=False
    )
    masked_ids = list(ids)
    for position in positions:
        masked_ids[position] = tokenizer.mask_token_id
    logits = masked_lm.model(input_ids=torch.tensor([masked_ids])).logits[0, positions].float()
    logits = logits[:, : len(tokenizer)]
    logits[:, tokenizer.all_special_ids] = float("-inf")
    logits[torch.arange(len(positions)), [ids[p] for p in positions]] = float("-inf")
    for position, token in zip(positions, logits.argmax(dim=1).tolist(), strict=True):
        ids[position] = token
    return tokenizer.decode(ids, skip_special_tokens=True)


def document_rng(seed: int, text: str) -> np.random.Generator:
    """The random stream of one document's neighbours, from the seed and the text alone, so a
    document's Neighbor score does not depend on which other documents share its batch."""
    return np.random.default_rng([seed, zlib.crc32(text.encode("utf-8"))])


def neighbor_scores(
    scorer: DocumentScorer,
    documents: Sequence[EncodedDocument],
    base_loss: pl.Series,
    n_neighbors: int = 5,
    fraction: float = 0.15,
    seed: int = 0,
    masked_lm: MaskedLM | None = None,
) -> pl.DataFrame:
    """Columns ``neighbor`` and ``neighbor_source``: the Neighbor baseline (Mattern et al.).

    With ``masked_lm``, each neighbour is the text with ``fraction`` of its words re-proposed
    by the masked LM (``n_neighbors`` MLM passes + ``n_neighbors`` scoring passes). Without,
    the scorer's own causal LM proposes, at randomly chosen positions, its top-ranked token
    other than the original (1 proposal pass + ``n_neighbors`` scoring passes). Positions
    are drawn from `document_rng`. Documents with no scored token, or any unscorable
    neighbour, get None.
    """
    if n_neighbors < 1 or not 0 < fraction <= 1:
        raise ValueError("need n_neighbors >= 1 and 0 < fraction <= 1")
    owners: list[int] = []
    neighbours: list[EncodedDocument] = []
    for index, document in enumerate(documents):
        if document.n_scored == 0:
            continue
        rng = document_rng(seed, document.text)
        if masked_lm is not None:
            perturbed = [
                masked_lm_neighbour(masked_lm, document.text, fraction, rng)
                for _ in range(n_neighbors)
            ]
            neighbours.extend(scorer.encode(perturbed))
        else:
            proposals = propose_replacements(scorer, document.input_ids)
            for ids in make_neighbours(document, proposals, n_neighbors, fraction, rng):
                text = scorer.loaded.tokenizer.decode(ids, skip_special_tokens=True)
                neighbours.append(EncodedDocument(text, ids, document.status))
        owners.extend([index] * n_neighbors)
    losses: list[list[float]] = [[] for _ in documents]
    for owner, loss in zip(owners, scorer.score_documents(neighbours)[LOSS], strict=True):
        losses[owner].append(loss)
    scores = [
        base - float(np.mean(own)) if own and base is not None and None not in own else None
        for base, own in zip(base_loss.to_list(), losses, strict=True)
    ]
    source = neighbor_source(scorer.loaded.name, None if masked_lm is None else masked_lm.name)
    score, source_column = method_named("neighbor").output_columns
    return pl.DataFrame(
        {score: scores, source_column: [source] * len(documents)},
        schema={score: pl.Float64, source_column: pl.Utf8},
    )


class Lowercase:
    """The `lowercase` runner: on the target model's actors, nothing to hold."""

    def __init__(self, baselines: BaselinesConfig) -> None:
        del baselines  # no settings

    def __call__(self, scorer: DocumentScorer, batch: RunnerBatch) -> pl.DataFrame:
        return lowercase_scores(scorer, batch.documents, batch.base_loss)


class Neighbor:
    """The `neighbor` runner: on the target model's actors, holding the masked LM if any."""

    def __init__(self, baselines: BaselinesConfig) -> None:
        self.baselines = baselines
        name = baselines.neighbor_model
        self.masked_lm = None if name is None else load_masked_lm(name)

    def __call__(self, scorer: DocumentScorer, batch: RunnerBatch) -> pl.DataFrame:
        baselines = self.baselines
        return neighbor_scores(
            scorer, batch.documents, batch.base_loss, n_neighbors=baselines.neighbors,
            fraction=baselines.neighbor_fraction, seed=baselines.neighbor_seed,
            masked_lm=self.masked_lm,
        )  # fmt: skip


class Ref:
    """The `ref` runner: on the reference model's actors (their scorer is the reference's;
    its pass over the batch is the one WBC reads too)."""

    def __init__(self, baselines: BaselinesConfig) -> None:
        del baselines  # the reference model is the actor's

    def __call__(self, scorer: DocumentScorer, batch: RunnerBatch) -> pl.DataFrame:
        return _difference(batch.base_loss, batch.scores(scorer), "ref")
