"""Sliding windows: every token after the first is scored exactly once, in order."""

from __future__ import annotations

import pytest
import torch

from pipeline.config import ScoringConfig
from pipeline.evaluation.windowed import score_windowed
from pipeline.scorer import DocumentScorer
from pipeline.scoring.token_stats import TokenStats
from pipeline.scoring.windows import plan_windows, windowed_token_stats
from tests.conftest import TRAINING_TEXT


@pytest.mark.parametrize(("n_tokens", "window", "stride"), [(2, 4, 1), (10, 4, 3), (37, 8, 5)])
def test_windows_predict_each_token_once_with_bounded_context(n_tokens, window, stride) -> None:
    predicted = []
    for part in plan_windows(n_tokens, window, stride):
        assert part.end - part.start <= window
        new = list(range(part.first_new, part.end))
        assert new and all(min(window - stride, t) <= t - part.start <= window - 1 for t in new)
        predicted += new
    assert predicted == list(range(1, n_tokens))


def test_stride_must_leave_context() -> None:
    with pytest.raises(ValueError, match="stride"):
        plan_windows(10, window=4, stride=4)


def test_windowed_stats_keep_only_each_windows_new_positions_in_text_order() -> None:
    ids = list(range(100, 123))

    def stats_of(window_ids):  # "log p" of position j = id of the token it predicts
        targets = torch.tensor(window_ids[1:], dtype=torch.float32)
        return TokenStats(targets, targets * 0, targets * 0 + 1)

    stats = windowed_token_stats(ids, window=6, stride=4, stats_of=stats_of)
    assert stats.target_logprob.tolist() == [float(i) for i in ids[1:]]


@pytest.fixture(scope="module")
def long_text() -> str:
    return " ".join(TRAINING_TEXT * 2)


def test_long_document_is_scored_over_all_tokens_not_truncated(tiny_llama, long_text) -> None:
    scorer = DocumentScorer(tiny_llama, ScoringConfig(max_tokens=32))
    full_length = len(tiny_llama.tokenizer(long_text)["input_ids"])
    frame = score_windowed(scorer, [long_text, ""], stride=16)
    assert frame["n_tokens"].to_list() == [full_length - 1, 0]
    assert frame["n_windows"][0] == len(plan_windows(full_length, 32, 16)) > 1
    assert frame["minkpp_k20"][1] is None


def test_one_window_equals_ordinary_scoring(tiny_llama) -> None:
    text = " ".join(TRAINING_TEXT[:3])
    scorer = DocumentScorer(tiny_llama, ScoringConfig(max_tokens=512))
    windowed = score_windowed(scorer, [text], stride=16)
    ordinary = scorer.score_frame([text])
    assert windowed["n_windows"][0] == 1
    for name in scorer.columns:
        assert windowed[name][0] == pytest.approx(ordinary[name][0], rel=1e-5, abs=1e-6), name
