"""GradNorm's pass against a plain scoring pass, side by side on the same documents.

GradNorm (`minkscan.baselines.gradnorm`) runs a forward and a backward pass per document on
a float32 replica of the target; the plain pass scores every single-pass method in packed
batches under inference mode. This prints what GradNorm costs in units of the plain pass,
so a user can size the stage (``baselines.gradnorm_num_actors``) before an audit.

    .venv/bin/python benchmarks/bench_gradnorm.py --docs 100

Measured on the bundled SmolLM2-135M (float32, CPU), WikiMIA-24 length-64 member texts.
Each timing is the best of ``--repeats`` after a warm-up.
"""

from __future__ import annotations

import argparse

import polars as pl
import torch
from timing import WIKIMIA64, against_plain, best_of, plain_line


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--model", default="smollm2-135m")
    args = parser.parse_args()

    from minkscan.baselines.batch import RunnerBatch
    from minkscan.baselines.gradnorm import GradNorm
    from minkscan.config import BaselinesConfig, ModelConfig, ScoringConfig
    from minkscan.models.loading import load_model
    from minkscan.scorer import DocumentScorer

    members = pl.read_parquet(WIKIMIA64).filter(pl.col("label") == 1)
    texts = members["text"].head(args.docs).to_list()
    model = ModelConfig(name=args.model, device="cpu", dtype="float32")
    scorer = DocumentScorer(load_model(model), ScoringConfig())
    documents = scorer.encode(texts)
    base_loss = pl.Series(scorer.score_documents(documents)["mean_logprob"], dtype=pl.Float64)
    gradnorm = GradNorm(BaselinesConfig(gradnorm=True))

    plain = best_of(args.repeats, lambda: scorer.score_documents(documents))
    gradient = best_of(args.repeats, lambda: gradnorm(scorer, RunnerBatch(documents, base_loss)))
    tokens = sum(d.n_scored for d in documents)
    threads = torch.get_num_threads()
    print(f"{args.model} float32, {len(documents)} documents ({tokens} scored tokens), "
          f"torch threads {threads}")  # fmt: skip
    print(plain_line(plain))
    print(against_plain("GradNorm pass (forward + backward per doc)", gradient, plain))


if __name__ == "__main__":
    main()
