"""GradNorm (as MIMIR defines it): how steep the loss is at a document.

    gradnorm = - mean over the model's parameter tensors of || d loss(x) / d theta ||_2

with loss(x) the mean negative log-likelihood of the document's scored tokens. Training
flattens the loss around what the model saw, so a member's gradient is smaller: negated,
higher means "more likely a member", as for every column.

One backward pass per document: a per-parameter norm of a per-document gradient is exact
only if each document's gradient is its own, and one document per backward is that with no
extra memory (per-sample gradients through torch.func would hold one gradient per document
of the batch). The runner holds its own replica in training precision (float32); the stage
that runs it (`minkscan.distributed.stages.GradNormStage`) reports its seconds.
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl
import torch

from minkscan.config import BaselinesConfig
from minkscan.methods import method_named
from minkscan.schema import WINDOWED
from minkscan.scorer import DocumentScorer
from minkscan.text.tokenize import EncodedDocument


def gradient_norm(scorer: DocumentScorer, document: EncodedDocument) -> float | None:
    """Minus the mean L2 norm of the parameter gradients of the document's mean NLL (None:
    nothing scored)."""
    if document.n_scored == 0:
        return None
    model = scorer.loaded.model
    ids = torch.tensor([list(document.input_ids)], device=scorer.loaded.device)
    model.zero_grad(set_to_none=True)
    with torch.enable_grad():
        logits = model(input_ids=ids, use_cache=False).logits[0, :-1].float()
        nll = torch.nn.functional.cross_entropy(logits, ids[0, 1:])
        nll.backward()
    norms = [p.grad.detach().norm(2) for p in model.parameters() if p.grad is not None]
    model.zero_grad(set_to_none=True)
    return -float(torch.stack(norms).mean())


class GradNorm:
    """The `gradnorm` runner, on the GradNorm stage's own replica: one backward pass per
    document (windowed documents get None: no single loss covers them)."""

    def __init__(self, baselines: BaselinesConfig) -> None:
        del baselines  # no settings beyond the switch

    def __call__(
        self, scorer: DocumentScorer, documents: Sequence[EncodedDocument], base_loss: pl.Series
    ) -> pl.DataFrame:
        del base_loss  # GradNorm is absolute
        (column,) = method_named("gradnorm").output_columns
        scores = [
            None if document.status == WINDOWED else gradient_norm(scorer, document)
            for document in documents
        ]
        return pl.DataFrame({column: scores}, schema={column: pl.Float64})
