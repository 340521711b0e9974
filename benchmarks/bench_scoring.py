"""Scoring cost against the bare forward pass: time and peak memory, side by side.

Three ways to get the same per-document scores for a batch of B documents of T tokens:

  (a) bare   the Hugging Face forward pass returning logits, nothing else (the floor);
  (b) naive  the research-code style: one document at a time, full float32 softmax and
             log-softmax over the vocabulary, sigma from E[x^2] - E[x]^2, numpy sorts per k;
  (c) fused  `DocumentScorer`: one batched pass, fused head + chunked reduction;
  (c') the same with ``scoring.compile_reduction`` (torch.compile'd tile reduction).

Each (model, dtype, variant) runs in its own subprocess so that peak memory (peak RSS above
the RSS after loading the model) is not polluted by the other variants.

    python benchmarks/bench_scoring.py                      # smollm2-135m and gemma3-270m
    python benchmarks/bench_scoring.py --models smollm2-135m --dtypes float32
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
import zlib
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "wikimia24" / "length64.parquet"
SAMPLE = ROOT / "pipeline" / "minkscan" / "data" / "sample.parquet"
K_RATIOS = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0]


def documents(tokenizer, batch: int, tokens: int) -> list[list[int]]:  # noqa: ANN001
    """``batch`` real texts, each cut to exactly ``tokens`` tokens (no padding anywhere)."""
    import polars as pl

    texts = pl.read_parquet(DATA if DATA.exists() else SAMPLE)["text"].to_list()
    docs, current = [], []
    for text in texts:
        current += tokenizer(text + "\n")["input_ids"]
        if len(current) >= tokens:
            docs.append(current[:tokens])
            current = []
        if len(docs) == batch:
            return docs
    raise RuntimeError("not enough text for the requested batch")


def reset_peak_rss() -> None:
    """Forget the peak RSS so far (Linux: writing 5 to clear_refs resets VmHWM)."""
    Path("/proc/self/clear_refs").write_text("5")


def rss_mib() -> float:
    """Peak resident set size since the last reset, in MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def run_bare(model, docs):  # noqa: ANN001, ANN201
    import torch

    with torch.inference_mode():
        return model(input_ids=torch.tensor(docs)).logits


def run_naive(model, tokenizer, docs):  # noqa: ANN001, ANN201
    """The per-document loop of the reference implementations."""
    import numpy as np
    import torch
    import torch.nn.functional as F

    rows = []
    for ids in docs:
        text = tokenizer.decode(ids)
        input_ids = torch.tensor([ids])
        with torch.no_grad():
            outputs = model(input_ids, labels=input_ids)
        ll = -outputs.loss.item()
        row = {"mean_logprob": ll, "zlib": ll / len(zlib.compress(text.encode("utf-8")))}
        logits = outputs.logits[0, :-1].float()
        targets = input_ids[0, 1:, None]
        probs = F.softmax(logits, dim=-1)
        log_probs = F.log_softmax(logits, dim=-1)
        token_log_probs = log_probs.gather(-1, targets).squeeze(-1)
        mu = (probs * log_probs).sum(-1)
        sigma = (probs * torch.square(log_probs)).sum(-1) - torch.square(mu)
        scores = {
            "mink": token_log_probs.numpy(),
            "minkpp": ((token_log_probs - mu) / sigma.sqrt()).numpy(),
            "minkpp_mu": (token_log_probs - mu).numpy(),
            "minkpp_sigma": (token_log_probs / sigma.sqrt()).numpy(),
        }
        for name, values in scores.items():
            ratios = K_RATIOS if name in ("mink", "minkpp") else [0.2]
            for ratio in ratios:
                k = max(1, int(len(values) * ratio))
                row[f"{name}_k{round(ratio * 100)}"] = float(np.mean(np.sort(values)[:k]))
        rows.append(row)
    return rows


def prepare(
    model_name: str, dtype: str, batch: int, tokens: int
) -> dict[str, Callable[[], object]]:
    """Load the model once and return a zero-argument call for each variant."""
    from minkscan.config import ModelConfig, ScoringConfig
    from minkscan.models.loading import load_model
    from minkscan.scorer import DocumentScorer
    from minkscan.text.tokenize import EncodedDocument

    loaded = load_model(ModelConfig(name=model_name, dtype=dtype, device="cpu"))
    docs = documents(loaded.tokenizer, batch, tokens)
    eager, compiled = (
        DocumentScorer(
            loaded,
            ScoringConfig(
                max_tokens=tokens, batch_tokens=batch * tokens, compile_reduction=compile_reduction
            ),
        )
        for compile_reduction in (False, True)
    )
    encoded = [EncodedDocument(loaded.tokenizer.decode(ids), tuple(ids), "ok") for ids in docs]
    return {
        "bare": lambda: run_bare(loaded.model, docs),
        "naive": lambda: run_naive(loaded.model, loaded.tokenizer, docs),
        "fused": lambda: eager.score_documents(encoded),
        "compiled": lambda: compiled.score_documents(encoded),
    }


def time_worker(model_name: str, dtype: str, batch: int, tokens: int, repeats: int) -> dict:
    """Median seconds per variant, the variants interleaved so that load drifts hit all alike."""
    calls = prepare(model_name, dtype, batch, tokens)
    for call in calls.values():
        call()  # warm-up
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(repeats):
        for name, call in calls.items():
            start = time.perf_counter()
            call()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def memory_worker(model_name: str, dtype: str, variant: str, batch: int, tokens: int) -> dict:
    """Peak RSS growth of one variant above the RSS after loading (its own process)."""
    calls = prepare(model_name, dtype, batch, tokens)
    if variant == "compiled":
        calls[variant]()  # compile first: the compiler's own memory is not the scorer's
    reset_peak_rss()
    baseline = rss_mib()
    calls[variant]()
    return {variant: rss_mib() - baseline}


def subprocess_json(*worker_args: str, args: argparse.Namespace) -> dict:
    command = [
        sys.executable,
        __file__,
        "--worker",
        *worker_args,
        "--batch",
        str(args.batch),
        "--tokens",
        str(args.tokens),
        "--repeats",
        str(args.repeats),
    ]
    out = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    if out.returncode:
        sys.exit(f"worker {worker_args} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--models", nargs="+", default=["smollm2-135m", "gemma3-270m"])
    parser.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        model, dtype, variant = args.worker
        if variant == "time":
            result = time_worker(model, dtype, args.batch, args.tokens, args.repeats)
        else:
            result = memory_worker(model, dtype, variant, args.batch, args.tokens)
        print(json.dumps(result))
        return

    import torch

    print(
        f"batch {args.batch} x {args.tokens} tokens, CPU ({torch.get_num_threads()} threads), "
        f"median of {args.repeats} interleaved runs; peak MiB = peak RSS growth above the "
        "loaded model, each variant in its own process"
    )
    print(
        "model".ljust(14)
        + "dtype".ljust(10)
        + "".join(
            name.rjust(width)
            for name, width in [
                ("a bare s", 9),
                ("b naive s", 10),
                ("c fused s", 10),
                ("c' comp s", 11),
                ("a MiB", 7),
                ("b MiB", 7),
                ("c MiB", 7),
                ("c' MiB", 8),
                ("c/a time", 9),
                ("c'/a time", 11),
                ("b/c time", 9),
            ]
        )
    )
    for model in args.models:
        for dtype in args.dtypes:
            seconds = subprocess_json(model, dtype, "time", args=args)
            memory: dict[str, float] = {}
            for variant in ("bare", "naive", "fused", "compiled"):
                memory |= subprocess_json(model, dtype, variant, args=args)
            a, b, c, cc = (seconds[v] for v in ("bare", "naive", "fused", "compiled"))
            print(
                f"{model:<14}{dtype:<10}{a:>9.3f}{b:>10.3f}{c:>10.3f}{cc:>11.3f}"
                f"{memory['bare']:>7.0f}{memory['naive']:>7.0f}{memory['fused']:>7.0f}"
                f"{memory['compiled']:>8.0f}{c / a:>9.3f}{cc / a:>11.3f}{b / c:>9.2f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
