"""Controlled-exposure benchmark: membership known exactly because we fine-tune on it.

Fine-tunes a copy of a bundled model for one epoch on a random half of a text set, then
runs `minkscan benchmark` on members (the trained half) vs the held-out half, for the
fine-tuned model and, as a control, the untouched base model (expected AUROC ~ 0.5). Every
method is scored: the single-pass ones (Gap-K% among them), DC-PDD with token frequencies
counted by `minkscan frequencies` on the texts left out by ``--limit`` (disjoint from both
halves) and AECA from the same counts, Lowercase, Ref and WBC for the fine-tuned model (the
base model as reference), ReCaLL (its prefix: ``--shots`` of the left-out texts, non-members
of the fine-tuning) and Con-ReCall (its member prefix: ``--shots`` members, then left out of
the evaluation), GradNorm (MIMIR's L-inf norm), PAC, SaMIA (``--samia-samples``
continuations of at most ``--samia-max-length`` tokens: fewer and shorter than the authors'
10 x 1,024, for CPU time), and the blind baseline every benchmark table carries. Ends with
one table of AUROC [95% CI] and TPR at 5% FPR per method for both models.

    .venv/bin/python benchmarks/bench_exposure.py --limit 400 \
        --texts ../shared/data/wikimia24/length64.parquet --model smollm2-135m --out exposure-out
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

import polars as pl
import torch
from minkscan.cli import main as minkscan
from minkscan.config import ModelConfig
from minkscan.models.loading import load_model


def fine_tune(
    name: str,
    texts: list[str],
    directory: Path,
    lr: float,
    batch: int,
    epochs: int = 1,
    reshuffle: bool = False,
) -> None:
    """``epochs`` of causal-LM training (fp32, CPU) on ``texts`` as single documents, in
    their order or, with ``reshuffle``, in a seeded shuffle per epoch; saved to
    ``directory``."""
    loaded = load_model(ModelConfig(name=name, device="cpu"))
    model, tokenizer = loaded.model, loaded.tokenizer
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    start = time.perf_counter()
    for epoch in range(epochs):
        order = list(texts)
        if reshuffle:
            random.Random(epoch).shuffle(order)
        for step in range(0, len(order), batch):
            encoded = tokenizer(order[step : step + batch], return_tensors="pt", padding=True)
            labels = encoded["input_ids"].masked_fill(encoded["attention_mask"] == 0, -100)
            loss = model(**encoded, labels=labels).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            if step // batch % 5 == 0:
                elapsed = time.perf_counter() - start
                print(f"epoch {epoch} step {step // batch} loss {loss.item():.3f} "
                      f"{elapsed:.0f}s", flush=True)  # fmt: skip
    model.eval()
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)


def comparison(outputs: dict[str, Path], group: str) -> str:
    """Markdown: per method, AUROC [95% CI] and TPR at 5% FPR of each run."""
    tables = {
        run: json.loads((out / "tables.json").read_text())["main"] for run, out in outputs.items()
    }
    header = (
        "| method | "
        + " | ".join(f"{run} AUROC [95% CI] | {run} TPR@5%FPR" for run in tables)
        + " |"
    )
    lines = [header, "|---" * (1 + 2 * len(tables)) + "|"]
    methods = list(dict.fromkeys(row["method"] for rows in tables.values() for row in rows))
    for method in methods:
        cells = []
        for rows in tables.values():
            row = next((r for r in rows if r["method"] == method), None)
            if row is None:
                cells += ["-", "-"]
                continue
            auroc, lo, hi = (row[f"auroc_{group}{end}"] for end in ("", "_lo", "_hi"))
            cells += [f"{auroc:.3f} [{lo:.3f}, {hi:.3f}]", f"{row[f'tpr@0.05fpr_{group}']:.3f}"]
        lines.append(f"| {method} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", required=True, help="Parquet with a text column")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--out", type=Path, default=Path("exposure-out"))
    parser.add_argument("--lr", type=float, default=2e-5)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--limit", type=int, help="members + held out; the other texts count DC-PDD's frequencies"
    )
    parser.add_argument("--retrain", action="store_true", help="fine-tune again even if cached")
    parser.add_argument(
        "--shots", type=int, default=12, help="texts in each ReCaLL prefix (the authors' 12)"
    )
    parser.add_argument("--samia-samples", type=int, default=5)
    parser.add_argument("--samia-max-length", type=int, default=128)
    args = parser.parse_args()

    texts = list(dict.fromkeys(pl.read_parquet(args.texts)["text"].to_list()))  # distinct
    random.Random(args.seed).shuffle(texts)
    texts, rest = texts[: args.limit], texts[len(texts[: args.limit]) :]
    if not rest:
        parser.error("--limit must leave texts out: DC-PDD's frequencies are counted on them")
    members, non_members = texts[: len(texts) // 2], texts[len(texts) // 2 :]
    args.out.mkdir(parents=True, exist_ok=True)
    # ReCaLL's prefix: left-out texts (never trained on); Con-ReCall's: trained members, which
    # then leave the evaluation (a prefix text scored after itself would be no test).
    prefixes = {"nonmembers.txt": rest[: args.shots], "members.txt": members[: args.shots]}
    for name, shots in prefixes.items():
        (args.out / name).write_text("\n\n".join(shots))
    evaluated = members[args.shots :]
    group = Path(args.texts).stem
    data = args.out / "exposure.parquet"
    pl.DataFrame(
        {
            "text": evaluated + non_members,
            "label": [1] * len(evaluated) + [0] * len(non_members),
            "group": group,
        }
    ).write_parquet(data)
    corpus = args.out / "frequency-corpus.parquet"
    pl.DataFrame({"text": rest}).write_parquet(corpus)
    print(f"{len(members)} members ({len(evaluated)} evaluated), {len(non_members)} held out, "
          f"{len(rest)} texts for DC-PDD's token frequencies", flush=True)  # fmt: skip
    tuned = args.out / "fine-tuned"
    if args.retrain or not (tuned / "config.json").exists():
        fine_tune(args.model, members, tuned, args.lr, args.batch)
    else:
        print(f"reusing the fine-tuned model in {tuned} (--retrain to train again)", flush=True)
    # The base model is the natural reference for Ref: it saw everything but the members.
    runs = (
        ("fine-tuned", str(tuned), ["--ref-model", args.model, "--set", "baselines.wbc=true"]),
        ("base (control)", args.model, []),
    )
    extra_methods = [
        # Small blocks: a block of 256 rows through every extra pass on a CPU outlasts Ray
        # Data's no-progress window (30 minutes).
        "--set", "ray.block_rows=16",
        "--set", "baselines.gradnorm=true", "--set", "baselines.pac=true",
        "--set", "baselines.samia=true",
        "--set", f"baselines.samia_samples={args.samia_samples}",
        "--set", f"baselines.samia_max_length={args.samia_max_length}",
    ]  # fmt: skip
    outputs = {}
    for label, model, extra in runs:
        print(f"\n# {label}: {model}\n", flush=True)
        output_dir = args.out / label.split()[0]
        frequencies = output_dir / "frequencies.parquet"
        output_dir.mkdir(parents=True, exist_ok=True)
        minkscan(["frequencies", "--input", str(corpus), "--model", model,
                  "--output", str(frequencies)])  # fmt: skip
        minkscan(
            ["benchmark", "--input", str(data), "--model", model, "--output", str(output_dir),
             "--lowercase", "--set", f"scoring.dcpdd_frequencies={frequencies}",
             "--recall-prefix-from", str(args.out / "nonmembers.txt"),
             "--conrecall-from", str(args.out / "members.txt"), "--recall-shots", str(args.shots),
             *extra_methods, *extra]
        )  # fmt: skip
        outputs[label] = output_dir
    table = comparison(outputs, group)
    (args.out / "comparison.md").write_text(table + "\n")
    print(f"\n# Members vs held out ({len(evaluated)} + {len(non_members)})\n\n{table}")


if __name__ == "__main__":
    main()
