"""Padding in forward batches, and what packing several documents per row gains.

For two length mixes -- WikiMIA-like (the WikiMIA-24 texts in ../shared/data, tokenised by
the model's tokenizer) and long-tailed (log-normal lengths, median 400 tokens, capped at
``max_tokens``, random token ids) -- prints, per block of ``--block-rows`` documents (what a
scoring actor receives in one call):

* the share of forward-pass positions that are padding, with length-bucketed padded rows
  (one document per row) and with packed rows (`minkscan.text.tokenize.plan_packed_batches`);
* scored tokens per second of `DocumentScorer` on the first block with ``packing`` off and
  on, timed alternately in one run (median of ``--repeats``), and the speed-up.

    python benchmarks/bench_packing.py                          # bundled smollm2-135m on CPU
    python benchmarks/bench_packing.py --mixes long-tailed --block-rows 64
    python benchmarks/bench_packing.py --model gemma3-270m --dtype bfloat16 --device cuda
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np
import polars as pl
import torch
from minkscan.config import ModelConfig, ScoringConfig
from minkscan.models.loading import load_model
from minkscan.scorer import DocumentScorer
from minkscan.text.tokenize import EncodedDocument, plan_batches, plan_packed_batches

DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "wikimia24"


def padding_share(batches: list[list[list[int]]], lengths: list[int]) -> float:
    """Share of a plan's positions (rows x widest row, per batch) that are padding."""
    positions = real = 0
    for rows in batches:
        positions += len(rows) * max(sum(lengths[i] for i in row) for row in rows)
        real += sum(lengths[i] for row in rows for i in row)
    return 1 - real / positions


def mixes(scorer: DocumentScorer, n_docs: int, seed: int) -> dict[str, list[EncodedDocument]]:
    rng = np.random.default_rng(seed)
    texts = [
        text for path in sorted(DATA.glob("*.parquet")) for text in pl.read_parquet(path)["text"]
    ]
    wikimia = [texts[i] for i in rng.permutation(len(texts))[:n_docs]]
    vocab = len(scorer.loaded.tokenizer)
    cap = scorer.scoring.max_tokens
    lengths = np.clip(rng.lognormal(np.log(400), 1.2, n_docs).astype(int), 8, cap)
    long_tailed = [
        EncodedDocument("", tuple(int(t) for t in rng.integers(64, vocab, n)), "ok")
        for n in lengths
    ]
    return {"WikiMIA-like": scorer.encode(wikimia), "long-tailed": long_tailed}


def shares(
    documents: list[EncodedDocument], scoring: ScoringConfig, block: int
) -> tuple[float, float]:
    """Padding share of bucketed and of packed plans, over all blocks (position-weighted)."""
    padded_plan: list[list[list[int]]] = []
    packed_plan: list[list[list[int]]] = []
    lengths = [len(doc.input_ids) for doc in documents]
    for start in range(0, len(lengths), block):
        indices = list(range(start, min(start + block, len(lengths))))
        local = [lengths[i] for i in indices]
        buckets = plan_batches(
            local, batch_tokens=scoring.batch_tokens, max_batch_size=scoring.max_batch_size
        )
        padded_plan += [[[indices[j]] for j in batch] for batch in buckets]
        packed = plan_packed_batches(
            local, batch_tokens=scoring.batch_tokens, max_rows=scoring.max_batch_size
        )
        packed_plan += [[[indices[j] for j in row] for row in rows] for rows in packed]
    return padding_share(padded_plan, lengths), padding_share(packed_plan, lengths)


def tokens_per_second(
    scorers: dict[bool, DocumentScorer], documents: list[EncodedDocument], repeats: int
) -> dict[bool, float]:
    """Scored tokens/s with packing off and on, timed alternately after one warm-up each."""
    n_scored = sum(doc.n_scored for doc in documents)
    times: dict[bool, list[float]] = {False: [], True: []}
    for scorer in scorers.values():
        scorer.score_documents(documents)
    for _ in range(repeats):
        for packing, scorer in scorers.items():
            if scorer.loaded.device.type == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
            scorer.score_documents(documents)
            if scorer.loaded.device.type == "cuda":
                torch.cuda.synchronize()
            times[packing].append(time.perf_counter() - start)
    return {packing: n_scored / statistics.median(t) for packing, t in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    parser.add_argument("--docs", type=int, default=2048, help="documents per mix (padding shares)")
    parser.add_argument("--block-rows", type=int, default=256, help="documents per scoring call")
    parser.add_argument("--mixes", nargs="+", default=["WikiMIA-like", "long-tailed"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=2048)
    parser.add_argument("--out", type=Path, help="also write the table (markdown) here")
    args = parser.parse_args()

    torch.manual_seed(0)
    loaded = load_model(ModelConfig(name=args.model, dtype=args.dtype, device=args.device))
    scorers = {
        packing: DocumentScorer(loaded, ScoringConfig(max_tokens=args.max_tokens, packing=packing))
        for packing in (False, True)
    }
    assert scorers[True].packing, "this model's attention does not keep packed documents apart"
    scoring = scorers[True].scoring
    lines = [
        f"model {args.model} ({args.dtype}, {loaded.device}), torch {torch.__version__}; "
        f"batch_tokens {scoring.batch_tokens}, max_batch_size {scoring.max_batch_size}, "
        f"blocks of {args.block_rows} documents; speed: the first block of each mix, median "
        f"of {args.repeats}",
        "",
        "| mix | documents | median tokens | padding, buckets | padding, packed "
        "| tokens/s, buckets | tokens/s, packed | speed-up |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, documents in mixes(scorers[True], args.docs, seed=0).items():
        if name not in args.mixes:
            continue
        bucketed, packed = shares(documents, scoring, args.block_rows)
        speed = tokens_per_second(scorers, documents[: args.block_rows], args.repeats)
        median = int(np.median([len(doc.input_ids) for doc in documents]))
        lines.append(
            f"| {name} | {len(documents)} | {median} | {100 * bucketed:.1f}% | "
            f"{100 * packed:.1f}% | {speed[False]:.0f} | {speed[True]:.0f} | "
            f"{speed[True] / speed[False]:.2f}x |"
        )
        print(lines[-1], flush=True)
    print("\n".join(lines))
    if args.out:
        args.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
