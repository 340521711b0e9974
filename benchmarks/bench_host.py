"""Host-side seconds per batch outside the model: this tree against a baseline revision.

The CPU proxy for "the host never serialises the GPU": with a model so small that its cost
is negligible (1-layer random Llama over bytes), whatever else a scoring call spends --
tokenising, planning and building batches, copying, aggregating documents, reading scores
back -- is host time a GPU would wait on. For each version, in a fresh process each, it
scores the same synthetic corpus (log-uniform lengths) with `DocumentScorer.score_frame` and
times the model body (hooks on ``model.base_model``) and the head reduction
(``minkscan.models.forward.head_token_stats``); host time = wall - body - head, per forward
batch.

    .venv/bin/python benchmarks/bench_host.py --baseline 6fa3542 --docs 4000

The baseline is checked out into a temporary git worktree and imported from there.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def measure(docs: int, repeats: int) -> dict[str, float]:
    """One version's figures (imports the minkscan on sys.path)."""
    import minkscan.models.forward as forward
    import synthetic
    from minkscan.config import ScoringConfig
    from minkscan.models.loading import LoadedModel
    from minkscan.scorer import DocumentScorer

    torch_threads = 1
    import torch

    torch.set_num_threads(torch_threads)
    model = synthetic.tiny_llama()
    loaded = LoadedModel("tiny", model, synthetic.byte_tokenizer())
    scorer = DocumentScorer(loaded, ScoringConfig(max_tokens=512))
    corpus = synthetic.texts(docs, shortest=16, longest=512, seed=1)
    timers = {"body": 0.0, "head": 0.0, "batches": 0}
    started: list[float] = []

    def before(*_: object) -> None:
        started.append(time.perf_counter())

    def after(*_: object) -> None:
        timers["body"] += time.perf_counter() - started.pop()
        timers["batches"] += 1

    model.base_model.register_forward_pre_hook(before)
    model.base_model.register_forward_hook(after)
    head = forward.head_token_stats

    def timed_head(*args: object, **kwargs: object):
        start = time.perf_counter()
        result = head(*args, **kwargs)
        timers["head"] += time.perf_counter() - start
        return result

    forward.head_token_stats = timed_head
    scorer.score_frame(corpus[:64])  # warm-up
    runs = []
    for _ in range(repeats):
        timers.update(body=0.0, head=0.0, batches=0)
        start = time.perf_counter()
        frame = scorer.score_frame(corpus)
        wall = time.perf_counter() - start
        host = wall - timers["body"] - timers["head"]
        runs.append(
            {
                "wall_s": wall,
                "body_s": timers["body"],
                "head_s": timers["head"],
                "batches": timers["batches"],
                "host_s_per_batch": host / timers["batches"],
                "tokens_per_s": float(frame["n_tokens"].sum()) / wall,
            }
        )
    median = statistics.median(run["host_s_per_batch"] for run in runs)
    return next(run for run in runs if run["host_s_per_batch"] == median)


def run_version(pipeline: Path, docs: int, repeats: int) -> dict[str, float]:
    env = os.environ | {"PYTHONPATH": f"{pipeline}{os.pathsep}{REPO / 'benchmarks'}"}
    command = [sys.executable, __file__, "--worker", "--docs", str(docs),
               "--repeats", str(repeats)]  # fmt: skip
    out = subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default="6fa3542", help="git revision to compare with")
    parser.add_argument("--docs", type=int, default=4000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(measure(args.docs, args.repeats)))
        return
    with tempfile.TemporaryDirectory(prefix="minkscan-baseline-") as scratch:
        worktree = Path(scratch) / "tree"
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "-q",
                        str(worktree), args.baseline], check=True)  # fmt: skip
        try:
            results = {
                f"before ({args.baseline})": run_version(
                    worktree / "pipeline", args.docs, args.repeats
                ),  # fmt: skip
                "after (this tree)": run_version(REPO / "pipeline", args.docs, args.repeats),
            }
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force",
                            str(worktree)], check=True)  # fmt: skip
    print(f"{args.docs} documents of 16-512 byte tokens, 1-layer random Llama (H=64), CPU, "
          f"1 thread, median of {args.repeats}")  # fmt: skip
    print("| version | batches | wall s | body s | head s | host s per batch | tokens/s |")
    print("|---|---|---|---|---|---|---|")
    for label, r in results.items():
        print(f"| {label} | {r['batches']} | {r['wall_s']:.2f} | {r['body_s']:.2f} | "
              f"{r['head_s']:.2f} | {1e3 * r['host_s_per_batch']:.1f} ms | "
              f"{r['tokens_per_s']:.0f} |")  # fmt: skip
    before, after = results.values()
    ratio = after["host_s_per_batch"] / before["host_s_per_batch"]
    print(f"host seconds per batch, after / before: {ratio:.2f}")


if __name__ == "__main__":
    main()
