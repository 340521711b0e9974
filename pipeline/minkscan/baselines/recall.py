"""ReCaLL and Con-ReCall: how much a prefix of known texts changes a document's likelihood.

    recall    = LL(x | P_nonmember) / LL(x)                       (Xie et al. 2024)
    conrecall = (LL(x | P_nonmember) - gamma * LL(x | P_member)) / LL(x)   (Wang et al. 2024)

LL is the mean log-likelihood of the document's scored tokens (the main pass's ``loss``
column; negative). A non-member prefix lowers a member's likelihood more than a
non-member's, so the ratio is larger for members, and a member prefix raises it: higher
means "more likely a member", as for every column.

The prefix -- a few texts joined by blank lines -- is encoded once per actor and its KV
cache reused for every document: each batch of documents runs only its own tokens,
attending to the cached prefix, and the document's first token is predicted from the
prefix's last hidden state. The conditioned targets are exactly the unconditioned ones
(``input_ids[1:]``), so the two likelihoods compare the same tokens. Documents scored with
sliding windows get None.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Sequence

import numpy as np
import polars as pl
import torch

from minkscan.config import BaselinesConfig
from minkscan.methods import method_named
from minkscan.models.forward import head_token_stats
from minkscan.schema import WINDOWED
from minkscan.scorer import DocumentScorer
from minkscan.scoring.token_stats import token_stats_from_logits
from minkscan.text.tokenize import EncodedDocument, plan_batches

# Prefix texts are joined by this, as the papers' prompts are.
PREFIX_JOIN = "\n\n"


class PrefixCache:
    """One prefix encoded once: its KV cache and last hidden state (or last logits when the
    head is not a plain linear layer), for conditional likelihoods of many documents."""

    @torch.inference_mode()
    def __init__(self, scorer: DocumentScorer, texts: Sequence[str]) -> None:
        self.scorer = scorer
        ids = scorer.loaded.tokenizer(PREFIX_JOIN.join(texts), add_special_tokens=False)
        bos = scorer.loaded.tokenizer.bos_token_id
        prefix = ([bos] if scorer.scoring.prepend_bos and bos is not None else []) + list(
            ids["input_ids"]
        )
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
        """Mean log p of each document's ``input_ids[1:]`` after the prefix (None: nothing
        scored, or scored with sliding windows)."""
        scorer = self.scorer
        result: list[float | None] = [None] * len(documents)
        usable = [i for i, d in enumerate(documents) if d.n_scored > 0 and d.status != WINDOWED]
        # Fed after the prefix: the document without its own BOS (the prefix has one).
        fed = {i: self._fed(documents[i]) for i in usable}
        budget = max(scorer.batch_tokens - self.length, 1)
        for batch in plan_batches(
            [len(fed[i]) for i in usable], batch_tokens=budget, max_batch_size=scorer.max_rows
        ):
            indices = [usable[j] for j in batch]
            means = self._batch([fed[i] for i in indices], [documents[i] for i in indices])
            for index, mean in zip(indices, means, strict=True):
                result[index] = mean
        return result

    def _fed(self, document: EncodedDocument) -> list[int]:
        ids = list(document.input_ids)
        bos = self.scorer.loaded.tokenizer.bos_token_id
        starts_with_bos = self.scorer.scoring.prepend_bos and bos is not None and ids[0] == bos
        return ids[1:] if starts_with_bos else ids

    def _batch(self, fed: list[list[int]], documents: list[EncodedDocument]) -> list[float]:
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
        # Which row predicts each target: the prefix's last for a document's first fed token
        # when the document's own BOS was dropped, else the previous fed position.
        rows, targets, counts = [], [], []
        for row, (sequence, document) in enumerate(zip(fed, documents, strict=True)):
            first = len(sequence) - document.n_scored  # 0: its first fed token is a target
            rows += ([prefix_row] if first == 0 else []) + [
                row * width + t - 1 for t in range(max(first, 1), len(sequence))
            ]
            targets += sequence[first:]
            counts.append(document.n_scored)
        index = torch.tensor(rows, device=flat.device)
        target = torch.tensor(targets, device=flat.device)
        if scorer.head is not None:
            stats = head_token_stats(scorer.head, flat.index_select(0, index), target, scorer.tiles)
        else:
            stats = token_stats_from_logits(
                flat.index_select(0, index).float(), target,
                row_chunk=scorer.tiles.row_chunk, vocab_chunk=scorer.tiles.vocab_chunk,
            )  # fmt: skip
        logprob = stats.target_logprob.double().cpu().numpy()
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
            self.prefix = PrefixCache(scorer, self.baselines.recall_prefix)
        return self.prefix.log_likelihoods(documents)

    def __call__(
        self, scorer: DocumentScorer, documents: Sequence[EncodedDocument], base_loss: pl.Series
    ) -> pl.DataFrame:
        (column,) = method_named("recall").output_columns
        scores = _ratio(self.conditional(scorer, documents), base_loss)
        return pl.DataFrame({column: scores}, schema={column: pl.Float64})


class ConReCaLL(ReCaLL):
    """The `conrecall` runner: both prefixes' caches on the target model's actors."""

    def __init__(self, baselines: BaselinesConfig) -> None:
        super().__init__(baselines)
        self.member_prefix: PrefixCache | None = None

    def __call__(
        self, scorer: DocumentScorer, documents: Sequence[EncodedDocument], base_loss: pl.Series
    ) -> pl.DataFrame:
        if self.member_prefix is None:
            self.member_prefix = PrefixCache(scorer, self.baselines.conrecall_member_prefix)
        nonmember = self.conditional(scorer, documents)
        member = self.member_prefix.log_likelihoods(documents)
        gamma = self.baselines.conrecall_gamma
        contrast = [
            None if n is None or m is None else n - gamma * m
            for n, m in zip(nonmember, member, strict=True)
        ]
        (column,) = method_named("conrecall").output_columns
        return pl.DataFrame({column: _ratio(contrast, base_loss)}, schema={column: pl.Float64})
