"""Padding in forward batches, and what packing several documents per row gains.

For two length mixes of random token ids -- WikiMIA-like (smollm2's token lengths of the
WikiMIA-24 texts, `data/wikimia24_lengths.json`) and long-tailed (log-normal lengths, median
400 tokens, capped at ``max_tokens``) -- prints, per block of ``--block-rows`` documents (what
a scoring actor receives in one call):

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
import json
import statistics
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from minkscan.config import ModelConfig, ScoringConfig
from minkscan.models.loading import LoadedModel, load_model
from minkscan.scorer import DocumentScorer
from minkscan.text.tokenize import EncodedDocument, plan_batches, plan_packed_batches

LENGTHS = Path(__file__).resolve().parent / "data" / "wikimia24_lengths.json"


def padding_share(batches: list[list[list[int]]], lengths: list[int]) -> float:
    """Share of a plan's positions (rows x widest row, per batch) that are padding."""
    positions = real = 0
    for rows in batches:
        positions += len(rows) * max(sum(lengths[i] for i in row) for row in rows)
        real += sum(lengths[i] for row in rows for i in row)
    return 1 - real / positions


def mixes(vocab: int, n_docs: int, cap: int, seed: int) -> dict[str, list[EncodedDocument]]:
    """Random token ids (the model's cost does not depend on them) in two length mixes:
    WikiMIA-like (smollm2's token lengths of the WikiMIA-24 texts, resampled) and
    long-tailed (log-normal, median 400, capped at ``cap``)."""
    rng = np.random.default_rng(seed)
    wikimia = np.array(json.loads(LENGTHS.read_text())["lengths"])
    lengths = {
        "WikiMIA-like": np.minimum(rng.choice(wikimia, n_docs), cap),
        "long-tailed": np.clip(rng.lognormal(np.log(400), 1.2, n_docs).astype(int), 8, cap),
    }
    return {
        name: [
            EncodedDocument("", tuple(int(t) for t in rng.integers(64, vocab, n)), "ok") for n in ns
        ]
        for name, ns in lengths.items()
    }


def shares(
    documents: list[EncodedDocument], scorer: DocumentScorer, block: int
) -> tuple[float, float]:
    """Padding share of bucketed and of packed plans, over all blocks (position-weighted),
    under ``scorer``'s token budget and row cap."""
    padded_plan: list[list[list[int]]] = []
    packed_plan: list[list[list[int]]] = []
    lengths = [len(doc.input_ids) for doc in documents]
    for start in range(0, len(lengths), block):
        indices = list(range(start, min(start + block, len(lengths))))
        local = [lengths[i] for i in indices]
        buckets = plan_batches(
            local, batch_tokens=scorer.batch_tokens, max_batch_size=scorer.max_rows
        )
        padded_plan += [[[indices[j]] for j in batch] for batch in buckets]
        packed = plan_packed_batches(
            local, batch_tokens=scorer.batch_tokens, max_rows=scorer.max_rows
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


def compare(
    loaded: LoadedModel,
    *,
    docs: int,
    block_rows: int,
    repeats: int,
    max_tokens: int,
    names: Sequence[str] = ("WikiMIA-like", "long-tailed"),
) -> list[dict[str, object]]:
    """Per mix: padding shares over all blocks and tokens/s on the first, packing off and on."""
    scorers = {
        packing: DocumentScorer(loaded, ScoringConfig(max_tokens=max_tokens, packing=packing))
        for packing in (False, True)
    }
    if not scorers[True].packing:
        raise RuntimeError("this model's attention does not keep packed documents apart")
    vocab = loaded.model.get_input_embeddings().weight.shape[0]
    rows = []
    for name, documents in mixes(vocab, docs, max_tokens, seed=0).items():
        if name not in names:
            continue
        bucketed, packed = shares(documents, scorers[True], block_rows)
        speed = tokens_per_second(scorers, documents[:block_rows], repeats)
        rows.append(
            {
                "mix": name,
                "documents": len(documents),
                "median_tokens": int(np.median([len(doc.input_ids) for doc in documents])),
                "block_rows": block_rows,
                "padding_buckets": bucketed,
                "padding_packed": packed,
                "tokens_per_s_buckets": speed[False],
                "tokens_per_s_packed": speed[True],
                "speed_up": speed[True] / speed[False],
            }
        )
        print(table(rows[-1:])[-1], flush=True)
    return rows


def table(rows: Sequence[dict[str, object]]) -> list[str]:
    """Markdown lines of `compare`'s rows."""
    lines = [
        "| mix | documents | median tokens | block rows | padding, buckets | padding, packed "
        "| tokens/s, buckets | tokens/s, packed | speed-up |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['mix']} | {r['documents']} | {r['median_tokens']} | {r['block_rows']} | "
            f"{100 * r['padding_buckets']:.1f}% | {100 * r['padding_packed']:.1f}% | "
            f"{r['tokens_per_s_buckets']:.0f} | {r['tokens_per_s_packed']:.0f} | "
            f"{r['speed_up']:.2f}x |"
        )
    return lines


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
    args = parser.parse_args()
    torch.manual_seed(0)
    loaded = load_model(ModelConfig(name=args.model, dtype=args.dtype, device=args.device))
    print(
        f"model {args.model} ({args.dtype}, {loaded.device}), torch {torch.__version__}; "
        f"blocks of {args.block_rows} documents; speed: the first block, median of {args.repeats}"
    )
    rows = compare(
        loaded,
        docs=args.docs,
        block_rows=args.block_rows,
        repeats=args.repeats,
        max_tokens=args.max_tokens,
        names=args.mixes,
    )
    print("\n".join(table(rows)))


if __name__ == "__main__":
    main()
