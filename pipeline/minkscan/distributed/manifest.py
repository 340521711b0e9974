"""``_manifest.json``: what the last run on an output was -- its configuration (secrets
redacted), model, package versions, inputs, statistics and skipped shards."""

from __future__ import annotations

import importlib.metadata
import time
from dataclasses import asdict
from typing import Any

from minkscan.config import ScanConfig
from minkscan.distributed.progress import RunSummary
from minkscan.io.scores import ScoreOutput
from minkscan.schema import MANIFEST

PACKAGES = ("minkscan", "torch", "transformers", "ray", "pyarrow")


def _redacted(config: ScanConfig) -> dict[str, Any]:
    dumped = config.model_dump(mode="json")
    if dumped["data"]["s3"]["secret_access_key"]:
        dumped["data"]["s3"]["secret_access_key"] = "***"
    return dumped


def write_manifest(output: ScoreOutput, config: ScanConfig, summary: RunSummary) -> str:
    """Write the run's manifest into ``output``; returns its path."""
    manifest = {
        "config": _redacted(config),
        "model": config.model.name,
        "versions": {name: importlib.metadata.version(name) for name in PACKAGES},
        "inputs": config.data.input,
        "summary": {k: v for k, v in asdict(summary).items() if k != "manifest"}
        | {
            "docs_per_second": summary.docs_per_second,
            "tokens_per_second": summary.tokens_per_second,
        },
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    return output.write_json(MANIFEST, manifest)
