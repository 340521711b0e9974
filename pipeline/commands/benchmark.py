"""`minkscan benchmark`: paper-style detection tables from labelled Parquet."""

from __future__ import annotations

import argparse
from pathlib import Path

from pipeline.config import ConfigError, load_config
from pipeline.evaluation.benchmark import read_labelled, run_benchmark, run_online_benchmark


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "benchmark",
        help="score labelled Parquet (text, label[, id, group]) and print AUROC / TPR tables",
    )
    parser.add_argument("--data", nargs="+", required=True, help="labelled Parquet files")
    parser.add_argument("--model", help="model name or directory (default: config's)")
    parser.add_argument("--ref-model", help="reference model for the Ref baseline")
    parser.add_argument(
        "--neighbors",
        type=int,
        default=0,
        help="Neighbor baseline with N causal-LM neighbours per document (1 + N extra passes)",
    )
    parser.add_argument(
        "--neighbor-model",
        help="masked LM (HF id or directory) proposing neighbours; default: the target model",
    )
    parser.add_argument("--config", help="YAML ScanConfig")
    parser.add_argument("--output-dir", default="benchmark-out", type=Path)
    parser.add_argument("--k", type=int, default=20, help="k%% of the main and ablation tables")
    parser.add_argument("--max-tokens", type=int, help="context window / truncation length")
    parser.add_argument(
        "--window-stride", type=int, help="sliding windows for documents over --max-tokens"
    )
    parser.add_argument(
        "--online",
        action="store_true",
        help="chunk-level detection: non-member text followed by member text",
    )
    parser.add_argument("--chunk-tokens", type=int, default=32, help="chunk size for --online")
    parser.add_argument("--seed", type=int, default=0, help="pairing / lengths for --online")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    config = load_config(
        args.config,
        {
            "model.name": args.model,
            "scoring.max_tokens": args.max_tokens,
            "scoring.window_stride": args.window_stride,
            "scoring.ablation_k_percentages": [args.k],
        },
    )
    if args.k not in config.scoring.k_percentages:
        raise ConfigError(f"--k {args.k} is not in scoring.k_percentages")
    if args.neighbors < 0 or (args.neighbor_model and args.neighbors == 0):
        raise ConfigError("--neighbors must be >= 0, and > 0 when --neighbor-model is given")
    data = read_labelled(args.data)
    if args.online:
        result = run_online_benchmark(config, data, args.k, args.chunk_tokens, args.seed)
    else:
        reference = None
        if args.ref_model:
            reference = config.model.model_copy(update={"name": args.ref_model})
        result = run_benchmark(
            config,
            data,
            k=args.k,
            reference=reference,
            n_neighbors=args.neighbors,
            neighbor_model=args.neighbor_model,
        )
    print(result.markdown())
    for path in result.write(args.output_dir):
        print(f"wrote {path}")
    return 0
