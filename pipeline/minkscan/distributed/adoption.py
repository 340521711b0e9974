"""Whether an older output's score rows still describe its inputs (`io.older_outputs`):
the sampled rows are read again as the pipeline reads them and tokenised as its CPU stage
tokenises them, and each row's id, status and token count compared with its scores."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from minkscan.config import ScanConfig
from minkscan.distributed.plan import RunPlan
from minkscan.io.inputs import InputFile, Piece, ShardError
from minkscan.io.older_outputs import RowsCheck
from minkscan.io.reading import read_piece
from minkscan.schema import ID, INPUT_IDS, N_TOKENS, ROW, SCORED_STATUSES, STATUS


def rows_check(config: ScanConfig, plan: RunPlan) -> RowsCheck:
    """The `RowsCheck` of this run's inputs, model and scoring settings."""
    model = config.model.model_dump_json()
    id_column = config.data.id_column if plan.has_ids else None
    pieces: dict[str, list[Piece]] = {}
    for piece in plan.pieces:  # by input, once: not a pass over every piece per input
        pieces.setdefault(piece.file.key, []).append(piece)

    def differing(file: InputFile, sample: pa.Table) -> int:
        columns = (sample[name].to_pylist() for name in (ROW, ID, N_TOKENS, STATUS))
        wanted = {row: tuple(scores) for row, *scores in zip(*columns, strict=True)}
        rows = pa.array(list(wanted), pa.int64())
        found: dict[int, tuple] = {}
        try:
            for piece in pieces.get(file.key, []):
                for block in read_piece(plan.fs, piece, text_column=config.data.text_column,
                                        id_column=id_column):  # fmt: skip
                    picked = block.filter(pc.is_in(block[ROW], value_set=rows))
                    if picked.num_rows:
                        found.update(_described(picked, model, config))
        except ShardError:
            return len(wanted)  # unreadable now: scored again (and found bad, if it is)
        return sum(found.get(row) != scores for row, scores in wanted.items())

    return differing


def _described(block: pa.Table, model: str, config: ScanConfig) -> dict[int, tuple]:
    """{row: (id, n_tokens, status)} of ``block`` as the scoring stage would write them.
    The stage's own function, imported here: it brings torch and transformers, which the
    driver of every other run does without (seconds of its start-up)."""
    from minkscan.distributed.stages import tokenize

    tokens = tokenize(block, model=model, scoring=config.scoring)
    return {
        row: (id_, len(ids) - 1 if status in SCORED_STATUSES else 0, status)
        for row, id_, ids, status in zip(
            block[ROW].to_pylist(), block[ID].to_pylist(), tokens[INPUT_IDS].to_pylist(),
            tokens[STATUS].to_pylist(), strict=True)
    }  # fmt: skip
