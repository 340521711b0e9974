"""One rule for every command's output directory: it holds only what that command writes,
and it is apart from what the command reads.

`score` keeps its outputs by this rule (`minkscan.io.scores.ScoreOutput`); `report`,
`benchmark`, `order-test` and `nightly`'s report take theirs by `check_owned` before any
work: a directory holding anything else -- a user's files, another command's output -- is
refused in one line naming what it holds, so no command overwrites a file it did not write.
`check_apart` refuses an output inside what a command reads, or an input inside its output
(`score`, `nightly`, `order-test`), so nothing written is read back as input. `writing`
holds a directory's writer lease (`minkscan.io.lease`, as `score` holds its output's) while a
command writes it, so two runs never interleave their files in one directory.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pyarrow.fs as pafs

from minkscan.config import S3Config
from minkscan.errors import UserError
from minkscan.io.inputs import InputError, spec_roots
from minkscan.io.lease import WriterLease
from minkscan.io.paths import filesystem_for, fs_path, is_s3
from minkscan.schema import LEASE, MARKER


class NotOwned(UserError, ValueError):
    """An output directory holds files its command did not write."""


def check_owned(
    directory: str, names: frozenset[str], flag: str, fs: pafs.FileSystem | None = None
) -> None:
    """Refuse ``directory`` (local or ``s3://``; ``flag`` names it) when it holds an entry
    other than ``names``, the entries its command writes (and its writer lease); a directory
    not there yet passes."""
    fs = fs or filesystem_for([directory], S3Config())
    where = fs_path(directory)
    info = fs.get_file_info(where)
    if info.type == pafs.FileType.NotFound:
        return
    if info.type != pafs.FileType.Directory:
        raise NotOwned(f"{flag} {directory} is a file, not a directory")
    entries = {entry.base_name for entry in fs.get_file_info(pafs.FileSelector(where))}
    entries = {name for name in entries if not name.startswith(f".{LEASE}.")} - {LEASE}
    if MARKER in entries and MARKER not in names:
        raise NotOwned(f"{flag} {directory} is a `minkscan score` output: give a directory of "
                       "its own")  # fmt: skip
    foreign = sorted(entries - names)
    if foreign:
        raise NotOwned(f"{flag} {directory} holds files this command did not write ("
                       f"{', '.join(foreign[:3])}{', ...' if len(foreign) > 3 else ''}): give a "
                       "new or empty directory")  # fmt: skip


def check_apart(output_root: str, specs: list[str], paths: list[str]) -> None:
    """Refuse an output (``output_root``, as `fs_path` gives it) inside a directory (or glob)
    an input spec reads, and an input file (``paths``) inside the output: what a command
    writes must never be read back as its input."""
    for root, whole_tree in spec_roots(specs):
        if whole_tree and (output_root == root or output_root.startswith(root + "/")):
            raise InputError(
                f"output {output_root} is inside the input {root}: its files would be "
                "read as documents; put the output outside the input"
            )
    inside = [path for path in paths if path.startswith(output_root + "/")]
    if inside:
        raise InputError(f"input {inside[0]} is inside the output {output_root}")


@contextlib.contextmanager
def writing(directory: str, s3: S3Config | None = None) -> Iterator[WriterLease]:
    """Create ``directory`` (local or ``s3://``) and hold its writer lease while the caller
    writes it; another live run holding it is refused in one line (`OutputBusy`). A local
    directory this created and nothing was written to (the command refused) is removed."""
    options = s3 or S3Config()
    local = Path(fs_path(directory)) if not is_s3(directory) else None
    created = [] if local is None else [d for d in (local, *local.parents) if not d.exists()]
    if local is not None:
        local.mkdir(parents=True, exist_ok=True)
    lease = WriterLease(fs_path(directory), s3=None if local is not None else options)
    try:
        with lease.held():
            yield lease
    finally:
        for made in created:  # innermost first; stops at the first that holds something
            if any(made.iterdir()):
                break
            made.rmdir()
