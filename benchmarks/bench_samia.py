"""SaMIA's generation against a plain scoring pass, side by side on the same documents.

SaMIA samples continuations of each document's first half (`minkscan.baselines.samia`);
its cost is generated tokens, not forward passes. Timed with the authors' settings (10
samples, up to 1,024 tokens of prompt and continuation) and with lighter ones, each once
(generation is seeded, so a repeat would time the same work), against the best of
``--repeats`` plain passes.

    .venv/bin/python benchmarks/bench_samia.py --docs 4

Measured on the bundled SmolLM2-135M (float32, CPU), WikiMIA-24 length-64 texts.
"""

from __future__ import annotations

import argparse
import time

import polars as pl
import torch
from timing import WIKIMIA64, against_plain, best_of, plain_line


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--model", default="smollm2-135m")
    args = parser.parse_args()

    from minkscan.baselines.batch import RunnerBatch
    from minkscan.baselines.samia import SaMIA
    from minkscan.config import BaselinesConfig, ModelConfig, ScoringConfig
    from minkscan.models.loading import load_model
    from minkscan.scorer import DocumentScorer

    texts = pl.read_parquet(WIKIMIA64)["text"].head(args.docs).to_list()
    scorer = DocumentScorer(load_model(ModelConfig(name=args.model, device="cpu")), ScoringConfig())
    documents = scorer.encode(texts)
    plain = best_of(args.repeats, lambda: scorer.score_documents(documents))
    tokens = sum(d.n_scored for d in documents)
    print(f"{args.model}, {len(documents)} documents ({tokens} scored tokens), "
          f"torch threads {torch.get_num_threads()}")  # fmt: skip
    print(plain_line(plain))
    for label, samples, length in (("authors' (10 x 1,024)", 10, 1024), ("5 x 128", 5, 128)):
        runner = SaMIA(BaselinesConfig(samia=True, samia_samples=samples, samia_max_length=length))
        batch = RunnerBatch(documents, pl.Series([0.0] * len(documents)))
        start = time.perf_counter()
        frame = runner(scorer, batch)
        seconds = time.perf_counter() - start
        generated = int(frame["samia_generated_tokens"].sum())
        note = f"; {generated} tokens generated, {generated / seconds:.0f} tokens/s"
        print(against_plain(f"SaMIA, {label}", seconds, plain, note))


if __name__ == "__main__":
    main()
