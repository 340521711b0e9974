"""Start-up decisions remembered between runs, so a second run on the same model, dtype and
device pays for neither probe: whether the compiled model body is kept for a batch shape
(`minkscan.models.compiled`) and which fused head path reduced fastest
(`minkscan.models.probes`).

One small JSON file per key under ``<cache>/probes/`` (`default_cache_dir`). The key is what
the decisions depend on: the model's name and configuration, a sample of its weights (a
fine-tuned copy under the same name and configuration is another model: whether its compiled
body agrees with eager is its own question), its dtype, the device's name and the versions of
torch, transformers, triton and minkscan; a change to any of them starts a fresh file.
Writes go through a temporary file and a rename, so concurrent actors on one node never read
half a file (the last writer of a key wins; both wrote the same kind of answer).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import logging
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import PreTrainedModel

from minkscan.models.names import default_cache_dir

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ProbeCache:
    """The decisions file of one model, dtype and device."""

    path: Path

    def get(self, name: str) -> Any | None:
        """The decision recorded under ``name``, or None (none yet, or an unreadable file)."""
        return self._read().get(name)

    def decisions(self, prefix: str = "") -> dict[str, Any]:
        """Every recorded decision whose name starts with ``prefix``."""
        return {name: value for name, value in self._read().items() if name.startswith(prefix)}

    def put(self, name: str, value: Any) -> None:
        """Record ``value`` under ``name``, keeping the file's other decisions."""
        decisions = self._read() | {name: value}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=self.path.parent, prefix=".probes-")
        with os.fdopen(handle, "w") as file:
            json.dump(decisions, file, indent=1, sort_keys=True)
        os.replace(temporary, self.path)

    def _read(self) -> dict[str, Any]:
        try:
            decisions = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        return decisions if isinstance(decisions, dict) else {}


def probe_cache(model: PreTrainedModel, cache_dir: Path | None = None) -> ProbeCache:
    """The decisions file for ``model`` as loaded (its dtype and device included)."""
    weight = model.get_input_embeddings().weight
    device = weight.device
    key = {
        "model": getattr(model.config, "_name_or_path", ""),
        "config": model.config.to_diff_dict(),
        "weights": weights_sample(model),
        "dtype": str(weight.dtype),
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else device.type,
        "versions": {
            name: _version(name) for name in ("torch", "transformers", "triton", "minkscan")
        },  # fmt: skip
    }
    text = json.dumps(key, sort_keys=True, default=str)
    digest = hashlib.sha256(text.encode()).hexdigest()[:20]
    return ProbeCache((cache_dir or default_cache_dir()) / "probes" / f"{digest}.json")


def weights_sample(model: torch.nn.Module, values: int = 16) -> str:
    """A digest of the first and last ``values`` values of every parameter (offloaded ones
    left out): a fine-tune moves the values of the parameters it trains, so its copy of a
    model gets a digest of its own, at the cost of a few small copies instead of reading all
    the weights."""
    digest = hashlib.sha256()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if parameter.device.type == "meta":  # offloaded (device_map): not here to read
                continue
            flat = parameter.detach().reshape(-1)
            ends = torch.cat([flat[:values], flat[-values:]]).float().cpu()
            digest.update(name.encode() + ends.numpy().tobytes())
    return digest.hexdigest()[:20]


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None
