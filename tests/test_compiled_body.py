"""A compiled model body: fed a few fixed shapes, each compiled once, the same scores as
eager; judged against eager float32 with eager's own error as the yardstick, dropped where
it is less right or not faster, and each decision remembered for the next run (Inductor is
replaced by Dynamo's fast `aot_eager` backend here: the machinery is the same, the compile
is quick)."""

from __future__ import annotations

import pytest
import torch
from minkscan.config import ScoringConfig
from minkscan.models import compiled
from minkscan.models.compiled import ERROR_FACTOR, Body, as_right_as_eager, compile_pays
from minkscan.models.forward import TokenBatch
from minkscan.models.probe_cache import probe_cache
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
    for column in ("mean_logprob", "minkpp_k20", "gapk_k20"):
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
    with pytest.warns(RuntimeWarning, match="compiled model body is less right than the eager one"):
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


def bfloat16_llama():
    loaded = build_tiny_model("llama")
    loaded.model.to(torch.bfloat16)
    return loaded


def batch_of(loaded, rows: int = 4, width: int = 128) -> dict[str, torch.Tensor]:
    ids = [[(7 * r + 3 * t) % 250 + 5 for t in range(width)] for r in range(rows)]
    return TokenBatch.padded([(row, 0) for row in ids], 0, "right", loaded.device).model_inputs()


def test_the_yardstick_is_eager_error_against_float32_times_a_stated_factor():
    assert as_right_as_eager(compiled_error=0.010, eager_error=0.006)
    assert not as_right_as_eager(compiled_error=ERROR_FACTOR * 0.006 + 1e-3, eager_error=0.006)
    assert as_right_as_eager(compiled_error=5e-5, eager_error=0.0)  # a float32 model's floor


@pytest.mark.usefixtures("quick_compile")
def test_a_half_precision_body_as_right_as_eager_is_kept_and_the_model_keeps_its_dtype(
    tmp_path,
):
    loaded = bfloat16_llama()
    cache = probe_cache(loaded.model, tmp_path)
    body = Body(loaded.model, True, cache=cache)
    with torch.inference_mode():
        body(batch_of(loaded))
    decision = cache.get("compiled_body:aot_eager:4x128")
    assert body.active and decision["keep"] and decision["right"]
    assert 0 < decision["eager_error"] < 0.05  # bf16 rounding, measured against float32
    assert decision["compiled_error"] <= ERROR_FACTOR * decision["eager_error"]
    assert {p.dtype for p in loaded.model.parameters()} == {torch.bfloat16}
    assert all(not p.is_inference() for p in loaded.model.parameters())


@pytest.mark.usefixtures("quick_compile")
def test_a_body_within_the_old_fixed_gap_but_less_right_than_eager_is_dropped(monkeypatch):
    loaded = bfloat16_llama()
    real = compiled.torch.compile

    def off(module, **options):  # 2% of each hidden state's scale: under the old 3% gap
        body = real(module, **options)

        def run(**inputs):
            hidden = body(**inputs)[0]
            return (hidden + 0.02 * hidden.abs().amax(dim=-1, keepdim=True).flip(0),)

        return run

    monkeypatch.setattr(compiled.torch, "compile", off)
    body = Body(loaded.model, True)
    with pytest.warns(RuntimeWarning, match="less right than the eager one .* against float32"):
        with torch.inference_mode():
            body(batch_of(loaded))
    assert not body.active


@pytest.mark.usefixtures("quick_compile")
def test_a_second_run_reuses_each_shapes_decision_without_checking_it_again(monkeypatch, tmp_path):
    loaded = bfloat16_llama()
    cache = probe_cache(loaded.model, tmp_path)
    with torch.inference_mode():
        Body(loaded.model, True, cache=cache)(batch_of(loaded))
    checks = []
    monkeypatch.setattr(Body, "_float32_hidden", lambda self, inputs: checks.append(1))
    monkeypatch.setattr(Body, "_timed", lambda self, *args: checks.append(1))
    again = Body(loaded.model, True, cache=cache)
    with torch.inference_mode():
        hidden = again(batch_of(loaded))
    assert again.active and not checks and hidden.shape == (4, 128, 32)

    cache.put("compiled_body:aot_eager:4x128", {"keep": False})
    compiles = []
    monkeypatch.setattr(compiled.torch, "compile", lambda *a, **k: compiles.append(1))
    dropped = Body(loaded.model, True, cache=cache)
    with torch.inference_mode():
        dropped(batch_of(loaded))
    assert not dropped.active and not compiles


def test_room_for_a_float32_copy_is_checked_on_every_gpu_for_the_weights_it_holds(monkeypatch):
    """A model placed across GPUs: the second GPU, full, holds half the weights."""
    from types import SimpleNamespace

    def weight(index: int) -> SimpleNamespace:  # 2**20 bfloat16 weights on cuda:index
        return SimpleNamespace(device=torch.device("cuda", index), numel=lambda: 2**20,
                               element_size=lambda: 2)  # fmt: skip

    model = SimpleNamespace(parameters=lambda: iter([weight(0), weight(1)]))
    free = {0: 2**40, 1: 2**40}
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device: (free[device.index], 2**40))
    assert compiled._room_for_float32(model)
    free[1] = 2**20  # less than the 2 MiB more its half needs in float32
    assert not compiled._room_for_float32(model)


def test_the_probe_decisions_of_a_fine_tuned_copy_are_its_own(tmp_path):
    """Same name and configuration, weights moved by a training step: another decisions file;
    the same weights built again: the same file."""
    first, again = build_tiny_model("llama"), build_tiny_model("llama")
    assert probe_cache(first.model, tmp_path).path == probe_cache(again.model, tmp_path).path
    with torch.no_grad():
        for parameter in again.model.parameters():
            parameter.add_(1e-3)
    assert probe_cache(first.model, tmp_path).path != probe_cache(again.model, tmp_path).path
