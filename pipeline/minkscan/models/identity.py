"""What a model name stands for, recorded with every score output so a resumed run can tell
whether it would score with the same weights.

Nothing is downloaded and no weights are read: a bundled model is its package version; a
local directory is a digest of its config and the names, sizes and modification times of
its weight files; a Hugging Face id is its revision and, where the local hub cache has it,
the commit that revision resolved to.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
from pathlib import Path
from typing import Any

from minkscan.config import ModelConfig
from minkscan.models.loading import BUNDLED_PACKAGES

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".gguf")


def model_identity(config: ModelConfig) -> dict[str, Any]:
    """{name, revision, dtype} plus what pins the weights (see the module docstring)."""
    identity: dict[str, Any] = {
        "name": config.name,
        "revision": config.revision,
        "dtype": config.dtype,
    }
    if config.name in BUNDLED_PACKAGES:
        package = BUNDLED_PACKAGES[config.name]
        try:
            identity["weights"] = f"{package}=={importlib.metadata.version(package)}"
        except importlib.metadata.PackageNotFoundError:
            identity["weights"] = None
        return identity
    directory = Path(config.name).expanduser()
    if directory.is_dir():
        identity["weights"] = _directory_digest(directory)
        return identity
    identity["weights"] = _hub_commit(config)
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


def _hub_commit(config: ModelConfig) -> str | None:
    """The commit the revision resolves to in the local hub cache (None when not cached)."""
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(config.name, "config.json", revision=config.revision)
    if not isinstance(found, str):
        return None
    parts = Path(found).parts
    return f"commit:{parts[parts.index('snapshots') + 1]}" if "snapshots" in parts else None
