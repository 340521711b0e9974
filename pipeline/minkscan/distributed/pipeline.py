"""The scoring pipeline as a list of stage specs built from the config, and its Ray Data wiring.

pieces -> read (CPU tasks) -> tokenize (CPU tasks) -> ScoreStage (one model replica per
actor; also the extra passes on the target model: Lowercase, Neighbor, ReCaLL, Con-ReCall)
[-> PassStage for GradNorm] [-> PassStage for Ref] -> commit (one light actor writing score
files by rows, time and whole pieces) -> statistics rows (rows scored, rows written),
streamed back to the driver.

Rows travel in blocks of ``ray.block_rows`` rows from the read on (cut inside the read
tasks), so each block goes on to the next stage as soon as one is done with it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow.fs as pafs

from minkscan.config import ConfigError, ScanConfig
from minkscan.distributed.pieces import CommitStage, read_pieces
from minkscan.distributed.spec import StageSpec
from minkscan.io.inputs import DESCRIPTOR, Piece, piece_descriptor
from minkscan.methods import (
    LOSS,
    extra_pass_methods,
    passes_on,
    reads_target_logprobs,
    single_pass_columns,
)
from minkscan.schema import (
    ID,
    INPUT_IDS,
    N_TOKENS,
    PIECE,
    PIECE_ROWS,
    PRESET_STATUS,
    ROW,
    SOURCE,
    SPAN_END,
    SPAN_START,
    STATUS,
    TARGET_LOGPROBS,
    TEXT,
    TOKEN_COLUMNS,
)

if TYPE_CHECKING:
    import ray

# Tokenising and committing are light; small CPU reservations leave the cores to the model
# actors. A read task holds one CPU, Ray Data's default, which its streaming repartition into
# blocks needs to run fused into it rather than as tasks of its own.
LIGHT_TASK_CPUS = 0.25
READ_TASK_CPUS = 1.0
# The model stages, imported by the Ray workers that run them (never by the driver's plan).
STAGES = "minkscan.distributed.stages"


@dataclass(frozen=True)
class Destination:
    """Where a run reads from and writes to, and what it is about to read, as its stages
    need it: whether the inputs have ids, and roughly how many tokens they hold."""

    fs: pafs.FileSystem
    output_root: str
    has_ids: bool = False
    expected_tokens: int | None = None


def kept_input_columns(config: ScanConfig) -> tuple[str, ...]:
    """The input columns copied into the score files as they are (the text column is kept
    as ``text``, last, see `keeps_text`)."""
    data = config.data
    return tuple(name for name in data.keep_columns if name != data.text_column)


def keeps_text(config: ScanConfig) -> bool:
    """Whether score files hold the text: asked for, or needed by the token scores' spans."""
    return config.scoring.token_scores or config.data.text_column in config.data.keep_columns


def _model_columns(config: ScanConfig, on: str) -> tuple[str, ...]:
    """The extra-pass columns the ``on`` model's stage adds (registry order)."""
    return tuple(
        column
        for method in extra_pass_methods(config.baselines)
        if method.on == on
        for column in method.output_columns
    )


def score_stages(config: ScanConfig, where: Destination) -> list[StageSpec]:
    """Every stage of a scoring run, in order."""
    data, ray_config, baselines = config.data, config.ray, config.baselines
    scoring = config.scoring
    spans = (SPAN_START, SPAN_END) if scoring.token_scores else ()
    # The scoring actors pass the text on when it is kept or another model stage reads it.
    passes_text = keeps_text(config) or any(
        method.on != "target" for method in extra_pass_methods(baselines)
    )
    stages = [
        StageSpec(
            "read",
            read_pieces,
            {
                "fs": where.fs,
                "output_root": where.output_root,
                "text_column": data.text_column,
                "id_column": data.id_column if where.has_ids else None,
                "keep_columns": kept_input_columns(config),
                "skip_bad": data.skip_bad_shards,
            },
            cpus=READ_TASK_CPUS,
            batch_rows=1,
            takes=(DESCRIPTOR,),
            adds=(ID, SOURCE, ROW, *kept_input_columns(config)),
            gives=(TEXT, PRESET_STATUS, PIECE, PIECE_ROWS),
        ),
        StageSpec(
            "tokenize",
            f"{STAGES}:tokenize",
            {"model": config.model.model_dump_json(), "scoring": scoring},
            cpus=LIGHT_TASK_CPUS,
            batch_rows=ray_config.block_rows,
            concurrency=ray_config.tokenize_tasks,
            takes=(TEXT, PRESET_STATUS),
            gives=(TEXT, INPUT_IDS, STATUS, *spans),
        ),
        StageSpec(
            "score",
            f"{STAGES}:ScoreStage",
            {
                "model": config.model,
                "scoring": scoring,
                "threads": torch_threads(ray_config.cpus_per_actor),
                "baselines": baselines,
                "keep_text": passes_text,
                "gpus": int(ray_config.gpus_per_actor),
                "expected_tokens": (
                    None
                    if where.expected_tokens is None
                    else where.expected_tokens // ray_config.num_actors
                ),
            },
            cpus=ray_config.cpus_per_actor,
            gpus=ray_config.gpus_per_actor,
            batch_rows=call_rows(ray_config.block_rows, 1 + passes_on(baselines, "target")),
            pool=(ray_config.num_actors, ray_config.max_actors or ray_config.num_actors),
            takes=(TEXT, INPUT_IDS, STATUS, *spans),
            adds=(
                N_TOKENS,
                STATUS,
                *single_pass_columns(scoring),
                *(TOKEN_COLUMNS if scoring.token_scores else ()),
                *_model_columns(config, "target"),
            ),
            gives=(
                *((TEXT,) if passes_text else ()),
                *((TARGET_LOGPROBS,) if reads_target_logprobs(baselines) else ()),
            ),
        ),
    ]
    if baselines.gradnorm:
        # A target replica in float32 (gradients), one per actor, beside the scoring ones.
        stages.append(
            StageSpec(
                "gradnorm",
                f"{STAGES}:PassStage",
                {
                    "model": config.model.model_copy(update={"dtype": "float32"}),
                    "scoring": scoring,
                    "threads": torch_threads(ray_config.cpus_per_actor),
                    "baselines": baselines,
                    "on": "gradnorm",
                    "keep_text": keeps_text(config) or baselines.reference_model is not None,
                    "gpus": int(ray_config.gpus_per_actor),
                },
                cpus=ray_config.cpus_per_actor,
                gpus=ray_config.gpus_per_actor,
                batch_rows=call_rows(ray_config.block_rows, passes_on(baselines, "gradnorm")),
                pool=(baselines.gradnorm_num_actors, baselines.gradnorm_num_actors),
                takes=(TEXT, LOSS),
                adds=_model_columns(config, "gradnorm"),
                gives=(TEXT,),
            )
        )
    if baselines.reference_model is not None:
        cpus = baselines.reference_cpus_per_actor or ray_config.cpus_per_actor
        gpus = baselines.reference_gpus_per_actor
        gpus = ray_config.gpus_per_actor if gpus is None else gpus
        stages.append(
            StageSpec(
                "reference",
                f"{STAGES}:PassStage",
                {
                    "model": baselines.reference_model,
                    "scoring": scoring,
                    "threads": torch_threads(cpus),
                    "baselines": baselines,
                    "on": "reference",
                    "keep_text": keeps_text(config),
                    "gpus": int(gpus),
                },
                cpus=cpus,
                gpus=gpus,
                batch_rows=call_rows(ray_config.block_rows, passes_on(baselines, "reference")),
                pool=(baselines.reference_num_actors, baselines.reference_num_actors),
                takes=(
                    TEXT,
                    LOSS,
                    *((TARGET_LOGPROBS,) if reads_target_logprobs(baselines, "reference") else ()),
                ),  # fmt: skip
                adds=_model_columns(config, "reference"),
            )
        )
    stages.append(
        StageSpec(
            "commit",
            CommitStage,
            {
                "fs": where.fs,
                "output_root": where.output_root,
                "commit_rows": data.commit_rows,
                "commit_seconds": data.commit_seconds,
            },  # fmt: skip
            cpus=LIGHT_TASK_CPUS,
            pool=(1, 1),  # one actor sees every piece's rows, so it knows when one is whole
            takes=(PIECE, PIECE_ROWS, ROW, N_TOKENS, STATUS),
        )
    )
    return stages


def output_columns(config: ScanConfig, stages: list[StageSpec]) -> list[str]:
    """The columns of every score file the stages write, in order (the text last, if kept).

    Raises ConfigError when a kept input column would take the name of one of them.
    """
    columns = [column for spec in stages for column in spec.adds]
    clashes = sorted(
        name
        for name in kept_input_columns(config)
        if columns.count(name) > 1 or name in (TEXT, config.data.id_column)
    )
    if clashes:
        raise ConfigError(
            f"'data.keep_columns': {clashes} would overwrite the score file's own column(s) of "
            "that name; rename them in the input"
        )
    return columns + ([TEXT] if keeps_text(config) else [])


def call_rows(block_rows: int, passes: int) -> int:
    """Rows per call of a model stage that makes ``passes`` forward passes per document: a
    block's worth of passes per call, so that a call with heavy extra passes (PAC's copies,
    SaMIA's samples) still ends, and shows progress, about as often as a plain one, well
    inside Ray Data's no-progress window (30 minutes)."""
    return max(1, block_rows // max(1, passes))


def torch_threads(cpus_per_actor: float) -> int:
    """Intra-op threads for an actor holding ``cpus_per_actor`` CPUs (at least one)."""
    return max(1, math.floor(cpus_per_actor + 0.5))


def build_dataset(
    stages: list[StageSpec], pieces: list[Piece], block_rows: int
) -> ray.data.Dataset:
    """The pipeline over ``pieces``: yields one statistics row per committed score file."""
    import ray

    dataset = ray.data.from_items(
        [piece_descriptor(piece) for piece in pieces], override_num_blocks=len(pieces)
    )
    dataset = stages[0].apply(dataset)
    # Blocks of at most block_rows rows from here on (cut inside the read tasks, into which
    # Ray fuses this): each stage's output block goes on as soon as it is done, so the Ref
    # stage scores rows while the scoring actors do the next.
    dataset = dataset.repartition(target_num_rows_per_block=block_rows)
    for spec in stages[1:]:
        dataset = spec.apply(dataset)
    return dataset
