"""The host's work overlaps the device's: a call's read-back is queued behind its own forward
passes, and the host waits for one chunk only after launching the next."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from minkscan import scorer as scorer_module
from minkscan.config import ScoringConfig
from minkscan.models.loading import LoadedModel
from minkscan.scoring.pending import PendingScores, _Read
from polars.testing import assert_frame_equal


def test_score_frame_reads_each_chunk_back_while_the_next_one_is_queued(
    tiny_llama: LoadedModel, monkeypatch
) -> None:
    """Stream order on a GPU is launch order: a chunk's aggregation and read-back are queued
    right behind its own forward passes, before the next chunk's, and the host waits for a
    chunk only after the next one is launched, so tokenising and reading back overlap the
    device. The chunked scores equal one call over all texts (to float32 rounding: the
    batches differ)."""
    scorer = scorer_module.DocumentScorer(tiny_llama, ScoringConfig())
    texts = [f"Text number {i} has {'some ' * (i % 5)}words in it." for i in range(10)]
    whole = scorer.score_frame(texts)
    monkeypatch.setattr(scorer_module, "FRAME_CHUNK", 4)
    events: list[str] = []
    chunks: dict[int, int] = {}

    def chunk_of(pending: PendingScores) -> int:
        return chunks.setdefault(id(pending), len(chunks))

    real_submit, real_queue, real_result = (
        scorer.submit, PendingScores._queued_read, PendingScores.result
    )  # fmt: skip

    def submit(documents):
        events.append(f"launch {len(chunks)}")
        pending = real_submit(documents)
        chunk_of(pending)
        return pending

    def queued_read(pending):
        if pending._read is None:
            events.append(f"queue read {chunk_of(pending)}")
        return real_queue(pending)

    def result(pending):
        events.append(f"wait {chunk_of(pending)}")
        return real_result(pending)

    monkeypatch.setattr(scorer, "submit", submit)
    monkeypatch.setattr(PendingScores, "_queued_read", queued_read)
    monkeypatch.setattr(PendingScores, "result", result)
    chunked = scorer.score_frame(texts)
    assert events == [
        "launch 0", "queue read 0",
        "launch 1", "queue read 1", "wait 0",
        "launch 2", "queue read 2", "wait 1",
        "wait 2",
    ]  # fmt: skip
    assert_frame_equal(chunked, whole, rel_tol=1e-5, abs_tol=1e-6)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_read_on_a_gpu_lands_in_pinned_memory_and_waits_for_its_own_copy() -> None:
    values = torch.arange(6, dtype=torch.float64, device="cuda")
    read = _Read.queued(values, (2, 3), np.array([1, 0]), np.array([3, 3]))
    assert read.host.is_pinned() and read.done is not None
    assert read.wait().tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
