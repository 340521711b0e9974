"""A compiled model body: fed a few fixed shapes, each compiled once, the same scores as
eager, and dropped where it disagrees with eager or does not pay (Inductor is replaced by
Dynamo's fast `aot_eager` backend here: the machinery is the same, the compile is quick)."""

from __future__ import annotations

import pytest
from minkscan.config import ScoringConfig
from minkscan.models import compiled
from minkscan.models.compiled import Body, compile_pays
from minkscan.scorer import DocumentScorer
from tiny_models import TRAINING_TEXT, build_tiny_model

TEXTS = [" ".join(TRAINING_TEXT[: 1 + i % 6]) + f" {i}" for i in range(40)]


@pytest.fixture
def quick_compile(monkeypatch):
    monkeypatch.setattr(compiled, "BACKEND", "aot_eager")
    monkeypatch.setattr(compiled, "REQUIRED_SPEEDUP", 0.0)  # keep it however fast it is


def shapes_seen(monkeypatch) -> list[tuple[int, int]]:
    seen: list[tuple[int, int]] = []
    call = Body.__call__

    def recording(self, inputs):
        if self.active:
            seen.append(tuple(inputs["input_ids"].shape))
        return call(self, inputs)

    monkeypatch.setattr(Body, "__call__", recording)
    return seen


@pytest.mark.usefixtures("quick_compile")
def test_a_compiled_body_sees_a_few_fixed_shapes_and_scores_as_eager(monkeypatch):
    loaded = build_tiny_model("gemma3")
    eager = DocumentScorer(loaded, ScoringConfig(compile=False, batch_tokens=512))
    expected = eager.score_frame(TEXTS)
    scorer = DocumentScorer(loaded, ScoringConfig(compile=True, batch_tokens=512))
    seen = shapes_seen(monkeypatch)
    result = scorer.score_frame(TEXTS)

    assert scorer.body.active
    assert len(seen) > len(set(seen)) >= 1  # several batches, few shapes
    for rows, width in set(seen):
        assert width & (width - 1) == 0 and rows == 512 // width  # power of two, full batch
    for column in ("loss", "minkpp_k20", "gapk_k20"):
        assert (result[column] - expected[column]).abs().max() < 1e-5, column


@pytest.mark.usefixtures("quick_compile")
def test_a_compiled_body_that_disagrees_with_eager_is_dropped_with_a_warning(monkeypatch):
    loaded = build_tiny_model("llama")
    expected = DocumentScorer(loaded, ScoringConfig(compile=False)).score_frame(TEXTS)
    real = compiled.torch.compile

    def off(module, **options):
        body = real(module, **options)
        return lambda **inputs: (body(**inputs)[0] + 1.0,)

    monkeypatch.setattr(compiled.torch, "compile", off)
    scorer = DocumentScorer(loaded, ScoringConfig(compile=True))
    with pytest.warns(RuntimeWarning, match="compiled model body disagrees with the eager one"):
        result = scorer.score_frame(TEXTS)
    assert not scorer.body.active
    assert (result["minkpp_k20"] - expected["minkpp_k20"]).abs().max() < 1e-5


def test_a_compiled_body_that_is_not_faster_is_dropped(monkeypatch, caplog):
    monkeypatch.setattr(compiled, "BACKEND", "aot_eager")
    monkeypatch.setattr(compiled, "REQUIRED_SPEEDUP", 1e9)  # nothing is that much faster
    scorer = DocumentScorer(build_tiny_model("llama"), ScoringConfig(compile=True))
    with caplog.at_level("INFO", logger="minkscan.models.compiled"):
        scorer.score_frame(TEXTS)
    assert not scorer.body.active and "not faster" in caplog.text


def test_auto_compiles_only_on_cuda_and_only_when_the_work_pays_for_it():
    scorer = DocumentScorer(build_tiny_model("llama"), ScoringConfig(), expected_tokens=10**12)
    assert scorer.scoring.compile == "auto" and not scorer.body.active  # a CPU model
    # 30 s per shape against a 15% gain: 2 shapes pay for themselves after 400 s of work.
    assert not compile_pays(expected_tokens=10**6, eager_tokens_per_second=10**4, shapes=2)
    assert compile_pays(expected_tokens=10**7, eager_tokens_per_second=10**4, shapes=2)
