"""GradNorm (MIMIR's `mimir/attacks/gradnorm.py`): how steep the loss is at a document.

    gradnorm = - mean over the model's parameter tensors of || d loss(x) / d theta ||_p

with loss(x) the mean negative log-likelihood of the document's scored tokens and p = inf
by default, as MIMIR (its runner never overrides it); ``baselines.gradnorm_p`` takes 1 or 2
instead (a deviation). The value is MIMIR's; the reading is not. MIMIR's metrics negate every
score before ranking, so it reads a LARGER gradient as "member". minkscan reads a smaller one
as "member" (training flattens the loss around what the model saw): the value is already
"higher means more likely a member", as every column. The exposure benchmark, where
membership is known, decides between the readings (`benchmarks/results/exposure.md`).

One backward pass per document: a per-parameter norm of a per-document gradient is exact
only if each document's gradient is its own, and one document per backward is that with no
extra memory (per-sample gradients through torch.func would hold one gradient per document
of the batch). The runner holds its own replica in training precision (float32); the stage
that runs it (`minkscan.distributed.stages.GradNormStage`) reports its seconds.
"""

from __future__ import annotations

import math

import polars as pl
import torch

from minkscan.baselines.batch import RunnerBatch
from minkscan.config import BaselinesConfig
from minkscan.methods import method_named
from minkscan.schema import WINDOWED
from minkscan.scorer import DocumentScorer
from minkscan.text.tokenize import EncodedDocument


def gradient_norm(
    scorer: DocumentScorer, document: EncodedDocument, p: float = math.inf
) -> float | None:
    """Minus the mean p-norm of the parameter gradients of the document's mean NLL (None:
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
    norms = [w.grad.detach().norm(p) for w in model.parameters() if w.grad is not None]
    model.zero_grad(set_to_none=True)
    return -float(torch.stack(norms).mean())


def norm_order(setting: int | str) -> float:
    """The p of ``baselines.gradnorm_p`` (1, 2 or "inf")."""
    return math.inf if setting == "inf" else float(setting)


class GradNorm:
    """The `gradnorm` runner, on the GradNorm stage's own replica: one backward pass per
    document (windowed documents get None: no single loss covers them)."""

    def __init__(self, baselines: BaselinesConfig) -> None:
        self.p = norm_order(baselines.gradnorm_p)

    def __call__(self, scorer: DocumentScorer, batch: RunnerBatch) -> pl.DataFrame:
        (column,) = method_named("gradnorm").output_columns
        scores = [
            None if document.status == WINDOWED else gradient_norm(scorer, document, self.p)
            for document in batch.documents
        ]
        return pl.DataFrame({column: scores}, schema={column: pl.Float64})
