"""The model body, eager or through ``torch.compile`` with a few fixed shapes.

A compiled body runs faster than eager on a GPU (llama-1b on an H100: 1.15x at 8 x 2,048
tokens, 1.35x at 128 x 128; shared/gpu log 09) but compiles for 21-36 s per input shape. So
a compiled body sees packed batches of a few shapes only: rows as wide as a power of two
(`fixed_width`) and exactly ``batch_tokens // width`` of them (short batches are filled with
rows that are never scored), and each shape compiles once per process.

``scoring.compile``: ``false`` never compiles; ``true`` compiles; ``"auto"`` compiles on CUDA
when the work this scorer expects, at the speed its first batch ran eagerly, would save
more than the compiles cost (`compile_pays`). Either way the first batch of every new shape
runs both ways, each timed `TIMED_RUNS` times (the medians decide), and is judged against the
same batch run eagerly in float32: the compiled body is kept only where its error is within
`ERROR_FACTOR` times the eager body's own error in the model's dtype (the rounding every eager
run already carries) and it is faster; otherwise it is dropped for the rest of the run (with
a warning when it is the less right). A half-precision model that leaves no room on its
device for a float32 copy is judged against its eager self instead (within `HALF_GAP`). Each
shape's decision is remembered (`ProbeCache`), so a later run of the same model, dtype and
device compiles a kept shape without checking it again (and Inductor's own on-disk cache
makes that compile quick) and never compiles a dropped one.
"""

from __future__ import annotations

import logging
import statistics
import time
import warnings
from collections.abc import Callable
from typing import Literal

import torch
from transformers import PreTrainedModel

from minkscan.models.probe_cache import ProbeCache

logger = logging.getLogger(__name__)

BACKEND = "inductor"
COMPILE_SECONDS = 30.0  # per shape, llama-1b on an H100 (shared/gpu log 09: 21-36 s)
EXPECTED_GAIN = 0.15  # of the eager time (measured 1.15x to 1.35x)
SMALLEST_WIDTH = 128
REQUIRED_SPEEDUP = 1.0  # compiled time x this must be under eager time to keep it
ERROR_FACTOR = 2.0  # compiled error vs float32 may be this many times eager's error vs float32
ERROR_FLOOR = 1e-4  # relative error always accepted (a float32 model's eager error is 0)
HALF_GAP = 3e-2  # without a float32 reference: largest relative gap to the eager body
TIMED_RUNS = 3  # of each body on a shape's first batch; the median decides
FLOAT32_HEADROOM = 1.25  # free device memory needed, over the float32 copy's extra bytes


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


def relative_error(hidden: torch.Tensor, reference: torch.Tensor) -> float:
    """||hidden - reference|| / ||reference|| over a whole batch, in float32."""
    reference = reference.float()
    gap = torch.linalg.vector_norm(hidden.float() - reference)
    return (gap / torch.linalg.vector_norm(reference).clamp_min(1e-12)).item()


def as_right_as_eager(compiled_error: float, eager_error: float) -> bool:
    """Whether the compiled body's error against float32 is within `ERROR_FACTOR` of the
    eager body's own (or below `ERROR_FLOOR`)."""
    return compiled_error <= max(ERROR_FACTOR * eager_error, ERROR_FLOOR)


class Body:
    """Runs the base model to its final hidden states: compiled where asked and worth it."""

    def __init__(
        self,
        model: PreTrainedModel,
        mode: bool | Literal["auto"],
        *,
        expected_tokens: int | None = None,
        cache: ProbeCache | None = None,
    ) -> None:
        """``cache``: where each shape's decision is remembered (none: decide every run)."""
        self.model = model
        self.cache = cache
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
        """First batch of a shape: as decided on an earlier run, else compiled (compiling
        it), eager and float32 eager, compared and timed."""
        key = f"compiled_body:{BACKEND}:{shape[0]}x{shape[1]}"
        remembered = self.cache.get(key) if self.cache else None
        if remembered is not None and not remembered.get("keep"):
            self.active = False
            return self.base(**inputs, use_cache=False)[0]
        reference = None if remembered else self._float32_hidden(inputs)
        compiled = self._compiled_body()
        try:
            hidden = compiled(**inputs, use_cache=False)[0]  # compiles this shape
        except Exception as error:  # noqa: BLE001 - any compile failure means eager
            warnings.warn(f"compiling the model body failed ({type(error).__name__}: {error}); "
                          "running it eagerly", RuntimeWarning, stacklevel=3)  # fmt: skip
            self.active = False
            return self.base(**inputs, use_cache=False)[0]
        if remembered:
            self._checked.add(shape)
            return hidden
        seconds, eager = self._timed(compiled, inputs)
        verdict = self._judge(hidden, eager, reference, shape)
        if verdict["right"] and seconds["compiled"] * REQUIRED_SPEEDUP >= seconds["eager"]:
            logger.info("compiled model body not faster on a %d x %d batch (%.1f vs %.1f ms); "
                        "running it eagerly", *shape, 1e3 * seconds["compiled"],
                        1e3 * seconds["eager"])  # fmt: skip
        keep = verdict["right"] and seconds["compiled"] * REQUIRED_SPEEDUP < seconds["eager"]
        if self.cache:
            self.cache.put(key, verdict | {"keep": keep, "seconds": seconds})
        if not keep:
            self.active = False
            return eager
        self._checked.add(shape)
        return hidden

    def _timed(
        self, compiled: Callable[..., object], inputs: dict[str, torch.Tensor | None]
    ) -> tuple[dict[str, float], torch.Tensor]:
        """Median seconds of `TIMED_RUNS` compiled and eager runs of ``inputs`` (taken in
        turns, so both see the same device state), and the eager output."""
        runs: dict[str, list[float]] = {"compiled": [], "eager": []}
        for _ in range(TIMED_RUNS):
            for name, body in (("compiled", compiled), ("eager", self.base)):
                start = time.perf_counter()
                out = body(**inputs, use_cache=False)[0]
                _sync(out)
                runs[name].append(time.perf_counter() - start)
        return {name: statistics.median(seconds) for name, seconds in runs.items()}, out

    def _judge(
        self,
        hidden: torch.Tensor,
        eager: torch.Tensor,
        reference: torch.Tensor | None,
        shape: tuple[int, int],
    ) -> dict[str, object]:
        """Whether the compiled ``hidden`` is as right as ``eager``: against the float32
        ``reference`` where there is one, else against ``eager`` itself; warns when not."""
        if reference is None and eager.dtype == torch.float32:
            reference = eager
        if reference is not None:
            compiled_error = relative_error(hidden, reference)
            eager_error = relative_error(eager, reference)
            right = as_right_as_eager(compiled_error, eager_error)
            said = (f"relative error {compiled_error:.3g} against float32, over {ERROR_FACTOR:g}"
                    f" x the eager body's {eager_error:.3g}")  # fmt: skip
            verdict: dict[str, object] = {"compiled_error": compiled_error,
                                          "eager_error": eager_error}  # fmt: skip
        else:
            gap = relative_error(hidden, eager)
            right = gap <= HALF_GAP
            said = f"relative gap {gap:.3g} to the eager body, over {HALF_GAP:g}"
            verdict = {"gap_to_eager": gap}
        if not right:
            warnings.warn(
                f"the compiled model body is less right than the eager one ({said} on a "
                f"{shape[0]} x {shape[1]} batch); running it eagerly",
                RuntimeWarning,
                stacklevel=4,
            )
        return verdict | {"right": right}

    def _float32_hidden(self, inputs: dict[str, torch.Tensor | None]) -> torch.Tensor | None:
        """The eager body's hidden states in float32 (the model cast up, then back: the
        round trip is exact), or None for a float32 model or one with no room to cast."""
        dtype = next(self.base.parameters()).dtype
        if dtype == torch.float32 or not _room_for_float32(self.base):
            return None
        _cast(self.base, torch.float32)
        try:
            return self.base(**inputs, use_cache=False)[0]
        finally:
            _cast(self.base, dtype)


def _cast(module: torch.nn.Module, dtype: torch.dtype) -> None:
    """``module.to(dtype)`` in place, outside inference mode (its parameters stay ordinary
    tensors that a later gradient pass may use)."""
    with torch.inference_mode(False), torch.no_grad():
        module.to(dtype)


def _room_for_float32(module: torch.nn.Module) -> bool:
    """Whether every GPU holding part of ``module`` has room for a float32 copy of its part
    of the weights (a CPU always has); logs the first that has not. A model placed across
    GPUs (``device_map``) needs the room on each, for the weights each holds."""
    extra: dict[torch.device, int] = {}
    for p in module.parameters():
        if p.device.type == "cuda":
            extra[p.device] = extra.get(p.device, 0) + p.numel() * (4 - p.element_size())
    for device, needed in extra.items():
        free, _ = torch.cuda.mem_get_info(device)
        if free < FLOAT32_HEADROOM * needed:
            logger.info("no room on %s for a float32 copy of the model body (%.1f GiB needed, "
                        "%.1f free): judging the compiled body against its eager self",
                        device, FLOAT32_HEADROOM * needed / 2**30, free / 2**30)  # fmt: skip
            return False
    return True


def _sync(tensor: torch.Tensor) -> None:
    if tensor.device.type == "cuda":
        torch.cuda.synchronize(tensor.device)
