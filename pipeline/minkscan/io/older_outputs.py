"""Score outputs written by an older minkscan, brought to this version's format before a
run resumes them (format 2 keyed score files by input path and recorded each input's size
and modification time; format 3 keys them by content)."""

from __future__ import annotations

import hashlib

import pyarrow.fs as pafs

from minkscan.io.inputs import InputFile
from minkscan.io.scores import FORMAT_VERSION, ScoreOutput
from minkscan.schema import BAD_DIR, MARKER, PieceKey, part_name


def adopt(output: ScoreOutput, files: list[InputFile], derived_ids: bool) -> None:
    """Bring ``output`` to this format: the score files of each input whose recorded size
    and modification time still match are renamed from the key of its path to the key of
    its content; the others (changed, or gone) stay unseen and are scored again (`create`
    deletes them). A kill midway leaves an output this can finish."""
    if not output.exists():
        return
    marker = output.read_json(MARKER)
    if marker.get("format", 1) >= FORMAT_VERSION:
        return
    recorded = marker.get("inputs", {})
    keys = {_path_key(file.relpath): file for file in files
            if recorded.get(file.relpath) == file.stat}  # fmt: skip
    for part in output.parts():
        file = keys.get(part.key)
        if file is not None:
            piece = PieceKey(file.key, part.piece.start, part.piece.end)
            output.fs.move(part.path, f"{output.root}/{part_name(piece, part.first, part.rows)}")
    if output.fs.get_file_info(f"{output.root}/{BAD_DIR}").type == pafs.FileType.Directory:
        output.fs.delete_dir(f"{output.root}/{BAD_DIR}")  # by path key: found again if bad
    run = {k: v for k, v in marker.items() if k not in ("format", "inputs")}
    output.write_marker(run, list(keys.values()), derived_ids)


def _path_key(relpath: str) -> str:
    """The key of an input in a format-2 output: a hash of its relative path."""
    return hashlib.sha1(relpath.encode()).hexdigest()[:16]
