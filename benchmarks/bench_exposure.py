"""Controlled-exposure benchmark: membership known exactly because we fine-tune on it.

Fine-tunes a copy of a bundled model for one epoch on a random half of a text set, then
runs `minkscan benchmark` on members (the trained half) vs the held-out half, for the
fine-tuned model and, as a control, the untouched base model (expected AUROC ~ 0.5).

    .venv/bin/python benchmarks/bench_exposure.py \
        --texts ../shared/data/wikimia24/length64.parquet --model smollm2-135m --out exposure-out
"""

from __future__ import annotations

import argparse
import random
import time
from pathlib import Path

import polars as pl
import torch
from minkscan.cli import main as minkscan
from minkscan.config import ModelConfig
from minkscan.models.loading import load_model


def fine_tune(name: str, texts: list[str], directory: Path, lr: float, batch: int) -> None:
    """One epoch of causal-LM training (fp32, CPU) on ``texts``; saved to ``directory``."""
    loaded = load_model(ModelConfig(name=name, device="cpu"))
    model, tokenizer = loaded.model, loaded.tokenizer
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    start = time.perf_counter()
    for step in range(0, len(texts), batch):
        encoded = tokenizer(texts[step : step + batch], return_tensors="pt", padding=True)
        labels = encoded["input_ids"].masked_fill(encoded["attention_mask"] == 0, -100)
        loss = model(**encoded, labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        if step // batch % 5 == 0:
            elapsed = time.perf_counter() - start
            print(f"step {step // batch} loss {loss.item():.3f} {elapsed:.0f}s", flush=True)
    model.eval()
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", required=True, help="Parquet with a text column")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--out", type=Path, default=Path("exposure-out"))
    parser.add_argument("--lr", type=float, default=2e-5)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--limit", type=int, help="use only this many texts (members + held out)")
    parser.add_argument("--retrain", action="store_true", help="fine-tune again even if cached")
    args = parser.parse_args()

    texts = pl.read_parquet(args.texts)["text"].to_list()
    random.Random(args.seed).shuffle(texts)
    texts = texts[: args.limit]
    members, non_members = texts[: len(texts) // 2], texts[len(texts) // 2 :]
    args.out.mkdir(parents=True, exist_ok=True)
    data = args.out / "exposure.parquet"
    pl.DataFrame(
        {
            "text": members + non_members,
            "label": [1] * len(members) + [0] * len(non_members),
            "group": Path(args.texts).stem,
        }
    ).write_parquet(data)
    tuned = args.out / "fine-tuned"
    if args.retrain or not (tuned / "config.json").exists():
        fine_tune(args.model, members, tuned, args.lr, args.batch)
    else:
        print(f"reusing the fine-tuned model in {tuned} (--retrain to train again)", flush=True)
    # The base model is the natural reference for Ref: it saw everything but the members.
    runs = (
        ("fine-tuned", str(tuned), ["--ref-model", args.model]),
        ("base (control)", args.model, []),
    )
    for label, model, extra in runs:
        print(f"\n# {label}: {model}\n", flush=True)
        output_dir = str(args.out / label.split()[0])
        minkscan(
            ["benchmark", "--input", str(data), "--model", model, "--output", output_dir,
             "--lowercase", *extra]  # fmt: skip
        )


if __name__ == "__main__":
    main()
