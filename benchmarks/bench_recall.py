"""ReCaLL's extra pass against a plain scoring pass, side by side on the same documents.

The prefix (known non-member texts) is encoded once and its KV cache reused: each document
then costs one forward pass over its own tokens, attending to the cached prefix. Target:
ReCaLL's pass at most 1.3x a plain scoring pass. Also timed, for scale: the naive way (prefix
and document concatenated and run whole, as reference implementations do).

    .venv/bin/python benchmarks/bench_recall.py --docs 200 --shots 12

Measured on the bundled SmolLM2-135M (float32, CPU), WikiMIA-24 length-64 texts: documents
from its members, the prefix from the first non-members. Each timing is the best of
``--repeats`` after a warm-up.
"""

from __future__ import annotations

import argparse

import polars as pl
import torch
from timing import WIKIMIA64, against_plain, best_of, plain_line


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=200)
    parser.add_argument("--shots", type=int, default=12)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--model", default="smollm2-135m")
    args = parser.parse_args()

    from minkscan.baselines.recall import PrefixCache, prefix_ids
    from minkscan.config import ModelConfig, ScoringConfig
    from minkscan.models.loading import load_model
    from minkscan.scorer import DocumentScorer

    data = pl.read_parquet(WIKIMIA64)
    prefix = data.filter(pl.col("label") == 0)["text"].head(args.shots).to_list()
    texts = data.filter(pl.col("label") == 1)["text"].head(args.docs).to_list()
    scorer = DocumentScorer(load_model(ModelConfig(name=args.model, device="cpu")), ScoringConfig())
    documents = scorer.encode(texts)
    cache = PrefixCache(scorer, prefix)

    context = prefix_ids(scorer, prefix)

    @torch.inference_mode()
    def naive() -> None:  # one document at a time, prefix re-encoded, as reference code does
        for document in documents:
            ids = torch.tensor([context + list(document.input_ids)])
            scorer.loaded.model(input_ids=ids).logits[0].float().log_softmax(-1)

    plain = best_of(args.repeats, lambda: scorer.score_documents(documents))
    recall = best_of(args.repeats, lambda: cache.log_likelihoods(documents))
    naive_s = best_of(1, naive)
    tokens = sum(d.n_scored for d in documents)
    threads = torch.get_num_threads()
    print(f"{args.model}, {len(documents)} documents ({tokens} scored tokens), prefix of "
          f"{args.shots} texts ({cache.length} tokens), torch threads {threads}")  # fmt: skip
    print(plain_line(plain))
    print(against_plain("ReCaLL pass, prefix KV-cached", recall, plain, "; target <= 1.3x"))
    print(against_plain("ReCaLL naive (prefix re-run per document)", naive_s, plain))


if __name__ == "__main__":
    main()
