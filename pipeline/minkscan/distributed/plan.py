"""Everything decided before a run writes anything: the inputs, the output and the run it
belongs to, the models, and which pieces (and rows) are still to score.

Refused here, in one line each: an output that holds another run's scores (model,
settings, layout), an output that lies inside an input directory (its files would be read
as documents) or an input inside the output, a CUDA device the embedded Ray cannot have.
Inputs are matched to the output's rows by content (`InputChanges`): a moved file keeps its
rows, an edited one is scored again; an input the output holds but the run does not name
is refused by name unless ``data.drop_missing``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import pyarrow.fs as pafs

from minkscan.config import ConfigError, ScanConfig, score_settings
from minkscan.distributed.pipeline import (
    Destination,
    kept_input_columns,
    output_columns,
    score_stages,
)
from minkscan.distributed.session import joins_cluster
from minkscan.distributed.spec import StageSpec
from minkscan.io.changes import InputChanges, input_changes
from minkscan.io.inputs import InputError, InputFile, Piece
from minkscan.io.ownership import check_apart
from minkscan.io.paths import filesystem_for, fs_path
from minkscan.io.planning import plan_inputs
from minkscan.io.record import RunRecord
from minkscan.io.scores import OutputError, ScoreOutput
from minkscan.models.identity import model_identity, planned_dtype
from minkscan.models.names import check_custom_code, check_model_name
from minkscan.schema import CHARS_PER_TOKEN


@dataclass(frozen=True)
class RunPlan:
    """The run's stages, output and record, and the pieces still to score.

    ``bad`` maps input paths that will not be scored to why: unreadable now, or recorded
    as bad by an earlier run and unchanged since (with ``skip_bad_shards``; their keys in
    ``recorded_bad``).
    """

    fs: pafs.FileSystem
    output: ScoreOutput
    record: RunRecord
    stages: list[StageSpec]
    files: list[InputFile]
    pieces: list[Piece]
    to_score: list[Piece]
    done_before: int
    rows_done_before: int
    bad: dict[str, str]
    has_ids: bool
    stale: bool = False  # score files of a shard recorded as bad are left to drop
    skipped_files: dict[str, str] = field(default_factory=dict)  # not read, and why
    recorded_bad: frozenset[str] = frozenset()
    changes: InputChanges = field(default_factory=InputChanges)  # since the output's last run
    old_format: bool = False  # the output is adopted (`io.older_outputs`) before scoring

    @property
    def marker_outdated(self) -> bool:
        """Whether the output's record of its inputs must be rewritten even with nothing
        to score (inputs moved, changed or gone; an older format)."""
        return bool(self.changes) or self.old_format

    @property
    def rows_to_score(self) -> int | None:
        """Input rows still to score; None while a piece's size is unknown (whole JSON lines,
        CSV and Arrow files are counted when read)."""
        if any(piece.end is None for piece in self.to_score):
            return None
        return sum(piece.end - piece.start - len(piece.done_rows) for piece in self.to_score)


def run_record(config: ScanConfig, columns: list[str]) -> RunRecord:
    """The output's record of this run (`minkscan.io.record.RunRecord`)."""
    reference = config.baselines.reference_model
    here = not joins_cluster(config)
    gpus = config.ray.gpus_per_actor
    reference_gpus = config.baselines.reference_gpus_per_actor
    identity = {
        "model": model_identity(config.model, planned_dtype(config.model, gpus, here)),
        "reference_model": None
        if reference is None
        else model_identity(
            reference,
            planned_dtype(reference, gpus if reference_gpus is None else reference_gpus, here),
        ),
        **score_settings(config),
    }
    layout = {
        "piece_rows": config.data.piece_rows,
        "limit": config.data.limit,
    }
    return RunRecord(columns, layout, identity)


def check_device(config: ScanConfig) -> None:
    """``model.device: cuda`` where the embedded Ray has no CUDA fails now, not in an actor."""
    devices = [config.model.device]
    if config.baselines.reference_model is not None:
        devices.append(config.baselines.reference_model.device)
    if "cuda" not in devices or joins_cluster(config):
        return  # a cluster's GPU nodes need not be this machine
    import torch

    if not torch.cuda.is_available():
        raise ConfigError(
            "model.device is 'cuda' but this machine has no CUDA device: use --device auto "
            "or cpu, or --address a cluster with GPUs"
        )


def plan_run(config: ScanConfig) -> RunPlan:
    """Check inputs, output and models and decide which pieces (and rows) to score.

    Raises InputError / ShardError / OutputError / ConfigError / ModelNotAvailable before
    any work.
    """
    data = config.data
    if not data.output:
        raise InputError("no output given (data.output / --output)")
    fs = filesystem_for([*data.input, data.output], data.s3)
    output = ScoreOutput(fs, fs_path(data.output))
    # The score files' columns (and clashes with kept ones) follow from the config alone.
    columns = output_columns(config, score_stages(config, Destination(fs, output.root)))
    inputs = plan_inputs(
        fs, data, id_column=data.id_column, keep_columns=kept_input_columns(config)
    )
    files = sorted({piece.file for piece in inputs.pieces}, key=lambda file: file.path)
    check_apart(output.root, list(data.input), [file.path for file in files])
    check_device(config)
    for model in [config.model, config.baselines.reference_model]:
        if model is not None:
            check_model_name(model.name, model.revision)
            check_custom_code(model.name, model.trust_remote_code)
    record = run_record(config, columns)
    output.check(record)
    unreadable = {path.removeprefix(inputs.root + "/") for path in inputs.bad}
    recorded = output.recorded_inputs()  # None: an older format, adopted before scoring
    changes = input_changes(recorded, files, unreadable)
    if changes.missing and not data.drop_missing:
        shown = ", ".join(changes.missing[:3]) + (", ..." if len(changes.missing) > 3 else "")
        raise OutputError(
            f"output {output.root} holds the rows of {len(changes.missing)} input(s) this run "
            f"does not name ({shown}): name them again, or --drop-missing to drop their rows"
        )
    bad = dict(inputs.bad)
    pieces = inputs.pieces
    known = output.bad_shards()
    recorded_bad: frozenset[str] = frozenset()
    if data.skip_bad_shards:  # shards an earlier run found bad, unchanged since: not re-read
        recorded_bad = frozenset(file.key for file in files if file.key in known)
        bad |= {file.path: f"{known[file.key]['reason']} (found by an earlier run)"
                for file in files if file.key in recorded_bad}  # fmt: skip
        pieces = [piece for piece in pieces if piece.file.key not in recorded_bad]
    to_score, done_before, rows_before = resume(output, pieces)
    expected = sum({piece.file.path: piece.file.size for piece in to_score}.values())
    where = Destination(fs, output.root, inputs.has_ids, expected // CHARS_PER_TOKEN)
    stages = score_stages(config, where)
    stale = any(part.key in known for part in output.parts())
    return RunPlan(fs, output, record, stages, files, pieces, to_score, done_before,
                   rows_before, bad, inputs.has_ids, stale, inputs.skipped, recorded_bad,
                   changes,
                   recorded is None)  # fmt: skip


def resume(output: ScoreOutput, pieces: list[Piece]) -> tuple[list[Piece], int, int]:
    """The pieces still to score (a partly committed one with its done rows), how many were
    complete, and the rows already committed (of complete pieces and of partly committed
    ones: what a resume keeps). Reads file names only, and rows of partial pieces."""
    complete, partial = output.completion(output.parts())
    to_score, done_before, rows_before = [], 0, 0
    for piece in pieces:
        key = piece.key()
        if piece.end is None:  # whole-file piece: its end is known once it was read
            finished = [p for p in complete if (p.file, p.start) == (key.file, 0)]
            started = [p for p in partial if (p.file, p.start) == (key.file, 0)]
            key = (finished or started or [key])[0]
        if key in complete:
            done_before += 1
            rows_before += key.rows
        elif key in partial:
            done_rows = tuple(output.committed_rows(partial[key]))
            rows_before += len(done_rows)
            to_score.append(replace(piece, done_rows=done_rows))
        else:
            to_score.append(piece)
    return to_score, done_before, rows_before
