"""The ReCaLL / Con-ReCall prefix flags that `score` and `benchmark` share: where the known
non-member (and member) texts come from, read into the config so that the run's record
(and its manifest) holds the very texts that conditioned the scores."""

from __future__ import annotations

import argparse
import json
import random
from typing import Any

from minkscan.commands.common import for_key
from minkscan.errors import UserError

# The authors' defaults (ruoyuxie/recall and CON-RECALL `options.py`, `run.py`): 12 shots,
# drawn by shuffling the known texts after seeding Python's `random` with 42.
DEFAULT_SHOTS = 12
DEFAULT_SEED = 42


def add_prefix_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--recall-prefix-from",
        metavar="PATH",
        help=for_key(
            "baselines.recall_prefix",
            "ReCaLL: known non-member texts from a `minkscan calibrate` JSON (its non-member "
            "sample) or a text file (texts separated by blank lines), local or s3://",
        ),
    )
    parser.add_argument(
        "--conrecall-from",
        metavar="PATH",
        help=for_key(
            "baselines.conrecall_member_prefix",
            "Con-ReCall: known member texts from a labelled calibration JSON (its member "
            "sample) or a text file; needs --recall-prefix-from",
        ),
    )
    parser.add_argument(
        "--recall-shots",
        type=int,
        default=DEFAULT_SHOTS,
        help=f"texts in each prefix (default: {DEFAULT_SHOTS}, as the authors): a source "
        "holding more is shuffled with --recall-seed and its first ones taken; one holding "
        "this many or fewer is used whole, in its order",
    )
    parser.add_argument(
        "--recall-seed",
        type=int,
        default=DEFAULT_SEED,
        help=f"seed of the shot choice (default: {DEFAULT_SEED}, as the authors)",
    )


def choose_shots(texts: list[str], shots: int, seed: int) -> list[str]:
    """``texts`` whole when they are ``shots`` or fewer, else the first ``shots`` after a
    shuffle seeded with ``seed`` (the authors' `random.shuffle` then slice)."""
    if len(texts) <= shots:
        return texts
    shuffled = list(texts)
    random.Random(seed).shuffle(shuffled)
    return shuffled[:shots]


def _texts(path: str, key: str, shots: int, seed: int) -> list[str]:
    """``shots`` texts (`choose_shots`) of a calibration JSON's ``key`` list or of a text
    file."""
    from minkscan.io.paths import read_text

    try:
        raw = read_text(path)
    except OSError as error:
        raise UserError(
            f"cannot read prefix texts from {path}: {error.strerror or error}"
        ) from None
    if path.endswith(".json"):
        try:
            texts = json.loads(raw).get(key) or []
        except (ValueError, AttributeError):
            raise UserError(f"{path} is not a minkscan calibration file") from None
        if not texts:
            raise UserError(f"{path} holds no {key.replace('_', ' ')} (calibrate on scores "
                            "that keep the text, with labels for member texts)")  # fmt: skip
    else:
        texts = [part.strip() for part in raw.split("\n\n") if part.strip()]
        if not texts:
            raise UserError(f"{path} holds no text")
    return choose_shots(texts, shots, seed)


def prefix_flags(args: argparse.Namespace) -> dict[str, Any]:
    """Dotted config keys for the given prefix flags (None: not given)."""
    if args.recall_shots < 1:
        raise UserError(f"--recall-shots must be at least 1, got {args.recall_shots}")
    flags: dict[str, Any] = {}
    if args.recall_prefix_from:
        flags["baselines.recall_prefix"] = _texts(
            args.recall_prefix_from, "nonmember_texts", args.recall_shots, args.recall_seed
        )
    if args.conrecall_from:
        flags["baselines.conrecall_member_prefix"] = _texts(
            args.conrecall_from, "member_texts", args.recall_shots, args.recall_seed
        )
    return flags
