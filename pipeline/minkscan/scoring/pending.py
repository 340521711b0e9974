"""Launched forward passes turned into per-document columns: every document of a call
aggregated on the device (in groups of like lengths within the token budget) and read back
in one transfer, with the token z-scores when they are kept."""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from minkscan.config import ScoringConfig
from minkscan.methods import Method
from minkscan.schema import N_TOKENS, STATUS, TOKEN_COLUMNS, TOKEN_END, TOKEN_START, TOKEN_Z
from minkscan.scoring.aggregate import Documents, document_scores
from minkscan.scoring.token_stats import TokenStats
from minkscan.scoring.windows import Window
from minkscan.text.frequencies import ReferenceFrequencies
from minkscan.text.tokenize import EncodedDocument


@dataclass(frozen=True)
class Aggregation:
    """What aggregating needs from the scorer: its settings, methods and columns (in
    order), its token budget per group, and DC-PDD's reference frequencies if any."""

    scoring: ScoringConfig
    methods: list[Method]
    columns: list[str]
    batch_tokens: int
    reference: ReferenceFrequencies | None


@dataclass(frozen=True)
class _Read:
    """One call's scores on their way to the host, as one flat float64 array: the
    [documents, columns] matrix first (its ``shape``; documents longest first, ``rows``
    naming each one's document), then the token z-scores when kept (``sorted_lengths`` of
    them, in that order). On a GPU the copy lands in pinned memory behind the work that
    computes it, and ``done`` marks when it has."""

    host: torch.Tensor
    shape: tuple[int, int]
    rows: np.ndarray
    sorted_lengths: np.ndarray
    done: torch.cuda.Event | None

    @classmethod
    def queued(
        cls, values: torch.Tensor, shape: tuple[int, int], rows: np.ndarray,
        sorted_lengths: np.ndarray,
    ) -> _Read:  # fmt: skip
        if values.device.type != "cuda":
            return cls(values.cpu(), shape, rows, sorted_lengths, None)
        host = torch.empty(values.shape, dtype=values.dtype, pin_memory=True)
        host.copy_(values, non_blocking=True)
        done = torch.cuda.Event()
        done.record(torch.cuda.current_stream(values.device))
        return cls(host, shape, rows, sorted_lengths, done)

    def wait(self) -> np.ndarray:
        """The values, once they are on the host (waits for this copy only)."""
        if self.done is not None:
            self.done.synchronize()
        return self.host.numpy()


@dataclass
class PendingScores:
    """The launched forward passes of one `minkscan.scorer.DocumentScorer.submit` call;
    `result` reads them.

    ``launched`` lists the pieces (document windows) in the order their kept predictions
    appear in ``outputs``, the per-batch TokenStats still on the device.
    """

    aggregation: Aggregation
    documents: list[EncodedDocument]
    scorable: list[int]
    pieces: list[tuple[int, Window]]
    launched: list[int]
    outputs: list[TokenStats]
    _read: _Read | None = field(default=None, init=False, repr=False)

    def queue_read(self) -> None:
        """Queue the aggregation of every document and the copy of its scores to the host
        behind this call's forward passes, without waiting for them. A chunk whose read is
        queued before the next chunk's passes are launched is read back while the device
        computes those (`minkscan.scorer.DocumentScorer.score_frame`). Idempotent; `result`
        queues it when nobody has."""
        if self.scorable:
            self._queued_read()

    def _queued_read(self) -> _Read:
        if self._read is not None:
            return self._read
        documents, scorer = self.documents, self.aggregation
        lengths = np.array([documents[i].n_scored for i in self.scorable], dtype=np.int64)
        order = np.argsort(-lengths, kind="stable")  # longest first: groups of like lengths
        stats = self._in_document_order(order)
        sorted_lengths = lengths[order]
        ends = np.concatenate([[0], np.cumsum(sorted_lengths)])  # token offsets
        values, token_z = [], []
        start = 0
        for stop in _groups(sorted_lengths, scorer.batch_tokens):
            group = [documents[self.scorable[i]] for i in order[start:stop]]
            part = stats.slice(int(ends[start]), int(ends[stop]))
            values.append(self._scores(part, sorted_lengths[start:stop], group))
            if scorer.scoring.token_scores:
                token_z.append(part.minkpp().to(torch.float64))
            start = stop
        matrix = torch.cat(values)
        self._read = _Read.queued(
            torch.cat([matrix.flatten(), *token_z]),  # the one transfer
            (matrix.shape[0], matrix.shape[1]),
            np.asarray(self.scorable)[order],
            sorted_lengths,
        )
        return self._read

    def result(self) -> dict[str, list[Any]]:
        """Every document's columns: waits for this call's read (queued now if it was not)
        and nothing queued after it."""
        documents, scorer = self.documents, self.aggregation
        result: dict[str, list[Any]] = {
            N_TOKENS: [doc.n_scored for doc in documents],
            STATUS: [doc.status for doc in documents],
        }
        for name in scorer.columns:
            result[name] = [None] * len(documents)
        if scorer.scoring.token_scores:
            result |= {name: [None] * len(documents) for name in TOKEN_COLUMNS}
        if not self.scorable:
            return result
        read = self._queued_read()
        host = read.wait()
        size = read.shape[0] * read.shape[1]
        scores = np.full((len(documents), read.shape[1]), np.nan)
        scores[read.rows] = host[:size].reshape(read.shape)
        for column, name in enumerate(scorer.columns):
            result[name] = [None if math.isnan(v) else v for v in scores[:, column].tolist()]
        if scorer.scoring.token_scores:
            token_z = np.split(host[size:], np.cumsum(read.sorted_lengths)[:-1])
            for index, z in zip(read.rows.tolist(), token_z, strict=True):
                result[TOKEN_Z][index] = z.astype(np.float32).tolist()
                spans = documents[index].spans[1:]
                if spans:
                    result[TOKEN_START][index] = [start for start, _ in spans]
                    result[TOKEN_END][index] = [end for _, end in spans]
        return result

    def logprobs(self) -> list[np.ndarray | None]:
        """Each document's per-token log p of its scored tokens (float64, in text order;
        None: nothing scored), read back in one transfer. Methods defined on the token
        sequence itself (PAC's polarized distance, WBC's windows) read these."""
        result: list[np.ndarray | None] = [None] * len(self.documents)
        if not self.scorable:
            return result
        order = np.arange(len(self.scorable))
        flat = self._in_document_order(order).target_logprob.double().cpu().numpy()
        lengths = [self.documents[i].n_scored for i in self.scorable]
        parts = np.split(flat, np.cumsum(lengths)[:-1])
        for index, values in zip(self.scorable, parts, strict=True):
            result[index] = values
        return result

    def _in_document_order(self, order: np.ndarray) -> TokenStats:
        """The outputs' kept predictions reordered: documents in ``order`` (positions in
        ``scorable``), each one's windows in text order. One gather on the device."""
        kept = np.array([w.n_predictions - w.first_kept for _, w in self.pieces], dtype=np.int64)
        launched = np.asarray(self.launched, dtype=np.int64)
        offset = np.empty_like(kept)
        offset[launched] = np.cumsum(kept[launched]) - kept[launched]
        # Pieces are listed document by document, windows in text order: a stable sort by
        # their document's rank in ``order`` keeps each one's windows in order.
        document = np.searchsorted(self.scorable, [index for index, _ in self.pieces])
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)
        piece_order = np.argsort(rank[document], kind="stable")
        sizes = kept[piece_order]
        permutation = np.arange(int(sizes.sum())) + np.repeat(
            offset[piece_order] - (np.cumsum(sizes) - sizes), sizes
        )
        flat = TokenStats.cat(self.outputs)
        index = torch.from_numpy(permutation).to(flat.target_logprob.device, non_blocking=True)
        return flat.index_select(index)

    def _scores(
        self, stats: TokenStats, lengths: np.ndarray, group: list[EncodedDocument]
    ) -> torch.Tensor:
        """[documents, columns] float64 scores of one group, on the device."""
        scorer = self.aggregation
        documents = Documents(
            stats,
            lengths,
            [doc.text for doc in group],
            target_ids=(
                None if scorer.reference is None
                else np.concatenate([np.asarray(doc.input_ids[1:]) for doc in group])
            ),
            reference=scorer.reference,
            dcpdd_clip=scorer.scoring.dcpdd_clip,
            aeca_lambda=scorer.scoring.aeca_lambda,
        )  # fmt: skip
        scores = document_scores(documents, scorer.methods, scorer.scoring)
        return torch.stack([scores[name] for name in scorer.columns], dim=1)


def _groups(sorted_lengths: np.ndarray, budget: int) -> Iterator[int]:
    """Ends of contiguous groups of documents (longest first) whose [documents x longest]
    grid stays within ``budget`` positions (at least one document each)."""
    start = 0
    while start < sorted_lengths.size:
        longest = max(int(sorted_lengths[start]), 1)
        stop = min(sorted_lengths.size, start + max(1, budget // longest))
        yield stop
        start = stop
