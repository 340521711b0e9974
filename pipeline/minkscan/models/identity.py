"""What a model name stands for, recorded with every score output so a resumed run can tell
whether it would score with the same weights.

Nothing is downloaded and no weights are read: a bundled model is its package version; a
local directory is a digest of every file that is not weights (config, generation config,
tokenizer files, chat template: their bytes) and of the names, sizes and modification times
of its weight files; a Hugging Face id is its revision and, where the local hub cache has
it, the commit that revision resolved to. The dtype is the one the actors will compute in
(`planned_dtype`), so ``auto`` and the dtype it resolves to are one setting.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from minkscan.config import ModelConfig
from minkscan.models.names import BUNDLED, bundled_version, hub_commit

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".gguf")


def planned_dtype(config: ModelConfig, gpus: float, on_this_machine: bool) -> str:
    """The dtype the model's actors compute in: as set, else (``auto``) float32 on actors
    without a GPU; with one, bfloat16 where the GPU supports it, asked of this machine's GPU
    when the actors run here (``on_this_machine``), else ``auto:cuda`` (a cluster's GPUs are
    not the driver's to ask)."""
    if config.dtype != "auto":
        return config.dtype
    if config.device == "cpu" or gpus == 0:
        return "float32"
    if not on_this_machine:
        return "auto:cuda"
    import torch  # only for a GPU run on this machine

    if not torch.cuda.is_available():
        return "float32"
    return "bfloat16" if torch.cuda.is_bf16_supported() else "float32"


def model_identity(config: ModelConfig, dtype: str | None = None) -> dict[str, Any]:
    """{name, revision, dtype} plus what pins the weights and tokenizer (see the module
    docstring); ``dtype`` is the `planned_dtype` (default: as configured)."""
    identity: dict[str, Any] = {
        "name": config.name,
        "revision": config.revision,
        "dtype": dtype or config.dtype,
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
    """Weight files by name, size and modification time; every other file (config,
    tokenizer, templates) by name and bytes."""
    digest = hashlib.sha256()
    for path in sorted(directory.rglob("*")):
        name = str(path.relative_to(directory))
        if not path.is_file() or any(part.startswith(".") for part in Path(name).parts):
            continue
        if path.name.endswith(WEIGHT_SUFFIXES):
            stat = path.stat()
            digest.update(f"{name}:{stat.st_size}:{stat.st_mtime_ns}".encode())
        else:
            digest.update(f"{name}:".encode() + hashlib.sha256(path.read_bytes()).digest())
    return f"sha256:{digest.hexdigest()[:16]}"
