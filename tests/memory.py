"""Peak bytes of tensor storage allocated inside a block, on any device (tests only).

Every op's outputs are seen through a dispatch mode; each new storage (not a view of an
input's) counts from its first appearance until the garbage collector finalizes it (a weak
reference's callback), the way `torch.distributed._tools.mem_tracker` counts, without its
per-module bookkeeping (which refuses a module called more than once).
"""

from __future__ import annotations

import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.weak import WeakIdKeyDictionary


class PeakMemory(TorchDispatchMode):
    """``peak``: the most bytes of storages created inside the block that were alive at once."""

    def __init__(self) -> None:
        super().__init__()
        self.current = self.peak = 0
        self._seen: WeakIdKeyDictionary = WeakIdKeyDictionary()
        self._refs: list[weakref.ref] = []

    def _release(self, size: int) -> None:
        self.current -= size

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        out = func(*args, **(kwargs or {}))
        inputs = {_address(t) for t in tree_flatten((args, kwargs))[0] if _is_tensor(t)}
        for tensor in tree_flatten(out)[0]:
            if not _is_tensor(tensor) or _address(tensor) in inputs:
                continue  # a view (or in-place result) of memory that existed already
            storage = tensor.untyped_storage()
            if storage in self._seen:
                continue
            size = storage.nbytes()
            self._seen[storage] = size
            self._refs.append(weakref.ref(storage, lambda _, size=size: self._release(size)))
            self.current += size
            self.peak = max(self.peak, self.current)
        return out


def _is_tensor(value: object) -> bool:
    return isinstance(value, torch.Tensor) and not value.is_meta


def _address(tensor: torch.Tensor) -> int:
    return tensor.untyped_storage().data_ptr()
