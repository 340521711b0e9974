"""Evidence for the audits that distribution shift cannot fool: the order test, its
exchangeability check, and dataset inference, with exposure planted on the bundled model.

Order test (`minkscan.evaluation.order_run`, scored in-process by the same scorer):
- exposure: a copy of the model fine-tuned on a benchmark-like file (``--examples`` texts in
  a seeded "published" order, one per line) as ONE text stream cut into contiguous blocks,
  the way pre-training sees a file: the test, scoring the raw lines as the authors do (each
  tokenised on its own), must reach p < 0.01;
- control: a copy fine-tuned on the same examples as shuffled single documents (membership
  without order): the test should find nothing;
- null: the base model on ``--null-runs`` seeded random "published" orders of texts it never
  saw fine-tuned: at most 2 of 20 may fall below 0.05;
- files sorted by topic (k-means on TF-IDF), by source (WikiMIA-24's 2024 events after its
  pre-2017 ones) and by length: the exchangeability check must fire; the base model's order
  test on them shows what it guards against.

Every row prints the preference (nats per shard) the run could have detected with 80% power.

Dataset inference (`minkscan.evaluation.dataset_inference`, on every single-pass score):
- exposure: members of a copy fine-tuned for one epoch (lr 2e-5, batch 8, as
  benchmarks/bench_exposure.py) against held-out texts, 200 per side: p < 0.01;
- null: 40 seeded random halves of 400 texts the copy never saw: at most 3 of 40 below 0.05.

    .venv/bin/python benchmarks/bench_audit.py --out audit-out
"""

from __future__ import annotations

import argparse
import random
import time
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import torch
from bench_exposure import fine_tune
from minkscan.config import ModelConfig, ScoringConfig
from minkscan.evaluation.dataset_inference import dataset_inference
from minkscan.evaluation.exchangeability import exchangeability_check
from minkscan.evaluation.order_examples import LINES, PART_SEPARATOR
from minkscan.evaluation.order_run import log_likelihoods, orderings_table
from minkscan.evaluation.order_shards import shard_bounds
from minkscan.evaluation.order_test import OrderSettings, order_statistics
from minkscan.methods import single_pass_columns
from minkscan.models.loading import load_model
from minkscan.scorer import DocumentScorer
from timing import REPO

WIKIMIA = REPO.parent / "shared" / "data" / "wikimia24"


def fine_tune_stream(name: str, text: str, directory: Path, lr: float, epochs: int,
                     block: int) -> None:  # fmt: skip
    """``epochs`` passes of causal-LM training over ``text`` as one token stream cut into
    contiguous ``block``-token pieces (fp32, CPU); saved to ``directory``."""
    loaded = load_model(ModelConfig(name=name, device="cpu"))
    model, tokenizer = loaded.model, loaded.tokenizer
    ids = torch.tensor(tokenizer(text)["input_ids"])
    blocks = [ids[i : i + block] for i in range(0, len(ids) - 1, block)]
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    start = time.perf_counter()
    for epoch in range(epochs):
        losses = []
        for piece in blocks:
            loss = model(input_ids=piece[None], labels=piece[None]).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            losses.append(loss.item())
        print(f"epoch {epoch} loss {np.mean(losses):.3f} {time.perf_counter() - start:.0f}s",
              flush=True)  # fmt: skip
    model.eval()
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)


def scorer(name: str | Path) -> DocumentScorer:
    """One scorer per model (its start-up probes run once), windows and examples as the
    order test's (each example tokenised on its own)."""
    loaded = load_model(ModelConfig(name=str(name), device="cpu"))
    scoring = ScoringConfig(max_tokens=2048, window_stride=1024, part_separator=PART_SEPARATOR)
    return DocumentScorer(loaded, scoring)


def lines(texts: list[str]) -> list[str]:
    """Texts as the raw lines of a file (each ends with a newline), as the order test reads
    a JSON lines or text benchmark by default."""
    return [text + "\n" for text in texts]


def check(examples: list[str], shards: int):
    """The exchangeability check as the order test runs it (lexical, and position against
    length within shards)."""
    return exchangeability_check(examples, bounds=shard_bounds(len(examples), shards))


def order_test(model: DocumentScorer, examples: list[str], shards: int, permutations: int,
               seed: int):  # fmt: skip
    """The order test's statistics, scored in-process (same scorer as the pipeline)."""
    settings = OrderSettings(LINES, None, None, "\n", shards, permutations, seed)
    table = orderings_table(examples, settings)
    scores = model.score_frame(table["text"].to_pylist())
    joined = pa.Table.from_pydict(
        {name: table[name] for name in ("shard", "order")} | scores.to_arrow().to_pydict()
    )
    return order_statistics(*log_likelihoods(joined, shards, permutations))


def order_row(label: str, stats, check) -> str:
    fired = (
        "random"
        if check.exchangeable
        else "fires: "
        + ", ".join(
            (["lexical"] if not check.lexically_random else []) + [f.name for f in check.sorted_by]
        )
    )
    return (f"| {label} | {stats.shards} x {stats.permutations} | {stats.mean_difference:+.2f} "
            f"| {stats.t_p_value:.2g} | {stats.permutation_p_value:.2g} | "
            f"{stats.detectable(0.05):.3g} | {check.p_value:.2g} ({fired}) |")  # fmt: skip


def sorted_by_topic(texts: list[str], seed: int) -> list[str]:
    """``texts`` grouped by k-means cluster of their TF-IDF vectors (a topic-sorted file)."""
    from sklearn.cluster import KMeans
    from sklearn.feature_extraction.text import TfidfVectorizer

    vectors = TfidfVectorizer(sublinear_tf=True, stop_words="english").fit_transform(texts)
    labels = KMeans(8, n_init=4, random_state=seed).fit_predict(vectors)
    return [texts[i] for i in np.argsort(labels, kind="stable")]


def order_part(args, texts: list[str], by_label: dict[int, list[str]]) -> list[str]:
    """The exposed file and its control (``exposure`` in --parts), then the base model's
    nulls (``null``; runs --null-first to --null-runs, so that runs can be split between
    processes) and sorted files (``sorted``)."""
    rng = random.Random(args.seed)
    published = lines(rng.sample(texts, args.examples))  # a seeded "published" file
    chosen = set(published)
    rest = [t for t in lines(texts) if t not in chosen]
    rows = exposure_rows(args, published) if "exposure" in args.parts else []
    if "null" in args.parts:
        rows += null_rows(args, rest)
    if "sorted" in args.parts:
        rows += sorted_rows(args, published, by_label)
    return rows


def exposure_rows(args, published: list[str]) -> list[str]:
    stream = args.out / "order-stream"
    if not (stream / "config.json").exists():
        fine_tune_stream(args.model, "".join(published), stream, args.order_lr,
                         args.order_epochs, 512)  # fmt: skip
    singles = args.out / "order-singles"
    if not (singles / "config.json").exists():
        # The control: the same examples as single documents, reshuffled every epoch.
        fine_tune(args.model, published, singles, args.order_lr, 8, epochs=args.order_epochs,
                  reshuffle=True)  # fmt: skip
    rows = []
    published_check = check(published, args.shards)
    for label, model in (
        ("exposed: fine-tuned on the file as one stream", stream),
        ("control: fine-tuned on shuffled single examples", singles),
    ):
        stats = order_test(scorer(model), published, args.shards, args.permutations, args.seed)
        rows.append(order_row(label, stats, published_check))
        print(rows[-1], flush=True)
    return rows


def null_rows(args, rest: list[str]) -> list[str]:
    """The base model on seeded random "published" orders of unseen text."""
    base = scorer(args.model)
    null_rows, detectable, below = [], [], 0
    runs = range(args.null_first, args.null_runs)
    for run in runs:
        sample = random.Random(1000 + run).sample(rest, args.null_examples)
        stats = order_test(base, sample, args.null_shards, args.null_permutations, run)
        below += stats.t_p_value < 0.05
        null_rows.append(stats.t_p_value)
        detectable.append(stats.detectable(0.05))
        print(f"null run {run}: t p = {stats.t_p_value:.3f}, permutation p = "
              f"{stats.permutation_p_value:.3f}, detectable {detectable[-1]:.3g}",
              flush=True)  # fmt: skip
    checks = [check(random.Random(2000 + r).sample(rest, args.null_examples), args.null_shards)
              for r in runs]  # fmt: skip
    fired = sum(not c.exchangeable for c in checks)
    return [f"| null: base model, runs {runs.start}-{runs.stop - 1}: random orders of unseen "
            f"text | {args.null_shards} x {args.null_permutations} | - | {below} of "
            f"{len(runs)} below 0.05 (median {np.median(null_rows):.2g}) | - | "
            f"median {np.median(detectable):.3g} | fired on {fired} of {len(runs)} |"]  # fmt: skip


def sorted_rows(args, published: list[str], by_label: dict[int, list[str]]) -> list[str]:
    """The base model on files sorted by topic, by source and by length."""
    base = scorer(args.model)
    rows = []
    sorted_files = {
        "sorted by topic (k-means on TF-IDF)": sorted_by_topic(published, args.seed),
        "sorted by source (2024 events, then pre-2017)": lines(
            by_label[0][: args.null_examples // 2] + by_label[1][: args.null_examples // 2]
        ),
        "sorted by length": sorted(published, key=len),
    }
    for label, examples in sorted_files.items():
        stats = order_test(base, examples, args.null_shards, args.null_permutations, args.seed)
        rows.append(order_row(f"base model, file {label}", stats,
                              check(examples, args.null_shards)))  # fmt: skip
        print(rows[-1], flush=True)
    return rows


def features(model: DocumentScorer, texts: list[str]) -> tuple[np.ndarray, list[str]]:
    frame = model.score_frame(texts)
    columns = single_pass_columns(ScoringConfig())
    return frame.select(columns).to_numpy(), columns


def inference_part(args) -> list[str]:
    texts = list(dict.fromkeys(pl.read_parquet(WIKIMIA / "length64.parquet")["text"].to_list()))
    random.Random(args.seed).shuffle(texts)
    members, heldout, unseen = texts[:200], texts[200:400], texts[400:600]
    tuned = args.out / "di-fine-tuned"
    if not (tuned / "config.json").exists():
        fine_tune(args.model, members, tuned, 2e-5, 8)
    model = scorer(tuned)
    member_x, columns = features(model, members)
    held_x, _ = features(model, heldout)
    unseen_x, _ = features(model, unseen)
    exposed = dataset_inference(member_x, held_x, columns, group="members")
    rows = [
        f"| exposed: 200 members vs 200 held out (fine-tuned copy) | "
        f"{exposed.median_p:.2g} [{exposed.spread[0]:.2g}, {exposed.spread[1]:.2g}] | - |"
    ]
    pool = np.concatenate([held_x, unseen_x])
    below = []
    for run in range(40):
        order = np.random.default_rng(3000 + run).permutation(len(pool))
        half = len(pool) // 2
        result = dataset_inference(pool[order[:half]], pool[order[half:]], columns, seed=run)
        below.append(result.median_p)
    rows.append(f"| null: 40 random halves of 400 unseen texts (fine-tuned copy) | median of "
                f"runs {np.median(below):.2g} | {sum(p < 0.05 for p in below)} of 40 below "
                f"0.05 |")  # fmt: skip
    print("\n".join(rows), flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--out", type=Path, default=Path("audit-out"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--examples", type=int, default=100, help="examples in the exposed file")
    parser.add_argument("--shards", type=int, default=10)
    parser.add_argument("--permutations", type=int, default=20)
    parser.add_argument("--order-epochs", type=int, default=3)
    parser.add_argument("--order-lr", type=float, default=5e-5)
    parser.add_argument("--null-runs", type=int, default=20)
    parser.add_argument("--null-first", type=int, default=0, help="first null run (to split "
                        "runs between processes)")  # fmt: skip
    parser.add_argument("--null-examples", type=int, default=60)
    parser.add_argument("--null-shards", type=int, default=10)
    parser.add_argument("--null-permutations", type=int, default=10)
    parts = ["exposure", "null", "sorted", "inference"]
    parser.add_argument("--parts", nargs="+", default=parts, choices=parts)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    frame = pl.read_parquet(WIKIMIA / "length32.parquet")
    texts = list(dict.fromkeys(frame["text"].to_list()))
    by_label = {label: frame.filter(pl.col("label") == label)["text"].to_list() for label in (0, 1)}
    table = []
    if {"exposure", "null", "sorted"} & set(args.parts):
        table += [
            "| file and model | shards x shuffles | published - shuffled (nats) | t-test p "
            "| permutation p | detectable (nats, 80% power) | exchangeability p |",
            "|---|---|---|---|---|---|---|",
        ]
        table += order_part(args, texts, by_label)
    if "inference" in args.parts:
        table += [
            "",
            "| dataset inference | median p [middle half] | false positives |",
            "|---|---|---|",
        ]
        table += inference_part(args)
    name = "-".join(args.parts) + (f"-from{args.null_first}" if args.null_first else "")
    (args.out / f"audit-{name}.md").write_text("\n".join(table) + "\n")
    print("\n".join(table))


if __name__ == "__main__":
    main()
