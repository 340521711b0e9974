"""`minkscan benchmark`: paper-style detection tables from labelled Parquet (scored here) or
from score outputs (read as they are)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from minkscan.commands.common import add_config_arguments, config_from_args, for_key
from minkscan.commands.prefixes import add_prefix_arguments, prefix_flags
from minkscan.config import ConfigError
from minkscan.errors import UserError
from minkscan.io.ownership import check_owned, writing
from minkscan.schema import BENCHMARK_FILES, GROUP, LABEL, WORK_DIR_ENTRIES

if TYPE_CHECKING:
    import polars as pl

    from minkscan.evaluation.benchmark import BenchmarkResult


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "benchmark",
        help="AUROC / TPR tables from labelled Parquet (text, label[, id, group]: scored "
        "through the Ray pipeline) or from score outputs (read, not re-scored)",
        epilog="example:\n  minkscan benchmark --input out/testset-scores out/nonmember-scores "
        "--output out/benchmark",
    )
    parser.add_argument(
        "--input",
        nargs="+",
        required=True,
        help="labelled Parquet files to score, or `minkscan score` outputs / score Parquet "
        "files labelled by their 'label' column or --labels (tables only, nothing re-scored)",
    )
    parser.add_argument(
        "--labels",
        help="with score inputs: Parquet with columns id, label, joined on id (default: none, "
        "the scores' label column)",
    )
    parser.add_argument(
        "--group-column",
        default=GROUP,
        help="with score inputs: the kept column whose values are the tables' groups "
        "(default: group; rows without it are one group, 'all')",
    )
    parser.add_argument(
        "--output",
        default="benchmark-out",
        type=Path,
        help="directory for the tables and scores (default: benchmark-out)",
    )
    add_config_arguments(
        parser, limit_help="the first N documents of each label in each group (default: all)"
    )
    add_prefix_arguments(parser)
    parser.add_argument(
        "--lowercase", action="store_true", help="add the Lowercase baseline (default: off)"
    )
    parser.add_argument(
        "--ref-model", help="reference model for the Ref baseline (default: none, no Ref)"
    )
    parser.add_argument(
        "--neighbors",
        type=int,
        default=0,
        help="Neighbor baseline with N causal-LM neighbours per document (1 + N extra passes; "
        "default: 0, off)",
    )
    parser.add_argument(
        "--neighbor-model",
        help="masked LM (HF id or directory) proposing neighbours; default: the target model",
    )
    parser.add_argument(
        "--work-dir",
        help="where the pipeline's input and score shards go (default: a temporary local "
        "directory; a multi-node cluster needs shared storage such as s3://bucket/prefix)",
    )
    parser.add_argument(
        "--main-k", type=int, default=20, help="k%% of the main and ablation tables (default: 20)"
    )
    parser.add_argument(
        "--window-stride",
        type=int,
        help=for_key("scoring.window_stride", "sliding windows for documents over --max-tokens"),
    )
    parser.add_argument(
        "--online",
        action="store_true",
        help="chunk-level detection: non-member text followed by member text (scored "
        "in-process, one forward pass per text, no sliding windows; default: off)",
    )
    parser.add_argument(
        "--chunk-tokens", type=int, default=32, help="chunk size for --online (default: 32)"
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="pairing / lengths for --online (default: 0)"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from minkscan.io.labels import read_labelled, read_labelled_scores

    k = args.main_k
    limit, args.limit = args.limit, None  # per group, here, not the first rows of the input
    config = config_from_args(
        args,
        {
            **prefix_flags(args),
            "scoring.window_stride": args.window_stride,
            "scoring.ablation_k_percentages": [k],
            "baselines.lowercase": args.lowercase or None,
            "baselines.neighbors": args.neighbors or None,
            "baselines.neighbor_model": args.neighbor_model,
            "baselines.reference_model": args.ref_model,
        },
    )
    if k not in config.scoring.k_percentages:
        raise ConfigError(f"--main-k {k} is not in scoring.k_percentages")
    if args.ref_model:  # the reference model is placed like the target model
        reference = config.model.model_copy(update={"name": args.ref_model})
        baselines = config.baselines.model_copy(update={"reference_model": reference})
        config = config.model_copy(update={"baselines": baselines})
    check_owned(str(args.output), BENCHMARK_FILES, "--output")
    if args.work_dir is not None:
        check_owned(args.work_dir, WORK_DIR_ENTRIES, "--work-dir")
    scores = read_labelled_scores(args.input, args.labels, args.group_column)
    if scores is not None:
        from minkscan.evaluation.benchmark import tabulate_scores

        if args.online:
            raise UserError("--online scores chunks itself: give it labelled texts, not scores")
        with writing(str(args.output)):
            return _written(tabulate_scores(_per_label(scores, limit), k), args.output)
    if args.labels:
        raise UserError("--labels joins labels to score inputs; labelled Parquet to score "
                        "carries its own 'label' column")  # fmt: skip
    data = _per_label(read_labelled(args.input), limit)  # refused before heavy imports
    from minkscan.evaluation.benchmark import run_benchmark, run_online_benchmark

    with writing(str(args.output)):  # one run writes a benchmark directory at a time
        if args.online:
            result = run_online_benchmark(config, data, k, args.chunk_tokens, args.seed)
        else:
            result = run_benchmark(config, data, k=k, work_dir=args.work_dir)
        return _written(result, args.output)


def _per_label(data: pl.DataFrame, limit: int | None) -> pl.DataFrame:
    """The first ``limit`` rows of each label in each group (all rows when None)."""
    if limit is None:
        return data
    kept = data.with_row_index("_order").group_by(GROUP, LABEL, maintain_order=True).head(limit)
    return kept.sort("_order").drop("_order")


def _written(result: BenchmarkResult, output: Path) -> int:
    """Print the tables and their notes (each note also a warning line), write them."""
    for note in result.notes:
        print(f"warning: {note}", file=sys.stderr)
    print(result.markdown())
    for path in result.write(output):
        print(f"wrote {path}")
    return 0
