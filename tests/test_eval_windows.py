"""Sliding windows: every token after the first is scored exactly once, in order, and the
windows of all documents are batched by the ordinary scorer."""

from __future__ import annotations

import pytest
import torch
from minkscan.config import ScoringConfig
from minkscan.models.forward import TokenBatch
from minkscan.scorer import DocumentScorer, score_texts
from minkscan.scoring.windows import plan_windows
from naive_reference import naive_scores_of_tokens, naive_token_scores
from tiny_models import TRAINING_TEXT

LONG_TEXTS = [" ".join(TRAINING_TEXT[:3]), " ".join(TRAINING_TEXT[3:])]  # ~150 tokens each
SHORT_TEXTS = [TRAINING_TEXT[0], "", "lazy dog"]  # 32 (= max_tokens), 0 and 7 tokens
WINDOWED = {"max_tokens": 32, "window_stride": 12, "k_percentages": [20, 50]}


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
    with pytest.raises(ValueError, match="window_stride"):
        ScoringConfig(max_tokens=8, window_stride=8)


@pytest.mark.parametrize("packed", [True, False])
def test_each_windows_kept_predictions_stitch_to_every_token_in_text_order(packed) -> None:
    ids = list(range(100, 123))
    segments = [(ids[w.start : w.end], w.first_kept) for w in plan_windows(len(ids), 6, 4)]
    cpu = torch.device("cpu")
    batch = (
        TokenBatch.packed([segments[:2], segments[2:]], cpu) if packed
        else TokenBatch.padded(segments, 0, "right", cpu)
    )  # fmt: skip
    # Each kept prediction's target is the next token of its window, in text order overall,
    # and the position it is read from holds the token before it.
    assert batch.targets.tolist() == ids[1:]
    assert batch.input_ids.flatten()[batch.keep].tolist() == ids[:-1]


def naive_windowed_scores(loaded, text: str, input_ids, max_tokens: int, stride: int) -> dict:
    """Float64 reference: one unbatched full-softmax pass per window, new tokens kept."""
    kept: dict[str, list[torch.Tensor]] = {"logprob": [], "mu": [], "sigma": [], "top1": []}
    for window in plan_windows(len(input_ids), max_tokens, stride):
        token = naive_token_scores(loaded, list(input_ids[window.start : window.end]))
        for name, values in token.items():
            kept[name].append(values[window.first_kept :])
    token = {name: torch.cat(parts) for name, parts in kept.items()}
    return naive_scores_of_tokens(token, text, WINDOWED["k_percentages"])


def test_windowed_documents_match_a_float64_per_window_reference(tiny_llama) -> None:
    # A small token budget spreads one document's windows over several mixed batches.
    scorer = DocumentScorer(tiny_llama, ScoringConfig(**WINDOWED, batch_tokens=80))
    texts = [LONG_TEXTS[0], SHORT_TEXTS[1], LONG_TEXTS[1], SHORT_TEXTS[0]]
    documents = scorer.encode(texts)
    scores = scorer.score_documents(documents)
    full_lengths = [len(tiny_llama.tokenizer(text)["input_ids"]) for text in LONG_TEXTS]
    assert scores["status"] == ["windowed", "empty", "windowed", "ok"]
    assert scores["n_tokens"][0] == full_lengths[0] - 1 and full_lengths[0] > 3 * 32
    assert scores["n_tokens"][2] == full_lengths[1] - 1
    assert all(scores[name][1] is None for name in scorer.columns)
    for index in (0, 2):
        document = documents[index]
        expected = naive_windowed_scores(tiny_llama, document.text, document.input_ids, 32, 12)
        for name in scorer.columns:
            assert scores[name][index] == pytest.approx(expected[name], rel=1e-5, abs=1e-6), name


def test_short_documents_score_the_same_with_or_without_window_stride(tiny_llama) -> None:
    plain = score_texts(SHORT_TEXTS, tiny_llama, max_tokens=32, k_percentages=[20, 50])
    windowed = score_texts(SHORT_TEXTS + LONG_TEXTS[:1], tiny_llama, **WINDOWED)
    truncated = score_texts(LONG_TEXTS[:1], tiny_llama, max_tokens=32, k_percentages=[20, 50])
    assert windowed["status"].to_list() == ["ok", "empty", "ok", "windowed"]
    assert truncated["status"].to_list() == ["truncated"] and truncated["n_tokens"][0] == 31
    for name in plain.columns:
        expected = plain[name].to_list()
        if plain[name].dtype.is_float():  # same numbers up to float32 rounding
            expected = [None if v is None else pytest.approx(v, abs=1e-6) for v in expected]
        assert windowed[name].to_list()[:3] == expected, name
