"""What an extra-pass runner receives for one batch: the batch's documents (encoded by the
runner's model), the main pass's ``loss`` column, the target model's per-token log p when a
method asks for it, and the forward passes already launched over these documents, so that
runners reading the same pass (the main pass for PAC; the reference pass for Ref and WBC)
run it once."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

from minkscan.methods import LOSS
from minkscan.text.tokenize import EncodedDocument

if TYPE_CHECKING:
    from minkscan.scorer import DocumentScorer
    from minkscan.scoring.pending import PendingScores


@dataclass
class RunnerBatch:
    """One batch as the extra-pass runners see it.

    ``passes`` maps a scorer (by identity) to its launched pass over ``documents``: the
    scoring stage seeds it with the main pass; `scores` and `logprobs` launch a pass only
    when none is there, and read each one back once.
    """

    documents: Sequence[EncodedDocument]
    base_loss: pl.Series
    target_logprobs: Sequence[np.ndarray | None] | None = None
    passes: dict[int, PendingScores] = field(default_factory=dict)
    _read: dict[tuple[int, str], Any] = field(default_factory=dict)

    @classmethod
    def on_main_pass(
        cls, documents: Sequence[EncodedDocument], scorer: DocumentScorer
    ) -> RunnerBatch:
        """The batch as the scoring stage has it: ``scorer``'s (main) pass run over the
        documents, its ``loss`` column the base loss, the pass kept for runners to read."""
        pending = scorer.submit(documents)
        columns = pending.result()
        batch = cls(documents, pl.Series(columns[LOSS], dtype=pl.Float64))
        batch.passes[id(scorer)] = pending
        batch._read[(id(scorer), "columns")] = columns
        return batch

    def _pending(self, scorer: DocumentScorer) -> PendingScores:
        key = id(scorer)
        if key not in self.passes:
            self.passes[key] = scorer.submit(self.documents)
        return self.passes[key]

    def scores(self, scorer: DocumentScorer) -> dict[str, list[Any]]:
        """``scorer``'s columns over the documents (`DocumentScorer.score_documents`)."""
        key = (id(scorer), "columns")
        if key not in self._read:
            self._read[key] = self._pending(scorer).result()
        return self._read[key]

    def logprobs(self, scorer: DocumentScorer) -> list[np.ndarray | None]:
        """``scorer``'s per-token log p of each document (`PendingScores.logprobs`)."""
        key = (id(scorer), "logprobs")
        if key not in self._read:
            self._read[key] = self._pending(scorer).logprobs()
        return self._read[key]
