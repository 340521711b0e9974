"""The flags every config-driven sub-command shares, and how they become one ScanConfig.

Same names for the same things everywhere: ``--input``, ``--output``, ``--config``,
``--model``, ``--set key.path=value`` (any config key, validated like YAML) and the
shortcuts ``--dtype``, ``--device``, ``--batch-tokens``, ``--k``, ``--limit``. Nothing heavy
is imported here, so ``--help`` stays fast.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml

from minkscan.config import ConfigError, ScanConfig, load_config, yaml_problem
from minkscan.schema import FORMATS, GROUP

# The one set of defaults (`ScanConfig`'s); a flag left out keeps the config file's value.
DEFAULTS = ScanConfig()


def config_default(key: str) -> object:
    """The default of a dotted config key, e.g. ``config_default("model.dtype")``."""
    value: Any = DEFAULTS
    for part in key.split("."):
        value = getattr(value, part)
    return value


def for_key(key: str, text: str = "") -> str:
    """Help of a flag that sets config key ``key``: what it is and the config's default."""
    default = config_default(key)
    if isinstance(default, list):
        default = " ".join(str(v) for v in default) or "none"
    return f"{text + '; ' if text else ''}{key} (default: {default})"


def add_config_arguments(
    parser: argparse.ArgumentParser,
    *,
    scoring: bool = True,
    limit_help: str = for_key("data.limit", "read the first N rows only"),
) -> None:
    """``--config``, ``--model``, ``--set``, ``--limit`` (``limit_help`` where a command reads
    it otherwise), ``--address`` and, with ``scoring``, the scoring shortcuts ``--dtype``,
    ``--device``, ``--batch-tokens``, ``--k``, ``--max-tokens`` and ``--num-actors``."""
    parser.add_argument(
        "--config", type=Path, help="YAML config (default: none, the built-in defaults)"
    )
    parser.add_argument(
        "--model",
        help=for_key(
            "model.name", "bundled name (smollm2-135m, gemma3-270m), HF id or directory"
        ),  # fmt: skip
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="any config key, e.g. --set scoring.max_tokens=512 (repeatable; YAML values; "
        "default: none)",
    )
    if scoring:
        parser.add_argument(
            "--dtype", choices=["auto", "float32", "bfloat16"], help=for_key("model.dtype")
        )
        parser.add_argument(
            "--device", choices=["auto", "cpu", "cuda"], help=for_key("model.device")
        )
        parser.add_argument(
            "--batch-tokens",
            type=_int_or_auto,
            help=for_key("scoring.batch_tokens", "a number or 'auto'"),
        )
        parser.add_argument(
            "--k", type=int, nargs="+", metavar="P", help=for_key("scoring.k_percentages")
        )
        parser.add_argument(
            "--max-tokens",
            type=int,
            help=for_key("scoring.max_tokens", "tokens scored per document (the rest truncated)"),
        )
        parser.add_argument(
            "--num-actors", type=int, help=for_key("ray.num_actors", "model replicas")
        )
    parser.add_argument("--limit", type=int, metavar="N", help=limit_help)
    parser.add_argument(
        "--address", help=for_key("ray.address", "Ray cluster to join; none starts an embedded one")
    )


def add_keep_columns_argument(parser: argparse.ArgumentParser) -> None:
    """``--keep-columns``: input columns the score files carry (the commands that score)."""
    parser.add_argument(
        "--keep-columns",
        metavar="COL[,COL...]",
        help=for_key(
            "data.keep_columns",
            "input columns copied into the score files (a group, a label, a URL); the text "
            "column is kept as 'text' (the report's shift check reads it)",
        ),  # fmt: skip
    )


def add_format_arguments(parser: argparse.ArgumentParser) -> None:
    """``--format`` and ``--text-column``: how the commands that read documents read them."""
    parser.add_argument(
        "--format", choices=FORMATS, help=for_key("data.format", "none: from each extension")
    )
    parser.add_argument("--text-column", help=for_key("data.text_column"))


def _int_or_auto(value: str) -> int | str:
    if value == "auto":
        return value
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number or 'auto', got '{value}'") from None


def parse_set(pairs: list[str]) -> dict[str, Any]:
    """``["a.b=1", ...]`` as dotted-key overrides, each value read as YAML (``null`` for
    none: an empty value is refused, not read as one)."""
    overrides = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"--set takes KEY=VALUE, got '{pair}'")
        if not value.strip():
            raise ConfigError(f"--set {key}= has no value (write --set {key}=null for none)")
        try:
            overrides[key] = yaml.safe_load(value)
        except yaml.YAMLError as error:
            raise ConfigError(f"--set {key}={value}: {yaml_problem(error)}") from None
    return overrides


def config_from_args(args: argparse.Namespace, flags: dict[str, Any] | None = None) -> ScanConfig:
    """YAML (``--config``, else the typed defaults), then ``--set``, then the shortcuts
    (those of `add_config_arguments` and `add_format_arguments` the command has) and
    ``flags`` (dotted keys; None means not given)."""
    given = {
        "model.name": args.model,
        "model.dtype": getattr(args, "dtype", None),
        "model.device": getattr(args, "device", None),
        "scoring.batch_tokens": getattr(args, "batch_tokens", None),
        "scoring.k_percentages": getattr(args, "k", None),
        "scoring.max_tokens": getattr(args, "max_tokens", None),
        "ray.num_actors": getattr(args, "num_actors", None),
        "data.format": getattr(args, "format", None),
        "data.text_column": getattr(args, "text_column", None),
        "data.limit": args.limit,
        "ray.address": args.address,
        **(flags or {}),
    }
    return load_config(
        args.config,
        parse_set(args.set) | {key: value for key, value in given.items() if value is not None},
    )


def print_verdict(report: Any) -> None:
    """A `minkscan.reporting.summary.Report` as `report` and `nightly` print it: the
    headline, each group's sentence, the blind baseline's and the audits' lines, then the
    warnings on stderr."""
    print(report.headline())
    for row in report.primary:
        print(f"  {report.sentence(row)}")
    for line in report.blind_lines() + report.audit_lines():
        print(f"  {line}")
    for warning in report.warnings:
        print(f"warning: {warning}", file=sys.stderr)


# `--fail-above`'s exit statuses beside 0 (passes) and 2 (bad input): the gate fails, or it
# can neither pass nor fail because a group's verdict is inconclusive.
GATE_FAILS, GATE_INCONCLUSIVE = 1, 3
FAIL_ABOVE_HELP = (
    "exit {fails} when a {group} is contaminated at --alpha and the lower end of its "
    "contamination interval exceeds this fraction (the verdict's own evidence), or has no "
    "scored document; exit {unsure} when none fails but a {group} is inconclusive (its text "
    "alone differs from the calibration non-members), which can neither pass nor fail "
    "(default: none, no gate)"
)


def fail_above_help(group: str) -> str:
    """The help of ``--fail-above``, naming its exit statuses."""
    return FAIL_ABOVE_HELP.format(fails=GATE_FAILS, unsure=GATE_INCONCLUSIVE, group=group)


def gate(report: Any, bound: float, command: str, group: str = GROUP) -> int:
    """``--fail-above bound`` on a `Report`: 0 passes, `GATE_FAILS` where a group is
    contaminated beyond the bound or has nothing scored, else `GATE_INCONCLUSIVE` where a
    group is inconclusive; each failing or undecided group named on stderr."""
    exceeding = report.exceeding(bound)
    for row in exceeding:
        print(f"minkscan {command}: {group} '{row.group}' is contaminated (Holm p = "
              f"{row.p_adjusted:.2g}) and its contamination is at least "
              f"{row.contamination_low:.3f} > {bound} (estimate {row.estimate()})",
              file=sys.stderr)  # fmt: skip
    for name in report.unscored:
        print(f"minkscan {command}: {group} '{name}' has no scored document, so it cannot "
              "pass --fail-above", file=sys.stderr)  # fmt: skip
    if exceeding or report.unscored:
        return GATE_FAILS
    from minkscan.reporting.summary import INCONCLUSIVE

    unsure = report.groups_decided(INCONCLUSIVE)
    for name in unsure:
        print(f"minkscan {command}: {group} '{name}' is inconclusive (its text alone differs "
              f"from the calibration non-members), so --fail-above can neither pass nor fail "
              f"it: exit {GATE_INCONCLUSIVE}", file=sys.stderr)  # fmt: skip
    return GATE_INCONCLUSIVE if unsure else 0
