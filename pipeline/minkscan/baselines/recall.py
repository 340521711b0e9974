"""ReCaLL and Con-ReCall: how much a prefix of known texts changes a document's likelihood.

    recall    = LL(x | P_nonmember) / LL(x)                       (Xie et al. 2024)
    conrecall = (LL(x | P_nonmember) - gamma * LL(x | P_member)) / LL(x)   (Wang et al. 2024)

As the authors' code computes it (ruoyuxie/recall and WangCheng0116/CON-RECALL ``run.py``):
the shots are concatenated with no separator and tokenised as one text with the
tokenizer's special tokens, the document is tokenised on its own the same way, and the
two id sequences are concatenated -- ``[BOS] P [BOS] x`` with a BOS-adding tokenizer
(Gemma, Llama), ``P x`` without (GPT-2, SmolLM2). LL(x | P) is the mean log p of EVERY
document id after the prefix, its first predicted from the prefix's last position; LL(x)
is the main pass's ``loss`` (the mean over the document's ids after its first). Both are
negative; a non-member prefix lowers a member's likelihood more than a non-member's, so
the ratio is larger for members, and a member prefix raises it: higher means "more likely
a member", as for every column. ``baselines.recall_separator`` joins the shots with a
separator instead (a deviation; minkscan joined them with a blank line before 2026-11).

The prefix is encoded once per actor and its KV cache reused for every document: each
batch of documents runs only its own tokens, attending to the cached prefix. Documents
scored with sliding windows get None.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Sequence

import numpy as np
import polars as pl
import torch

from minkscan.baselines.batch import RunnerBatch
from minkscan.config import BaselinesConfig
from minkscan.methods import method_named
from minkscan.models.forward import head_token_stats
from minkscan.schema import WINDOWED
from minkscan.scorer import DocumentScorer
from minkscan.scoring.token_stats import token_stats_from_logits
from minkscan.text.tokenize import EncodedDocument, encode_documents, plan_batches


def prefix_ids(scorer: DocumentScorer, texts: Sequence[str], separator: str = "") -> list[int]:
    """The prefix's ids: the shots joined by ``separator`` and encoded as the scorer encodes
    a document (the tokenizer's special tokens, and BOS with ``prepend_bos``), uncut."""
    (encoded,) = encode_documents(
        scorer.loaded.tokenizer, [separator.join(texts)], max_tokens=scorer.scoring.max_tokens,
        prepend_bos=scorer.scoring.prepend_bos, windowed=True,
    )  # fmt: skip
    return list(encoded.input_ids)


class PrefixCache:
    """One prefix encoded once: its KV cache and last hidden state (or last logits when the
    head is not a plain linear layer), for conditional likelihoods of many documents."""

    @torch.inference_mode()
    def __init__(self, scorer: DocumentScorer, texts: Sequence[str], separator: str = "") -> None:
        self.scorer = scorer
        prefix = prefix_ids(scorer, texts, separator)
        self.length = len(prefix)
        model = scorer.loaded.model
        inputs = torch.tensor([prefix], device=scorer.loaded.device)
        if scorer.head is not None:
            out = model.base_model(input_ids=inputs, use_cache=True)
            self.last = out[0][0, -1:]  # [1, hidden]
        else:
            out = model(input_ids=inputs, use_cache=True)
            self.last = out.logits[0, -1:]  # [1, vocab]
        # transformers renamed ``past_key_values`` to ``cache`` (5.2x); either is read.
        self.cache = out["cache"] if "cache" in out else out["past_key_values"]
        parameters = inspect.signature(model.base_model.forward).parameters
        self.cache_argument = "cache" if "cache" in parameters else "past_key_values"

    @torch.inference_mode()
    def log_likelihoods(self, documents: Sequence[EncodedDocument]) -> list[float | None]:
        """Mean log p of each document's ids after the prefix, all of them (None: a document
        with no unconditional likelihood to compare with, or scored with sliding windows)."""
        scorer = self.scorer
        result: list[float | None] = [None] * len(documents)
        usable = [i for i, d in enumerate(documents) if d.n_scored > 0 and d.status != WINDOWED]
        budget = max(scorer.batch_tokens - self.length, 1)
        for batch in plan_batches(
            [len(documents[i].input_ids) for i in usable], batch_tokens=budget,
            max_batch_size=scorer.max_rows,
        ):  # fmt: skip
            indices = [usable[j] for j in batch]
            means = self._batch([list(documents[i].input_ids) for i in indices])
            for index, mean in zip(indices, means, strict=True):
                result[index] = mean
        return result

    def _batch(self, fed: list[list[int]]) -> list[float]:
        scorer, device = self.scorer, self.scorer.loaded.device
        n, width = len(fed), max(len(ids) for ids in fed)
        ids = torch.full((n, width), scorer.pad_id, dtype=torch.long)
        mask = torch.zeros((n, self.length + width), dtype=torch.long)
        mask[:, : self.length] = 1
        for row, sequence in enumerate(fed):
            ids[row, : len(sequence)] = torch.tensor(sequence)
            mask[row, self.length : self.length + len(sequence)] = 1
        positions = torch.arange(self.length, self.length + width).expand(n, width)
        cache = copy.deepcopy(self.cache)
        cache.batch_repeat_interleave(n)
        inputs = {"input_ids": ids.to(device), "attention_mask": mask.to(device),
                  "position_ids": positions.to(device), self.cache_argument: cache,
                  "use_cache": True}  # fmt: skip
        if scorer.head is not None:
            states = scorer.loaded.model.base_model(**inputs)[0]
        else:
            states = scorer.loaded.model(**inputs).logits
        flat = torch.cat([states.flatten(0, 1), self.last.to(states.dtype)])
        prefix_row = flat.shape[0] - 1
        # Each document's first id is predicted by the prefix's last position, every later
        # one by the document's previous position.
        rows = [
            index
            for row, sequence in enumerate(fed)
            for index in [prefix_row, *(row * width + t for t in range(len(sequence) - 1))]
        ]
        index = torch.tensor(rows, device=flat.device)
        target = torch.tensor([token for sequence in fed for token in sequence], device=flat.device)
        if scorer.head is not None:
            stats = head_token_stats(scorer.head, flat.index_select(0, index), target, scorer.tiles)
        else:
            stats = token_stats_from_logits(
                flat.index_select(0, index).float(), target,
                row_chunk=scorer.tiles.row_chunk, vocab_chunk=scorer.tiles.vocab_chunk,
            )  # fmt: skip
        logprob = stats.target_logprob.double().cpu().numpy()
        counts = [len(sequence) for sequence in fed]
        return [float(part.mean()) for part in np.split(logprob, np.cumsum(counts)[:-1])]


def _ratio(numerator: Sequence[float | None], base_loss: pl.Series) -> list[float | None]:
    return [
        None if value is None or base is None or base == 0 else value / base
        for value, base in zip(numerator, base_loss.to_list(), strict=True)
    ]


class ReCaLL:
    """The `recall` runner: on the target model's actors, holding the non-member prefix's
    cache (built on the first batch, from that actor's model)."""

    def __init__(self, baselines: BaselinesConfig) -> None:
        self.baselines = baselines
        self.prefix: PrefixCache | None = None

    def conditional(
        self, scorer: DocumentScorer, documents: Sequence[EncodedDocument]
    ) -> list[float | None]:
        """LL(x | P_nonmember) of each document."""
        if self.prefix is None:
            self.prefix = PrefixCache(
                scorer, self.baselines.recall_prefix, self.baselines.recall_separator
            )
        return self.prefix.log_likelihoods(documents)

    def __call__(self, scorer: DocumentScorer, batch: RunnerBatch) -> pl.DataFrame:
        (column,) = method_named("recall").output_columns
        scores = _ratio(self.conditional(scorer, batch.documents), batch.base_loss)
        return pl.DataFrame({column: scores}, schema={column: pl.Float64})


class ConReCaLL(ReCaLL):
    """The `conrecall` runner: both prefixes' caches on the target model's actors."""

    def __init__(self, baselines: BaselinesConfig) -> None:
        super().__init__(baselines)
        self.member_prefix: PrefixCache | None = None

    def __call__(self, scorer: DocumentScorer, batch: RunnerBatch) -> pl.DataFrame:
        documents = batch.documents
        if self.member_prefix is None:
            self.member_prefix = PrefixCache(
                scorer, self.baselines.conrecall_member_prefix, self.baselines.recall_separator
            )
        nonmember = self.conditional(scorer, documents)
        member = self.member_prefix.log_likelihoods(documents)
        gamma = self.baselines.conrecall_gamma
        contrast = [
            None if n is None or m is None else n - gamma * m
            for n, m in zip(nonmember, member, strict=True)
        ]
        (column,) = method_named("conrecall").output_columns
        scores = _ratio(contrast, batch.base_loss)
        return pl.DataFrame({column: scores}, schema={column: pl.Float64})
