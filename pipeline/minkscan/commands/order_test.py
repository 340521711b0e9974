"""`minkscan order-test`: does the model prefer a benchmark file's published order? (the
sharded test of Oren et al., ICLR 2024; `minkscan.evaluation.order_run`). Same input flags
as `score`; the run is scored on the same Ray actor pools and resumes like it. With
``--per-file`` or several ``--models`` every (file, model) is its own test, in its own
directory, and one table gives them all with Holm-adjusted p-values."""

from __future__ import annotations

import argparse
import re

from minkscan.commands.common import (
    add_config_arguments,
    add_format_arguments,
    config_from_args,
)
from minkscan.errors import UserError
from minkscan.schema import ORDER_RESULT

# Also `minkscan.evaluation.order_shards`'s, spelled here so --help imports no numpy
# (tests/test_order_test_cli.py checks they agree).
DEFAULT_SHARDS = 50
DEFAULT_PERMUTATIONS = 50

DEFAULT_SEPARATOR = "\n"
TABLE_JSON, TABLE_MD = "order_tests.json", "order_tests.md"
EXAMPLE = """example:
  minkscan order-test --input bench.jsonl --shards 10 --permutations 19 --output out/order
  minkscan order-test --input benchmarks/ --per-file --models smollm2-135m gemma3-270m \\
      --shards 10 --permutations 19 --output out/orders"""


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "order-test",
        help="test whether the model prefers a benchmark's published example order "
        "(needs no non-members; detects training on the file as published)",
        epilog=EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--input", nargs="+", required=True,
        help="the benchmark in its published order: files (read in path order), "
        "directories or globs; local or s3://",
    )  # fmt: skip
    parser.add_argument(
        "--output", required=True,
        help="directory for the orderings, their scores and order_test.json",
    )  # fmt: skip
    add_config_arguments(parser)
    add_format_arguments(parser)
    parser.add_argument(
        "--template",
        help="each example's text from its columns, e.g. 'Q: {question}\\nA: {answer}' "
        "(plain Python format fields; \\n and \\t read as newline and tab; a list column is "
        "one item per line; default: none -- a JSON lines file's raw lines, as the test's "
        "authors read them, else --text-column)",
    )
    parser.add_argument(
        "--separator",
        help="after each example read from a column or --template (\\n and \\t read as "
        "newline and tab; default: a newline, as a line of a file ends); raw lines keep their "
        "own",
    )  # fmt: skip
    parser.add_argument(
        "--shards", type=int, default=DEFAULT_SHARDS,
        help=f"contiguous shards, each tested on its own (default: {DEFAULT_SHARDS})",
    )  # fmt: skip
    parser.add_argument(
        "--permutations", type=int,
        help=f"seeded shuffles per shard, each a different order (default: "
        f"{DEFAULT_PERMUTATIONS}, or as many as the smallest shard has if fewer)",
    )  # fmt: skip
    parser.add_argument("--seed", type=int, default=0, help="seed of the shuffles (default: 0)")
    parser.add_argument("--alpha", type=float, default=0.05, help="test level (default: 0.05)")
    parser.add_argument(
        "--window-stride",
        type=int,
        help="sliding windows for orderings over scoring.max_tokens advance by this many "
        "tokens (default: half of scoring.max_tokens)",
    )
    parser.add_argument(
        "--per-file", action="store_true",
        help="test every input file as its own benchmark, one table with Holm-adjusted "
        "p-values (default: the inputs are one benchmark)",
    )  # fmt: skip
    parser.add_argument(
        "--models", nargs="+", metavar="MODEL",
        help="test each of these models (names as --model), one table with Holm-adjusted "
        "p-values (default: --model)",
    )  # fmt: skip
    parser.set_defaults(func=run)


def _unescape(text: str | None) -> str | None:
    return None if text is None else text.replace("\\n", "\n").replace("\\t", "\t")


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text.rstrip("/").rsplit("/", 1)[-1]).strip("-.")


def run(args: argparse.Namespace) -> int:
    if args.permutations is not None and args.permutations < 1:
        raise UserError(f"--permutations must be at least 1, got {args.permutations}")
    if not 0 < args.alpha < 1:
        raise UserError(f"--alpha must be in (0, 1), got {args.alpha}")
    config = config_from_args(
        args, {"data.input": args.input, "scoring.window_stride": args.window_stride}
    )
    from minkscan.evaluation.order_examples import COLUMN, LINES, example_mode
    from minkscan.evaluation.order_test import OrderSettings

    mode = example_mode(config, args.template, args.text_column is not None)
    if mode == LINES and args.separator is not None:
        raise UserError("--separator follows examples read from a column or --template; a "
                        "JSON lines file's raw lines keep their own newline")  # fmt: skip
    settings = OrderSettings(
        examples=mode,
        template=_unescape(args.template),
        column=config.data.text_column if mode == COLUMN else None,
        separator=_unescape(args.separator) if args.separator is not None else DEFAULT_SEPARATOR,
        shards=args.shards,
        permutations=args.permutations,
        seed=args.seed,
    )
    tests = _tests(config, args)
    if len(tests) == 1:
        return _single(config, settings, args)
    return _several(tests, settings, args)


def _single(config, settings, args: argparse.Namespace) -> int:
    """Read and check the examples, then test them holding the output's writer lease."""
    from minkscan.evaluation.order_run import planned, run_order_test
    from minkscan.io.ownership import check_apart, writing
    from minkscan.io.paths import fs_path

    prepared = planned(config, settings, args.alpha)
    check_apart(fs_path(args.output), list(config.data.input), prepared[1].files)
    with writing(args.output, config.data.s3):  # one run writes an order test at a time
        result = run_order_test(config, settings, args.output, alpha=args.alpha,
                                prepared=prepared)  # fmt: skip
    for line in result.verdict():
        print(line)
    print(f"cost: {result.cost.line(estimate=False)}")
    print(f"wrote {args.output.rstrip('/')}/{ORDER_RESULT}")
    return 0


def _tests(config, args: argparse.Namespace) -> list[tuple[str, str, object]]:
    """(file label, model, config) of every test: each input file with --per-file (else
    the inputs together), under each of --models (else --model)."""
    from minkscan.config import ModelConfig
    from minkscan.io.inputs import discover
    from minkscan.io.paths import filesystem_for, is_s3

    data = config.data
    files = [None]
    if args.per_file:
        fs = filesystem_for(list(data.input), data.s3)
        found = discover(list(data.input), fs, format=data.format, root=data.input_root)
        scheme = "s3://" if any(is_s3(spec) for spec in data.input) else ""
        files = [(file.relpath, scheme + file.path) for file in found.files]
    models = args.models or [config.model.name]
    tests = []
    for file in files:
        label = ", ".join(data.input) if file is None else file[0]
        update = {} if file is None else {"input": [file[1]], "input_root": None}
        for model in models:
            changed = config.model_copy(update={
                "data": data.model_copy(update=update),
                "model": ModelConfig.model_validate(config.model.model_dump() | {"name": model}),
            })  # fmt: skip
            tests.append((label, model, changed))
    return tests


def _several(tests, settings, args: argparse.Namespace) -> int:
    """Check every test before any is scored, run them in turn (each resumes in its own
    directory), then the table with Holm's adjustment."""
    import json

    from minkscan.evaluation.order_run import check_output, planned, run_order_test
    from minkscan.evaluation.order_table import headline, markdown, order_rows
    from minkscan.io.ownership import check_apart, writing
    from minkscan.io.paths import filesystem_for, fs_path, join, write_text

    names = [f"{index + 1:02d}-{_slug(label)}" + (f"--{_slug(model)}" if args.models else "")
             for index, (label, model, _) in enumerate(tests)]  # fmt: skip
    fs = filesystem_for([args.output], tests[0][2].data.s3)
    check_output(fs, args.output, frozenset({*names, TABLE_JSON, TABLE_MD}))
    prepared = [planned(config, settings, args.alpha) for _, _, config in tests]
    for (_, _, config), (_, examples) in zip(tests, prepared, strict=True):
        check_apart(fs_path(args.output), list(config.data.input), examples.files)
    with writing(args.output, tests[0][2].data.s3):  # one run writes the tests at a time
        done = []
        for (label, model, config), name, ready in zip(tests, names, prepared, strict=True):
            print(f"== {label} ({model}) -> {name}")
            directory = join(args.output, name)
            result = run_order_test(config, settings, directory, alpha=args.alpha, prepared=ready)
            done.append((label, model, name, result))
        rows = order_rows(done, args.alpha)
        table = markdown(rows, args.alpha)
        s3 = tests[0][2].data.s3
        write_text(join(args.output, TABLE_MD), table, s3)
        summary = {"verdict": headline(rows, args.alpha), "alpha": args.alpha,
                   "tests": [row.__dict__ for row in rows]}  # fmt: skip
        write_text(join(args.output, TABLE_JSON), json.dumps(summary, indent=2), s3)
    print(table, end="")
    print(f"wrote {join(args.output, TABLE_MD)} and {TABLE_JSON}; each test's order_test.json "
          "is in its directory")  # fmt: skip
    return 0
