"""What a scorer holds: the model between batches, a bounded workspace during one, nothing
after it is dropped (no autograd graph or probe batch outlives a call)."""

from __future__ import annotations

import gc
import weakref

import pytest
import torch
from memory import PeakMemory
from minkscan.config import ScoringConfig
from minkscan.scorer import DocumentScorer, score_texts
from tiny_models import TRAINING_TEXT, build_tiny_model


def live_tensor_bytes() -> int:
    """Bytes of every tensor the garbage collector can reach."""
    gc.collect()
    return sum(
        obj.untyped_storage().nbytes() for obj in gc.get_objects() if isinstance(obj, torch.Tensor)
    )


def test_dropping_the_scorer_and_the_model_leaves_no_live_reference() -> None:
    loaded = build_tiny_model("llama")
    scorer = DocumentScorer(loaded, ScoringConfig())
    scorer.score_frame(TRAINING_TEXT)
    model = weakref.ref(loaded.model)
    del scorer, loaded
    gc.collect()
    assert model() is None


def test_repeated_calls_do_not_grow_the_live_tensors() -> None:
    loaded = build_tiny_model("gemma3")
    score_texts(TRAINING_TEXT, loaded)  # first call: lazy one-off state (kernels, caches)
    before = live_tensor_bytes()
    for _ in range(3):
        score_texts(TRAINING_TEXT * 3, loaded)
    assert live_tensor_bytes() == before


def extra_peak_bytes(scorer: DocumentScorer, texts: list[str]) -> int:
    """Peak bytes allocated while scoring ``texts`` (the model's weights exist before)."""
    documents = scorer.encode(texts)
    with PeakMemory() as memory:
        scorer.score_documents(documents)
    return memory.peak


@pytest.mark.parametrize(
    ("head", "packing", "max_tokens"),
    [("fused", True, 256), ("fused", False, 128), ("logits", True, 256), ("fused", True, 1024)],
)
@pytest.mark.slow
def test_one_batch_needs_no_more_than_the_stated_workspace(
    smollm2, head, packing, max_tokens
) -> None:
    """`DocumentScorer.workspace_bytes` (the bound `minkscan.models.workspace` states) holds
    the peak of one whole batch on the real SmolLM2, and is not loose by more than 4x."""
    scoring = ScoringConfig(head=head, packing=packing, max_tokens=max_tokens, batch_tokens=2048)
    scorer = DocumentScorer(smollm2, scoring)
    texts = [" ".join(TRAINING_TEXT * 8)] * (4096 // max_tokens + 1)  # 2-3 full batches
    lengths = [len(doc.input_ids) for doc in scorer.encode(texts)]
    assert len(scorer._plan_rows(lengths)) > 1  # several full batches
    bound = scorer.workspace_bytes()
    measured = extra_peak_bytes(scorer, texts)
    print(f"{head} packing={packing} max_tokens={max_tokens}: {measured / bound:.2f} of the bound")
    assert bound / 4 < measured <= bound, (measured, bound)
