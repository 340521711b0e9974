"""Models larger than one GPU: one replica split over the GPUs an actor is given."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from accelerate import dispatch_model
from minkscan.config import ConfigError, ModelConfig, ScoringConfig, build_config
from minkscan.errors import UserError
from minkscan.models import loading
from minkscan.models.loading import load_model
from minkscan.scorer import DocumentScorer
from tiny_models import build_tiny_model

TEXTS = ["The quick brown fox jumps over the lazy dog.", "Ray Data streams Parquet shards."]


def fake_gpus(monkeypatch: pytest.MonkeyPatch, count: int) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: count > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)


def test_a_replica_over_two_gpus_is_loaded_split_over_both(
    tiny_llama_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_gpus(monkeypatch, 2)
    asked: dict[str, object] = {}
    from_pretrained = loading.AutoModelForCausalLM.from_pretrained

    def record(source: object, **kwargs: object) -> object:
        asked["device_map"] = kwargs.pop("device_map")
        return from_pretrained(source, **kwargs)  # there are no GPUs to place it on here

    monkeypatch.setattr(loading.AutoModelForCausalLM, "from_pretrained", record)
    # dtype given: with 'auto' the loader would ask the (fake) GPUs whether they run bf16
    load_model(ModelConfig(name=str(tiny_llama_dir), dtype="float32"), gpus=2)
    assert asked["device_map"] == "balanced"
    load_model(ModelConfig(name=str(tiny_llama_dir), device="cpu"), gpus=1)
    assert asked["device_map"] is None


def test_a_replica_over_more_gpus_than_visible_fails_in_one_line(
    tiny_llama_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_gpus(monkeypatch, 1)
    with pytest.raises(UserError, match="one replica over 2 GPUs, but this process sees 1"):
        load_model(ModelConfig(name=str(tiny_llama_dir)), gpus=2)
    with pytest.raises(UserError, match="not 'cpu'"):
        load_model(ModelConfig(name=str(tiny_llama_dir), device="cpu"), gpus=2)


@pytest.mark.parametrize("key", ["ray.gpus_per_actor", "baselines.reference_gpus_per_actor"])
def test_more_than_one_gpu_per_actor_must_be_whole(key: str) -> None:
    assert build_config(overrides={key: 0.5}) and build_config(overrides={key: 4})
    with pytest.raises(ConfigError, match=f"'{key}'.*whole number, got 1.5"):
        build_config(overrides={key: 1.5})


@pytest.mark.parametrize("head", ["fused", "logits"])
def test_a_replica_split_layer_by_layer_scores_like_one_in_a_piece(head: str) -> None:
    whole = build_tiny_model("llama")
    split = build_tiny_model("llama")
    # A multi-device map faked on CPU: every module behind accelerate's device hooks, as a
    # replica over several GPUs runs.
    modules = ["model.embed_tokens", "model.layers.0", "model.layers.1", "model.norm"]
    device_map = dict.fromkeys([*modules, "model.rotary_emb", "lm_head"], "cpu")
    dispatch_model(split.model, device_map=device_map, force_hooks=True)
    assert hasattr(split.model.model.layers[0], "_hf_hook")
    expected = DocumentScorer(whole, ScoringConfig(head=head)).score_frame(TEXTS)
    frame = DocumentScorer(split, ScoringConfig(head=head)).score_frame(TEXTS)
    for column in expected.columns:
        if expected[column].dtype.is_float():
            assert frame[column].to_list() == pytest.approx(expected[column].to_list(), abs=1e-5)
