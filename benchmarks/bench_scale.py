"""Driver memory, resume cost and redone work of `minkscan score` as the corpus grows.

Builds synthetic corpora (20 Parquet shards, row groups of 5,000 rows) and a negligible
model (a 1-layer random Llama over a byte-level tokenizer), then per size prints:
docs/s of a first run, the driver's peak RSS, a no-op resume's wall time (it must read no
input row and start no Ray), and, after killing a run once ~50% of the rows are
committed, what the re-run scores and how much time the kill cost.

    .venv/bin/python benchmarks/bench_scale.py --sizes 10000 100000 1000000
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pipeline"))
from minkscan.io.scores import ScoreOutput  # noqa: E402

BIN = Path(sys.executable).parent
SHARDS = 20
WORDS = "the quick brown fox jumps over a lazy dog near river bank at dawn".split()


def build_model(directory: Path) -> None:
    """A 1-layer Llama with hidden size 16 over raw bytes: the model costs ~nothing."""
    backend = Tokenizer(models.BPE(vocab={ch: i for i, ch in enumerate(
        pre_tokenizers.ByteLevel.alphabet())}, merges=[]))  # fmt: skip
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="a", pad_token="a")
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=256, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=256,
    )  # fmt: skip
    LlamaForCausalLM(config).save_pretrained(directory)
    tokenizer.save_pretrained(directory)


def build_corpus(directory: Path, documents: int) -> None:
    directory.mkdir(parents=True)
    per_shard = -(-documents // SHARDS)
    for shard in range(SHARDS):
        rows = range(shard * per_shard, min(documents, (shard + 1) * per_shard))
        # Numbered: no two shards are byte-identical (those would be scored once).
        texts = [f"{i} " + " ".join(WORDS[(i + j) % len(WORDS)] for j in range(6)) for i in rows]
        pq.write_table(pa.table({"text": texts}), directory / f"{shard:03d}.parquet",
                       row_group_size=5000)  # fmt: skip


def run(command: list[str], kill_at: int | None = None, output: Path | None = None):
    """Run the CLI; return (wall seconds, peak driver RSS MiB, stdout). With ``kill_at``,
    SIGKILL the driver and its children once that many rows are committed."""
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                               text=True)  # fmt: skip
    driver = psutil.Process(process.pid)
    peak = [0]

    def watch() -> None:
        while process.poll() is None:
            try:
                peak[0] = max(peak[0], driver.memory_info().rss)
            except psutil.Error:
                return
            if kill_at is not None and output is not None and output.is_dir():
                parts = ScoreOutput(pafs.LocalFileSystem(), str(output)).parts()
                if sum(p.rows for p in parts) >= kill_at:
                    for child in [driver, *driver.children(recursive=True)]:
                        child.kill()
                    return
            time.sleep(0.2)

    watcher = threading.Thread(target=watch)
    watcher.start()
    stdout, _ = process.communicate()
    watcher.join()
    return time.perf_counter() - started, peak[0] / 2**20, stdout


def scored(stdout: str) -> int:
    """Documents a run scored: 0 for a complete output's "nothing to do", -1 if unreadable."""
    if stdout.startswith("nothing to do"):
        return 0
    match = re.search(r"scored (\d+) documents", stdout)
    return int(match.group(1)) if match else -1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="minkscan-scale-"))
    build_model(work / "model")
    print("| documents | docs/s | driver peak RSS MiB | no-op resume s (of first run) "
          "| committed at kill | re-run scored | kill cost (t1+t2-t)/t |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    try:
        for size in args.sizes:
            corpus = work / f"corpus-{size}"
            build_corpus(corpus, size)
            base = [str(BIN / "minkscan"), "score", "--input", str(corpus), "--model",
                    str(work / "model"), "--set", "scoring.k_percentages=[20]",
                    "--set", "ray.block_rows=1024"]  # fmt: skip
            out = work / f"out-{size}"
            seconds, rss, stdout = run([*base, "--output", str(out)])
            assert scored(stdout) == size, stdout
            rate = size / seconds
            resume, _, stdout = run([*base, "--output", str(out)])
            assert scored(stdout) == 0, stdout
            killed = work / f"killed-{size}"
            first, _, _ = run([*base, "--output", str(killed)], kill_at=size // 2, output=killed)
            committed = sum(
                p.rows for p in ScoreOutput(pafs.LocalFileSystem(), str(killed)).parts()
            )
            second, _, stdout = run([*base, "--output", str(killed)])
            redo = (first + second - seconds) / seconds
            print(f"| {size} | {rate:.0f} | {rss:.0f} | {resume:.1f} ({resume / seconds:.1%}) "
                  f"| {committed / size:.1%} | {scored(stdout) / size:.1%} | {redo:+.1%} |",
                  flush=True)  # fmt: skip
            shutil.rmtree(corpus)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
