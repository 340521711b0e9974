"""The model body, eager or through ``torch.compile`` with a few fixed shapes.

A compiled body runs faster than eager on a GPU (llama-1b on an H100: 1.15x at 8 x 2,048
tokens, 1.35x at 128 x 128; shared/gpu log 09) but compiles for 21-36 s per input shape. So
a compiled body sees packed batches of a few shapes only: rows as wide as a power of two
(`fixed_width`) and exactly ``batch_tokens // width`` of them (short batches are filled with
rows that are never scored), and each shape compiles once per process.

``scoring.compile``: ``false`` never compiles; ``true`` compiles; ``"auto"`` compiles on CUDA
when the work this scorer expects, at the speed its first batch ran eagerly, would save
more than the compiles cost (`compile_pays`). Either way the first batch of every new shape
runs both ways: a compiled body whose hidden states disagree with eager ones, or that is not
faster, is dropped for the rest of the run (with a warning when it disagrees).
"""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Callable
from typing import Literal

import torch
from transformers import PreTrainedModel

logger = logging.getLogger(__name__)

BACKEND = "inductor"
COMPILE_SECONDS = 30.0  # per shape, llama-1b on an H100 (shared/gpu log 09: 21-36 s)
EXPECTED_GAIN = 0.15  # of the eager time (measured 1.15x to 1.35x)
SMALLEST_WIDTH = 128
REQUIRED_SPEEDUP = 1.0  # compiled time x this must be under eager time to keep it


def fixed_width(width: int) -> int:
    """The compiled shape's row width for rows up to ``width`` tokens: a power of two."""
    fixed = SMALLEST_WIDTH
    while fixed < width:
        fixed *= 2
    return fixed


def compile_pays(expected_tokens: int, eager_tokens_per_second: float, shapes: int) -> bool:
    """Whether compiling ``shapes`` shapes saves more time than it costs over the work."""
    eager_seconds = expected_tokens / max(eager_tokens_per_second, 1e-9)
    return eager_seconds * EXPECTED_GAIN > COMPILE_SECONDS * shapes


def _tolerance(dtype: torch.dtype) -> float:
    """Largest |hidden - eager hidden| relative to the hidden states' scale."""
    return 1e-4 if dtype == torch.float32 else 3e-2


class Body:
    """Runs the base model to its final hidden states: compiled where asked and worth it."""

    def __init__(
        self,
        model: PreTrainedModel,
        mode: bool | Literal["auto"],
        *,
        expected_tokens: int | None = None,
    ) -> None:
        self.model = model
        self.base = model.base_model
        device = model.get_input_embeddings().weight.device
        self.mode = mode
        self.active = mode is True or (mode == "auto" and device.type == "cuda")
        self.expected_tokens = expected_tokens
        self._decided = mode is True
        self._compiled: Callable[..., object] | None = None
        self._checked: set[tuple[int, int]] = set()

    @property
    def fixed_shapes(self) -> bool:
        """Whether batches must come in compiled shapes (`fixed_width` rows, full batches)."""
        return self.active

    def __call__(self, inputs: dict[str, torch.Tensor | None]) -> torch.Tensor:
        if not self.active:
            return self.base(**inputs, use_cache=False)[0]
        shape = tuple(inputs["input_ids"].shape)
        if not self._decided:
            return self._eager_then_decide(inputs)
        if shape not in self._checked:
            return self._check(inputs, shape)
        return self._compiled_body()(**inputs, use_cache=False)[0]

    def _compiled_body(self) -> Callable[..., object]:
        if self._compiled is None:
            self._compiled = torch.compile(self.base, backend=BACKEND, dynamic=False)
        return self._compiled

    def _eager_then_decide(self, inputs: dict[str, torch.Tensor | None]) -> torch.Tensor:
        """``auto``: time the first batch eagerly; compile from now on only if it pays."""
        start = time.perf_counter()
        hidden = self.base(**inputs, use_cache=False)[0]
        _sync(hidden)
        rate = inputs["input_ids"].numel() / (time.perf_counter() - start)
        self._decided = True
        if self.expected_tokens is None or not compile_pays(self.expected_tokens, rate, 2):
            self.active = False
            logger.info("model body stays eager: %s expected tokens at %.0f tokens/s do not "
                        "pay for compiling it", self.expected_tokens, rate)  # fmt: skip
        return hidden

    def _check(
        self, inputs: dict[str, torch.Tensor | None], shape: tuple[int, int]
    ) -> torch.Tensor:
        """First batch of a shape: compiled (compiling it) and eager, compared and timed."""
        compiled = self._compiled_body()
        try:
            hidden = compiled(**inputs, use_cache=False)[0]  # compiles this shape
        except Exception as error:  # noqa: BLE001 - any compile failure means eager
            warnings.warn(f"compiling the model body failed ({type(error).__name__}: {error}); "
                          "running it eagerly", RuntimeWarning, stacklevel=3)  # fmt: skip
            self.active = False
            return self.base(**inputs, use_cache=False)[0]
        seconds = {}
        for name, body in (("compiled", compiled), ("eager", self.base)):
            start = time.perf_counter()
            out = body(**inputs, use_cache=False)[0]
            _sync(out)
            seconds[name] = time.perf_counter() - start
            if name == "eager":
                eager = out
        scale = eager.abs().max().clamp_min(1e-6)
        gap = ((hidden - eager).abs().max() / scale).item()
        if not gap <= _tolerance(eager.dtype):
            warnings.warn(
                f"the compiled model body disagrees with the eager one (relative gap {gap:.3g}"
                f" on a {shape[0]} x {shape[1]} batch); running it eagerly",
                RuntimeWarning,
                stacklevel=3,
            )
            self.active = False
            return eager
        if seconds["compiled"] * REQUIRED_SPEEDUP >= seconds["eager"]:
            logger.info("compiled model body not faster on a %d x %d batch (%.1f vs %.1f ms); "
                        "running it eagerly", *shape, 1e3 * seconds["compiled"],
                        1e3 * seconds["eager"])  # fmt: skip
            self.active = False
            return eager
        self._checked.add(shape)
        return hidden


def _sync(tensor: torch.Tensor) -> None:
    if tensor.device.type == "cuda":
        torch.cuda.synchronize(tensor.device)
