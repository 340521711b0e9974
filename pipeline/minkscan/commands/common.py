"""The flags every config-driven sub-command shares, and how they become one ScanConfig.

Same names for the same things everywhere: ``--input``, ``--output``, ``--config``,
``--model``, ``--set key.path=value`` (any config key, validated like YAML) and the
shortcuts ``--dtype``, ``--device``, ``--batch-tokens``, ``--k``, ``--limit``. Nothing heavy
is imported here, so ``--help`` stays fast.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import yaml

from minkscan.config import ConfigError, ScanConfig, load_config, yaml_problem


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    """``--config``, ``--model``, ``--set`` and the scoring shortcuts."""
    parser.add_argument("--config", type=Path, help="YAML config (default: built-in defaults)")
    parser.add_argument("--model", help="bundled name (smollm2-135m, gemma3-270m), HF id or dir")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="any config key, e.g. --set scoring.max_tokens=512 (repeatable; YAML values)",
    )
    parser.add_argument("--dtype", choices=["auto", "float32", "bfloat16"], help="model.dtype")
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], help="model.device")
    parser.add_argument(
        "--batch-tokens", type=_int_or_auto, help="scoring.batch_tokens (a number or 'auto')"
    )
    parser.add_argument(
        "--k", type=int, nargs="+", metavar="P", help="scoring.k_percentages, e.g. --k 10 20"
    )
    parser.add_argument("--limit", type=int, metavar="N", help="score the first N rows only")
    parser.add_argument("--address", help="Ray cluster address (default: embedded local Ray)")


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
    """YAML (``--config``, else the typed defaults), then ``--set``, then the shortcuts and
    ``flags`` (dotted keys; None means not given)."""
    given = {
        "model.name": args.model,
        "model.dtype": args.dtype,
        "model.device": args.device,
        "scoring.batch_tokens": args.batch_tokens,
        "scoring.k_percentages": args.k,
        "data.limit": args.limit,
        "ray.address": args.address,
        **(flags or {}),
    }
    return load_config(
        args.config,
        parse_set(args.set) | {key: value for key, value in given.items() if value is not None},
    )
