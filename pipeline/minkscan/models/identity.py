"""What a model name stands for, recorded with every score output so a resumed run can tell
whether it would score with the same weights.

Nothing is downloaded and no weights are read: a bundled model is its package version; a
local directory is a digest of its config and the names, sizes and modification times of
its weight files; a Hugging Face id is its revision and, where the local hub cache has it,
the commit that revision resolved to.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from minkscan.config import ModelConfig
from minkscan.models.names import BUNDLED, bundled_version, hub_commit

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".gguf")


def model_identity(config: ModelConfig) -> dict[str, Any]:
    """{name, revision, dtype} plus what pins the weights (see the module docstring)."""
    identity: dict[str, Any] = {
        "name": config.name,
        "revision": config.revision,
        "dtype": config.dtype,
    }
    if config.name in BUNDLED:
        identity["weights"] = bundled_version(config.name)
        return identity
    directory = Path(config.name).expanduser()
    if directory.is_dir():
        identity["weights"] = _directory_digest(directory)
        return identity
    commit = hub_commit(config.name, config.revision)
    identity["weights"] = None if commit is None else f"commit:{commit}"
    return identity


def _directory_digest(directory: Path) -> str:
    digest = hashlib.sha256()
    config = directory / "config.json"
    if config.is_file():
        digest.update(config.read_bytes())
    for path in sorted(directory.rglob("*")):
        if path.is_file() and path.name.endswith(WEIGHT_SUFFIXES):
            stat = path.stat()
            entry = f"{path.relative_to(directory)}:{stat.st_size}:{stat.st_mtime_ns}"
            digest.update(entry.encode())
    return f"sha256:{digest.hexdigest()[:16]}"
