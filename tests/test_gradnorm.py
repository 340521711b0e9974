"""GradNorm: minus the mean parameter-gradient norm of a document's loss, L-infinity by
default as MIMIR's `gradnorm.py` (p = inf, never overridden by its runner), one backward pass
per document (exact against float64 autograd), run in a stage of its own whose seconds the
run reports; off by default."""

from __future__ import annotations

import math

import polars as pl
import pytest
import torch
from helpers import score, scores
from minkscan.baselines.gradnorm import gradient_norm
from minkscan.config import BaselinesConfig, ModelConfig, ScoringConfig
from minkscan.models.loading import load_model
from minkscan.scorer import DocumentScorer
from tiny_models import TRAINING_TEXT


def float64_gradnorm(model: torch.nn.Module, ids: list[int], p: float) -> float:
    """MIMIR's definition, in float64: loss = - mean of log_softmax at ids[1:] (its
    `get_probabilities`), grads by autograd, the mean of each tensor's p-norm, negated."""
    model = model.to(torch.float64)
    sequence = torch.tensor([ids])
    with torch.enable_grad():
        log_probs = model(input_ids=sequence).logits[0, :-1].log_softmax(-1)
        loss = -log_probs.gather(1, sequence[0, 1:, None]).mean()
        params = [w for w in model.parameters() if w.requires_grad]
        grads = torch.autograd.grad(loss, params, allow_unused=True)
    return -torch.stack([g.norm(p) for g in grads if g is not None]).mean().item()


def test_the_default_norm_is_mimirs_l_infinity():
    assert BaselinesConfig().gradnorm_p == "inf"


@pytest.mark.parametrize("p", [math.inf, 2.0, 1.0])
def test_gradnorm_is_the_mean_gradient_norm_of_each_documents_loss(tiny_llama, p):
    scorer = DocumentScorer(tiny_llama, ScoringConfig())
    documents = scorer.encode([TRAINING_TEXT[0], TRAINING_TEXT[1], ""])
    got = [gradient_norm(scorer, document, p) for document in documents]
    try:
        for document, value in zip(documents[:2], got[:2], strict=True):
            expected = float64_gradnorm(tiny_llama.model, list(document.input_ids), p)
            assert value == pytest.approx(expected, rel=1e-4)
    finally:
        tiny_llama.model.to(torch.float32)
    assert got[2] is None and got[0] != got[1]
    # Nothing is left behind: no gradient stays on the model.
    assert all(p.grad is None for p in tiny_llama.model.parameters())


@pytest.mark.slow
def test_gradnorm_is_off_by_default_and_a_stage_of_its_own(tiny_llama_dir, tmp_path, local_ray):
    assert BaselinesConfig().gradnorm is False
    texts = [TRAINING_TEXT[0], TRAINING_TEXT[2], ""]
    pl.DataFrame({"id": ["a", "b", "c"], "text": texts}).write_parquet(tmp_path / "in.parquet")
    code = score(tiny_llama_dir, tmp_path / "in.parquet", tmp_path / "out",
                 "--set", "baselines.gradnorm=true")  # fmt: skip
    assert code == 0
    frame = scores(tmp_path / "out")
    scorer = DocumentScorer(
        load_model(ModelConfig(name=str(tiny_llama_dir), device="cpu", dtype="float32")),
        ScoringConfig(),
    )
    expected = [gradient_norm(scorer, d) for d in scorer.encode(texts)]
    assert frame["gradnorm"].to_list()[:2] == pytest.approx(expected[:2], rel=1e-4)
    assert frame["gradnorm"].to_list()[2] is None
    manifest = (tmp_path / "out" / "_manifest.json").read_text()
    assert '"GradNorm"' in manifest  # its forward passes and seconds are reported
