"""A pipeline stage declared as data: what runs, with which arguments, on which resources,
how many rows at a time, in how many actors, which columns it reads and which it gives on.

A run's Ray Data wiring (`StageSpec.apply`), its capacity check (`required_cpus`,
`required_gpus`), its score files' columns and the check that every stage finds the columns
it reads (`unwired`) all derive from one list of these, so a stage is added or changed in
one place (as NeMo Curator's stages declare inputs, outputs and resources).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import ray


@dataclass(frozen=True)
class StageSpec:
    """One ``map_batches`` stage.

    ``fn`` is a function (run as Ray tasks, ``kwargs`` its keyword arguments) or a class
    (run in an actor pool of ``pool = (min, max)`` actors, ``kwargs`` its constructor's),
    or ``"module:name"`` naming one, imported only by the Ray workers that run it (see
    `deferred`): the driver that plans and wires a run never imports model code.
    ``batch_rows`` rows reach one call (None: a whole block); ``concurrency`` caps the tasks
    of a task stage running at once (None: as many as fit). A GPU stage asks Ray for its
    GPUs only, as Ray Data documents: Ray then reserves one CPU with each of its actors.
    ``takes`` lists the columns it reads from the rows that reach it; ``adds`` the output
    columns it writes into the score files, in their order; ``gives`` the columns it passes
    on for later stages only.
    """

    name: str
    fn: Callable[..., Any] | str
    kwargs: dict[str, Any]
    cpus: float
    gpus: float = 0.0
    batch_rows: int | None = None
    pool: tuple[int, int] | None = None
    concurrency: int | None = None
    takes: tuple[str, ...] = ()
    adds: tuple[str, ...] = ()
    gives: tuple[str, ...] = ()
    remote_args: dict[str, Any] = field(default_factory=dict)

    @property
    def held_cpus(self) -> float:
        """CPUs one task or actor of this stage holds on its node."""
        return 1.0 if self.gpus else self.cpus

    def resources(self) -> dict[str, float]:
        return {"num_gpus": self.gpus} if self.gpus else {"num_cpus": self.cpus}

    def callable(self) -> Callable[..., Any]:
        if not isinstance(self.fn, str):
            return self.fn
        return deferred(self.fn, is_class=self.pool is not None)

    def apply(self, dataset: ray.data.Dataset) -> ray.data.Dataset:
        """``dataset`` with this stage mapped over it (pyarrow batches)."""
        import ray

        arguments = "fn_constructor_kwargs" if self.pool else "fn_kwargs"
        compute = (
            {"compute": ray.data.ActorPoolStrategy(min_size=self.pool[0], max_size=self.pool[1])}
            if self.pool else {"concurrency": self.concurrency} if self.concurrency else {}
        )  # fmt: skip
        return dataset.map_batches(
            self.callable(),
            batch_format="pyarrow",
            batch_size=self.batch_rows,
            **{arguments: self.kwargs},
            **compute,
            **self.resources(),
            **self.remote_args,
        )


def _target(name: str) -> Any:
    module, _, attribute = name.partition(":")
    return getattr(importlib.import_module(module), attribute)


def deferred(name: str, *, is_class: bool) -> Callable[..., Any]:
    """A stand-in for the function or class ``"module:name"`` that imports it where it
    runs, on its first call or construction. It bears the target's name, as Ray Data's
    operators and progress show it. Importing the model stages (torch, transformers) takes
    the driver seconds and memory it has no use for."""
    attribute = name.partition(":")[2]
    if is_class:

        def __init__(self: Any, **kwargs: Any) -> None:
            self.stage = _target(name)(**kwargs)

        def __call__(self: Any, batch: Any) -> Any:
            return self.stage(batch)

        return type(attribute, (), {"__init__": __init__, "__call__": __call__})

    def run(batch: Any, **kwargs: Any) -> Any:
        return _target(name)(batch, **kwargs)

    run.__name__ = run.__qualname__ = attribute
    return run


def unwired(stages: Sequence[StageSpec], source: Sequence[str]) -> list[str]:
    """'stage: column' for every column a stage reads that neither ``source`` (the columns
    the pipeline starts with) nor an earlier stage gives."""
    available, missing = set(source), []
    for spec in stages:
        missing += [f"{spec.name}: {column}" for column in spec.takes if column not in available]
        available |= {*spec.adds, *spec.gives}
    return missing


def required_cpus(stages: Sequence[StageSpec]) -> float:
    """Logical CPUs the stages hold at their minimum: each actor pool's minimum, and one
    task of each task stage."""
    return sum(spec.held_cpus * (spec.pool[0] if spec.pool else 1) for spec in stages)


def required_gpus(stages: Sequence[StageSpec]) -> tuple[float, float]:
    """GPUs the actor pools hold at their minimum, and the most one actor needs on a node."""
    actors = [spec for spec in stages if spec.pool]
    total = sum(spec.gpus * spec.pool[0] for spec in actors)
    return total, max((spec.gpus for spec in actors), default=0.0)
