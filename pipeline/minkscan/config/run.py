"""The sections that decide where a run reads and writes and how Ray runs it, the whole
`ScanConfig`, and which of its settings change a score (a resume must keep those)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from minkscan.config.base import Section, gpu_share
from minkscan.config.compute import BaselinesConfig, ModelConfig, ScoringConfig
from minkscan.schema import FORMATS, ID, TEXT


class S3Config(Section):
    """Options for s3:// paths; credentials default to the usual AWS environment variables."""

    endpoint_url: str | None = None
    region: str | None = None
    anon: bool = False
    access_key_id: str | None = None
    secret_access_key: str | None = None


class DataConfig(Section):
    """Where documents come from, how they are cut into pieces, and where scores go."""

    input: list[str] = Field(
        default_factory=list, description="Files, directories or globs; local or s3://."
    )
    output: str | None = None
    format: Literal[FORMATS] | None = Field(
        None, description="Input format; None picks it from each file's extension."
    )
    input_root: str | None = Field(
        None,
        description="Directory that derived ids and sources are relative to; None: the "
        "common directory of the inputs.",
    )
    text_column: str = TEXT
    id_column: str = Field(ID, description="Derived from file and row when absent.")
    keep_columns: list[str] = Field(
        default_factory=list,
        description="Input columns copied into the score files (a group, a label, a URL); "
        "the text column is kept as 'text'.",
    )
    skip_bad_shards: bool = False
    drop_missing: bool = Field(
        False,
        description="Drop the rows of inputs the output holds but this run does not name "
        "(deleted, renamed and edited, or left out); else such a run is refused.",
    )
    check_ids: bool = Field(
        True,
        description="Count repeated and null ids over the whole input before scoring (a "
        "distributed group-by over the id column; off saves that pass).",
    )
    require_unique_ids: bool = Field(
        False, description="Refuse inputs with repeated or null ids before scoring."
    )
    piece_rows: int = Field(
        50_000,
        ge=1,
        description="Rows per unit of work and completion (whole Parquet row groups): a killed "
        "run loses at most the pieces in flight.",
    )
    limit: int | None = Field(
        None, ge=1, description="Score only the first N input rows (a quick trial)."
    )
    commit_rows: int = Field(
        4096,
        ge=1,
        description="The most rows held before a write of score files: fewer, larger files "
        "on fast runs.",
    )
    commit_seconds: float = Field(
        30.0,
        ge=0,
        description="Write the rows held once the oldest arrived this many seconds ago "
        "(checked as each scored block arrives; 0: every block): a kill loses at most about "
        "this much work, one block's scoring at least.",
    )
    s3: S3Config = Field(default_factory=S3Config)

    @field_validator("input", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    @field_validator("keep_columns", mode="before")
    @classmethod
    def _comma_separated(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [name.strip() for name in value.split(",") if name.strip()]
        return value


class RayConfig(Section):
    """How the Ray Data pipeline is laid out on the cluster."""

    address: str | None = Field(
        None, description="None starts an embedded local Ray; 'auto' or ray://... joins a cluster."
    )
    num_actors: int = Field(1, ge=1, description="Model replicas (minimum when autoscaling).")
    max_actors: int | None = Field(None, ge=1, description="Upper bound for autoscaling.")
    gpus_per_actor: float = Field(
        0.0,
        ge=0,
        description="Below 1, actors share a GPU; a whole number N > 1 splits one replica's "
        "layers over N GPUs (models larger than one GPU).",
    )
    cpus_per_actor: float = Field(
        1.5,
        gt=0,
        description="Also the actor's torch threads (rounded); 1.5 leaves half a CPU of a "
        "2-core machine to reading, tokenising and writing.",
    )
    tokenize_tasks: int = Field(
        1,
        ge=1,
        description="Tokenising tasks at once: each worker keeps its tokenizer loaded, and "
        "one fast tokenizer keeps several GPUs fed.",
    )
    block_rows: int = Field(
        256,
        ge=1,
        description="Rows per Ray Data block and per call of every stage (tokenising, scoring, "
        "Ref): a block goes on to the next stage as soon as it is done, so smaller blocks "
        "overlap the stages sooner; larger ones give the length buckets more rows to sort.",
    )
    block_bytes: int = Field(
        1 << 20,
        ge=1024,
        description="Ray Data block size cap: blocks are what actors share, so small blocks "
        "spread even a single large shard over every scoring actor.",
    )
    progress_seconds: float = Field(
        60.0, gt=0, description="Seconds between progress lines when output is not a terminal."
    )

    @field_validator("gpus_per_actor")
    @classmethod
    def _whole_gpus(cls, gpus: float) -> float:
        return gpu_share(gpus)

    @model_validator(mode="after")
    def _pool_bounds(self) -> RayConfig:
        if self.max_actors is not None and self.max_actors < self.num_actors:
            raise ValueError(
                f"max_actors ({self.max_actors}) must be at least num_actors ({self.num_actors})"
            )
        return self


class ScanConfig(Section):
    """Everything one run needs; built from YAML and CLI overrides by `load_config`."""

    model: ModelConfig = Field(default_factory=ModelConfig)
    scoring: ScoringConfig = Field(default_factory=ScoringConfig)
    data: DataConfig = Field(default_factory=DataConfig)
    ray: RayConfig = Field(default_factory=RayConfig)
    baselines: BaselinesConfig = Field(default_factory=BaselinesConfig)


# Settings that change how fast or where scores are computed, never their values: they may
# differ between the runs that fill one output (every other setting must not).
SCORE_NEUTRAL = {
    "scoring": {
        "batch_tokens", "max_batch_size", "packing", "padding_side", "head", "row_chunk",
        "vocab_chunk", "compile", "compile_reduction",
    },
    "baselines": {
        "reference_model", "reference_num_actors", "reference_cpus_per_actor",
        "reference_gpus_per_actor",
    },
}  # fmt: skip
# The data settings that decide what is scored (the others: where from, how many at a time).
SCORED_DATA = ("text_column", "id_column", "format")


def score_settings(config: ScanConfig) -> dict[str, Any]:
    """Every setting that changes a score, by section (the models' identities apart: see
    `minkscan.models.identity`)."""
    dumped = config.model_dump(mode="json")
    settings = {
        section: {k: v for k, v in dumped[section].items() if k not in neutral}
        for section, neutral in SCORE_NEUTRAL.items()
    }
    settings["data"] = {key: dumped["data"][key] for key in SCORED_DATA}
    return settings
