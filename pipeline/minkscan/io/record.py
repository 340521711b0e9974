"""What makes an output one run's (`RunRecord`), and how a later run differs from it, key by
key, for the refusal that names each difference."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class RunRecord:
    """What makes an output one run's: its columns, how input rows are cut into pieces
    (``layout``), and the model identity and score-changing settings (``identity``)."""

    columns: list[str]
    layout: dict[str, Any]
    identity: dict[str, Any]


def _flat(tree: Any, prefix: str = "") -> dict[str, Any]:
    """Nested dicts as {"a.b": leaf}."""
    if not isinstance(tree, dict):
        return {prefix: tree}
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        flat |= _flat(value, f"{prefix}.{key}" if prefix else str(key))
    return flat


def differences(recorded: dict[str, Any], wanted: dict[str, Any]) -> list[str]:
    """'key: old -> new' for every leaf that differs (``identity.`` prefixes dropped)."""
    old, new = _flat(recorded), _flat(wanted)
    return [
        f"{key.removeprefix('identity.')}: {old.get(key)!r} -> {new.get(key)!r}"
        for key in sorted(set(old) | set(new))
        if old.get(key) != new.get(key)
    ]


# The parts of a run's identity that decide what a score means (the data settings -- which
# columns, which format -- may differ between two sets scored alike), less the settings that
# only add columns beside the same scores.
SCORING_IDENTITY = ("model", "reference_model", "scoring", "baselines")
COLUMNS_ONLY = frozenset({"scoring.token_scores"})


def scoring_differences(one: dict[str, Any], other: dict[str, Any]) -> list[str]:
    """How two runs' identities differ in what decides a score (`SCORING_IDENTITY`)."""
    old = {k: v for k, v in _flat({key: one.get(key) for key in SCORING_IDENTITY}).items()
           if k not in COLUMNS_ONLY}  # fmt: skip
    new = {k: v for k, v in _flat({key: other.get(key) for key in SCORING_IDENTITY}).items()
           if k not in COLUMNS_ONLY}  # fmt: skip
    return differences(old, new)
