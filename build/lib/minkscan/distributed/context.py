"""Scoped Ray Data context settings: set for the datasets built and run inside a block,
restored after, so one run's settings never leak into the caller's Ray Data."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import ray


@contextmanager
def data_context(**settings: Any) -> Iterator[None]:
    """Ray Data context settings for the datasets built inside the block, restored after."""
    context = ray.data.DataContext.get_current()
    previous = {name: getattr(context, name) for name in settings}
    for name, value in settings.items():
        setattr(context, name, value)
    try:
        yield
    finally:
        for name, value in previous.items():
            setattr(context, name, value)
