"""Stable document ids for inputs without an id column: ``<shard path>:<row index>``.

Ray Data's ``read_parquet(include_row_hash=True)`` tags each row with
splitmix64(md5(path)[:8] + row), a bijection of the row position within its file; inverting
it recovers the row index, so ids do not depend on how Ray splits files into blocks.
"""

from __future__ import annotations

import hashlib

import numpy as np

_MASK = (1 << 64) - 1
_INVERSE_1 = pow(0xBF58476D1CE4E5B9, -1, 1 << 64)
_INVERSE_2 = pow(0x94D049BB133111EB, -1, 1 << 64)


def _path_seed(path: str) -> np.uint64:
    return np.uint64(int.from_bytes(hashlib.md5(path.encode()).digest()[:8], "little"))


def _unshift(values: np.ndarray, shift: int) -> np.ndarray:
    """Inverse of ``x ^= x >> shift`` on uint64."""
    result = values.copy()
    for _ in range(-(-64 // shift)):
        result = values ^ (result >> np.uint64(shift))
    return result


def row_indices(path: str, row_hashes: np.ndarray) -> np.ndarray:
    """Row positions within ``path`` for Ray's ``row_hash`` values of that file."""
    keys = np.asarray(row_hashes, dtype=np.uint64).copy()
    with np.errstate(over="ignore"):
        keys = _unshift(keys, 31)
        keys *= np.uint64(_INVERSE_2)
        keys = _unshift(keys, 27)
        keys *= np.uint64(_INVERSE_1)
        keys = _unshift(keys, 30)
        return keys - _path_seed(path)


def derived_ids(paths: list[str], row_hashes: np.ndarray) -> list[str]:
    """``<path>:<row>`` for each row, given its source path and Ray row hash."""
    ids: list[str] = []
    hashes = np.asarray(row_hashes, dtype=np.uint64)
    start = 0
    while start < len(paths):
        end = start
        while end < len(paths) and paths[end] == paths[start]:
            end += 1
        rows = row_indices(paths[start], hashes[start:end])
        ids.extend(f"{paths[start]}:{row}" for row in rows.tolist())
        start = end
    return ids
