"""minkscan: pre-training data detection (Min-K%++ and baselines) at corpus scale.

Layout: `config` (the one typed config), `scoring` (pure torch math), `models` (loading
and the forward pass), `text` (tokenisation), `scorer` (the model stage), and the
layers built on them (`io`, `distributed` Ray pipeline, evaluation, calibration, reports,
`commands` CLI).

The public names below are imported on first use (PEP 562): importing any submodule, as
every Ray worker and the CLI's ``--help`` do, must not pay for torch and transformers.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "DocumentScorer": "minkscan.scorer",
    "score_texts": "minkscan.scorer",
    "release_scorers": "minkscan.scorer",
    "ScanConfig": "minkscan.config",
    "load_config": "minkscan.config",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'minkscan' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
