"""Score outputs written by an older minkscan, brought to this version's format before a
run resumes them (format 2 keyed score files by input path and recorded each input's size
and modification time; format 3 keys them by content).

Size and time are no proof of content (a same-size file copied with its time kept), so an
input's old score rows are kept only when its rows now match them: a sample of them is
read again and compared (`RowsCheck`, given by the run: ids, statuses and token counts).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from minkscan.io.inputs import InputFile
from minkscan.io.scores import FORMAT_VERSION, PartFile, ScoreOutput
from minkscan.schema import BAD_DIR, ID, MARKER, N_TOKENS, ROW, STATUS, PieceKey, part_name

logger = logging.getLogger(__name__)

# Score rows of one input compared with its rows now, at most this many, spread evenly.
SAMPLE_ROWS = 64
# (input, its sampled score rows: id, row, n_tokens, status) -> how many of them differ.
RowsCheck = Callable[[InputFile, pa.Table], int]


def adopt(
    output: ScoreOutput, files: list[InputFile], derived_ids: bool, differing: RowsCheck
) -> None:
    """Bring ``output`` to this format: the score files of each input whose recorded size
    and modification time still match, and whose sampled rows ``differing`` finds none
    different, are renamed from the key of its path to the key of its content; the others
    (changed, or gone) stay unseen and are scored again (`create` deletes them). A kill
    midway leaves an output this can finish."""
    if not output.exists():
        return
    marker = output.read_json(MARKER)
    if marker.get("format", 1) >= FORMAT_VERSION:
        return
    recorded = marker.get("inputs", {})
    candidates = {_path_key(file.relpath): file for file in files
                  if recorded.get(file.relpath) == file.stat}  # fmt: skip
    parts: dict[str, list[PartFile]] = {}
    for part in output.parts():
        if part.key in candidates:
            parts.setdefault(part.key, []).append(part)
    kept = {}
    for key, file in candidates.items():
        sample = _sample(output, parts.get(key, []))
        changed = differing(file, sample) if sample.num_rows else 0
        if changed:
            logger.warning("%s is scored again: its size and time are as recorded, but %d of "
                           "%d sampled rows differ from their scores", file.relpath, changed,
                           sample.num_rows)  # fmt: skip
        else:
            kept[key] = file
    for key, file in kept.items():
        for part in parts.get(key, []):
            piece = PieceKey(file.key, part.piece.start, part.piece.end)
            output.fs.move(part.path, f"{output.root}/{part_name(piece, part.first, part.rows)}")
    if output.fs.get_file_info(f"{output.root}/{BAD_DIR}").type == pafs.FileType.Directory:
        output.fs.delete_dir(f"{output.root}/{BAD_DIR}")  # by path key: found again if bad
    run = {k: v for k, v in marker.items() if k not in ("format", "inputs")}
    output.write_marker(run, list(kept.values()), derived_ids)


def _sample(output: ScoreOutput, parts: list[PartFile]) -> pa.Table:
    """Up to `SAMPLE_ROWS` score rows (id, row, n_tokens, status) of ``parts``, spread."""
    tables = []
    for part in parts:
        with output.fs.open_input_file(part.path) as handle:
            tables.append(pq.read_table(handle, columns=[ID, ROW, N_TOKENS, STATUS]))
    if not tables:
        return pa.table({ID: [], ROW: pa.array([], pa.int64()), N_TOKENS: [], STATUS: []})
    rows = pa.concat_tables(tables).sort_by(ROW)
    step = max(1, rows.num_rows // SAMPLE_ROWS)
    return rows.take(list(range(0, rows.num_rows, step))[:SAMPLE_ROWS])


def _path_key(relpath: str) -> str:
    """The key of an input in a format-2 output: a hash of its relative path."""
    return hashlib.sha1(relpath.encode()).hexdigest()[:16]
