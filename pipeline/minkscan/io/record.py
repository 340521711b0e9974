"""What makes an output one run's (`RunRecord`), and how a later run differs from it, key by
key, for the refusal that names each difference."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class RunRecord:
    """What makes an output one run's: its columns, how input rows are cut into pieces and
    commits (``layout``), and the model identity and score-changing settings (``identity``)."""

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
