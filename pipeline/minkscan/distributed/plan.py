"""Everything decided before a run writes anything: the inputs, the output and the run it
belongs to, the models, and which pieces (and rows) are still to score.

Refused here, in one line each: an output that holds another run's scores (model,
settings, layout), an input file that changed since it was scored into the output, an
output that lies inside an input directory (its files would be read as documents) or an
input inside the output, a CUDA device the embedded Ray cannot have.
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
from minkscan.io.inputs import InputError, InputFile, Piece, spec_roots
from minkscan.io.paths import filesystem_for, fs_path
from minkscan.io.planning import plan_inputs
from minkscan.io.record import RunRecord
from minkscan.io.scores import ScoreOutput
from minkscan.models.identity import model_identity, planned_dtype
from minkscan.models.names import check_custom_code, check_model_name
from minkscan.schema import CHARS_PER_TOKEN


@dataclass(frozen=True)
class RunPlan:
    """The run's stages, output and record, and the pieces still to score.

    ``bad`` maps input paths that will not be scored to why: unreadable now, or recorded
    as bad by an earlier run and unchanged since (with ``skip_bad_shards``).
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


def check_apart(output_root: str, specs: list[str], files: list[InputFile]) -> None:
    """Refuse an output inside a directory (or glob) an input reads, and an input inside
    the output: score files must never be read back as documents."""
    for root, whole_tree in spec_roots(specs):
        if whole_tree and (output_root == root or output_root.startswith(root + "/")):
            raise InputError(
                f"output {output_root} is inside the input {root}: its score files would be "
                "read as documents; put the output outside the input"
            )
    inside = [file.path for file in files if file.path.startswith(output_root + "/")]
    if inside:
        raise InputError(f"input {inside[0]} is inside the output {output_root}")


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
    check_apart(output.root, list(data.input), files)
    check_device(config)
    for model in [config.model, config.baselines.reference_model]:
        if model is not None:
            check_model_name(model.name, model.revision)
            check_custom_code(model.name, model.trust_remote_code)
    record = run_record(config, columns)
    output.check(record)
    output.check_inputs(files)
    bad = dict(inputs.bad)
    pieces = inputs.pieces
    if data.skip_bad_shards:  # shards an earlier run found bad, unchanged since: not re-read
        known = {entry["path"]: entry for entry in output.bad_shards().values()}
        recorded = {
            file.path for file in files
            if known.get(file.path, {}).get("fingerprint") == file.fingerprint
        }  # fmt: skip
        bad |= {path: f"{known[path]['reason']} (found by an earlier run)" for path in recorded}
        pieces = [piece for piece in pieces if piece.file.path not in recorded]
    to_score, done_before, rows_before = resume(output, pieces)
    expected = sum({piece.file.path: piece.file.size for piece in to_score}.values())
    where = Destination(fs, output.root, inputs.has_ids, expected // CHARS_PER_TOKEN)
    stages = score_stages(config, where)
    bad_keys = set(output.bad_shards())
    stale = any(part.key in bad_keys for part in output.parts())
    return RunPlan(fs, output, record, stages, files, pieces, to_score, done_before,
                   rows_before, bad, inputs.has_ids, stale, inputs.skipped)  # fmt: skip


def resume(output: ScoreOutput, pieces: list[Piece]) -> tuple[list[Piece], int, int]:
    """The pieces still to score (a partly committed one with its done rows), how many were
    complete, and their rows. Reads file names only, and rows of partial pieces."""
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
            to_score.append(replace(piece, done_rows=tuple(output.committed_rows(partial[key]))))
        else:
            to_score.append(piece)
    return to_score, done_before, rows_before
