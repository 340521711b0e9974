"""The one typed configuration object that flows from YAML / CLI flags to every stage.

Every section rejects unknown keys, so a typo in a YAML file fails before any work
starts, with the dotted path of the offending key in the message.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from minkscan.errors import UserError
from minkscan.schema import FORMATS, ID, TEXT

DEFAULT_K_PERCENTAGES = [10, 20, 30, 40, 50, 60, 70, 80, 90, 100]


class ConfigError(UserError, ValueError):
    """A configuration value is missing, unknown or invalid; the message names the key."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


def _gpu_share(gpus: float) -> float:
    """GPUs of one actor: a share of one GPU, or whole GPUs that one replica is split over."""
    if gpus > 1 and not float(gpus).is_integer():
        raise ValueError(f"more than one GPU per actor must be a whole number, got {gpus}")
    return gpus


def local_path(value: str) -> str:
    """A relative local path made absolute (actors and jobs do not share the driver's working
    directory); URIs such as ``s3://`` are kept as they are."""
    if "://" in value:
        return value
    return os.path.abspath(os.path.expanduser(value))


class ModelConfig(_Section):
    """Which causal LM scores the text, and how it is placed in memory."""

    name: str = Field(
        "smollm2-135m",
        description="'smollm2-135m', 'gemma3-270m', a Hugging Face model id or a local directory.",
    )
    dtype: Literal["auto", "float32", "bfloat16"] = Field(
        "auto",
        description="'auto': bfloat16 on a GPU that supports it, float32 elsewhere.",
    )
    device: Literal["auto", "cpu", "cuda"] = Field(
        "auto", description="'auto' picks cuda when a GPU is visible, else cpu."
    )
    trust_remote_code: bool = False
    revision: str | None = None
    cache_dir: Path | None = Field(
        None, description="Where dequantised bundled models are cached (default ~/.cache/minkscan)."
    )

    @field_validator("name")
    @classmethod
    def _local_directory_absolute(cls, name: str) -> str:
        """A name that is a local directory, absolute (else: bundled or a hub id, as given)."""
        return local_path(name) if Path(name).expanduser().is_dir() else name

    @field_validator("cache_dir")
    @classmethod
    def _cache_absolute(cls, directory: Path | None) -> Path | None:
        return None if directory is None else Path(local_path(str(directory)))


class ScoringConfig(_Section):
    """What the single forward pass computes per document and how it is batched."""

    k_percentages: list[int] = Field(default_factory=lambda: list(DEFAULT_K_PERCENTAGES))
    ablation_k_percentages: list[int] = Field(
        default_factory=lambda: [20],
        description="k values for the Min-K%++ ablations (mu only, sigma only).",
    )
    max_tokens: int = Field(2048, ge=2, description="Longer documents are truncated.")
    prepend_bos: bool = Field(
        False, description="Prepend BOS (if the tokenizer does not) so the first token is scored."
    )
    batch_tokens: int | Literal["auto"] = Field(
        "auto",
        description="Token positions per forward batch; 'auto': 8,192 on a CPU, on a GPU as "
        "many as fit in 70% of its free memory (minkscan.models.workspace).",
    )
    max_batch_size: int | None = Field(
        None, ge=1, description="Rows per forward batch; None: 64 on a CPU, no cap on a GPU."
    )
    packing: bool = Field(
        True,
        description="Pack several documents into each row, back to back with positions "
        "restarting per document, so no compute goes to padding; checked once at start-up "
        "against one document per row, and padding is used (with a warning) when this "
        "model's attention does not keep packed documents apart.",
    )
    padding_side: Literal["right", "left"] = Field(
        "right", description="Where rows are padded when not packing."
    )
    head: Literal["auto", "fused", "chunked", "logits", "triton"] = Field(
        "auto",
        description="'fused' computes logits tile by tile from hidden states (torch); "
        "'chunked' takes cuBLAS logits of a row chunk and reduces them in one Triton pass "
        "(CUDA); 'triton' runs the whole head in one Triton kernel (CUDA); 'logits' reduces "
        "the model's own logits; 'auto' keeps the fused paths that match the model's logits "
        "at start-up and, of several, the fastest; else 'logits'.",
    )
    row_chunk: int | None = Field(
        None,
        ge=1,
        description="Token rows per head tile; None: 2,048 on a CPU, sized from free memory "
        "on a GPU (minkscan.models.workspace.head_tiles).",
    )
    vocab_chunk: int | None = Field(
        None,
        ge=128,
        description="Vocabulary ids per torch head tile; None: 1,024 on a CPU (cache-resident "
        "tiles), the whole vocabulary on a GPU.",
    )
    window_stride: int | None = Field(
        None,
        ge=1,
        description="Score documents longer than max_tokens with sliding windows of max_tokens "
        "advancing by this many tokens (see minkscan.scoring.windows); None truncates.",
    )
    compile: bool | Literal["auto"] = Field(
        "auto",
        description="torch.compile the model body, fed packed batches of a few fixed shapes "
        "(each compiles once): 'auto' on CUDA where the expected work pays for the compile "
        "time, true anywhere, false never. Kept only where its first batch of each shape "
        "matches eager and runs faster (minkscan.models.compiled).",
    )
    compile_reduction: bool = Field(
        False,
        description="torch.compile the per-tile reduction: same numbers, about half the "
        "reduction time on CPU, after a one-off compile of ~5-20 s (needs a C++ compiler).",
    )
    gap_window: int = Field(
        3, ge=1, description="Gap-K%: tokens per moving average of the normalised gap."
    )
    dcpdd_frequencies: str | None = Field(
        None,
        description="Token-frequency file of a reference corpus (`minkscan frequencies`, local "
        "or s3://); when set, the same pass also scores DC-PDD (column dcpdd).",
    )
    dcpdd_clip: float = Field(
        0.01, gt=0, description="DC-PDD: upper bound of each token's calibrated term (a)."
    )
    token_scores: bool = Field(
        False,
        description="Also keep every scored token's Min-K%++ z-score and character span "
        "(columns token_z, token_start, token_end, plus the text) from the same forward pass; "
        "reports use them to show which tokens pulled a document's score down.",
    )

    @field_validator("dcpdd_frequencies")
    @classmethod
    def _frequencies_absolute(cls, path: str | None) -> str | None:
        return None if path is None else local_path(path)

    @field_validator("batch_tokens")
    @classmethod
    def _at_least_two(cls, value: int | str) -> int | str:
        if isinstance(value, int) and value < 2:
            raise ValueError(f"must be 'auto' or at least 2, got {value}")
        return value

    @field_validator("k_percentages", "ablation_k_percentages")
    @classmethod
    def _percentages_in_range(cls, values: list[int]) -> list[int]:
        if not values:
            raise ValueError("needs at least one percentage")
        bad = [v for v in values if not 1 <= v <= 100]
        if bad:
            raise ValueError(f"percentages must be in 1..100, got {bad}")
        return sorted(set(values))

    @model_validator(mode="after")
    def _stride_leaves_context(self) -> ScoringConfig:
        if self.window_stride is not None and self.window_stride >= self.max_tokens:
            raise ValueError(
                f"window_stride ({self.window_stride}) must be below max_tokens "
                f"({self.max_tokens}) so that each window keeps some context"
            )
        return self


class BaselinesConfig(_Section):
    """Extra-pass baselines added as stages of the scoring pipeline (all off by default).

    Each costs forward passes per document on top of the main pass; the run reports how many.
    """

    lowercase: bool = Field(False, description="Loss of the text minus loss of its lowercase.")
    reference_model: ModelConfig | None = Field(
        None,
        description="Ref: target loss minus this model's loss, on its own tokenizer; a name "
        "or a model section. Runs in its own actor pool.",
    )
    reference_num_actors: int = Field(1, ge=1, description="Reference model replicas.")
    reference_cpus_per_actor: float | None = Field(
        None, gt=0, description="CPUs per reference actor (default: ray.cpus_per_actor)."
    )
    reference_gpus_per_actor: float | None = Field(
        None, ge=0, description="GPUs per reference actor (default: ray.gpus_per_actor)."
    )
    neighbors: int = Field(0, ge=0, description="Neighbor: N perturbed neighbours (0 = off).")
    neighbor_model: str | None = Field(
        None, description="Masked LM proposing neighbours; None: the target model proposes."
    )
    neighbor_fraction: float = Field(0.15, gt=0, le=1, description="Share of tokens replaced.")
    neighbor_seed: int = 0

    @field_validator("reference_gpus_per_actor")
    @classmethod
    def _whole_gpus(cls, gpus: float | None) -> float | None:
        return None if gpus is None else _gpu_share(gpus)

    @field_validator("reference_model", mode="before")
    @classmethod
    def _name_or_section(cls, value: Any) -> Any:
        return {"name": value} if isinstance(value, str) else value

    @model_validator(mode="after")
    def _neighbor_model_needs_neighbors(self) -> BaselinesConfig:
        if self.neighbor_model is not None and self.neighbors == 0:
            raise ValueError("neighbor_model is set but neighbors is 0")
        return self


class S3Config(_Section):
    """Options for s3:// paths; credentials default to the usual AWS environment variables."""

    endpoint_url: str | None = None
    region: str | None = None
    anon: bool = False
    access_key_id: str | None = None
    secret_access_key: str | None = None


class DataConfig(_Section):
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
        4096, ge=1, description="Rows per write of score files (several per piece)."
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


class RayConfig(_Section):
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
        return _gpu_share(gpus)

    @model_validator(mode="after")
    def _pool_bounds(self) -> RayConfig:
        if self.max_actors is not None and self.max_actors < self.num_actors:
            raise ValueError(
                f"max_actors ({self.max_actors}) must be at least num_actors ({self.num_actors})"
            )
        return self


class ScanConfig(_Section):
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


def _format_validation_error(error: ValidationError) -> str:
    lines = []
    for item in error.errors():
        key = ".".join(str(part) for part in item["loc"]) or "<root>"
        if item["type"] == "extra_forbidden":
            lines.append(f"unknown key '{key}'")
        else:
            lines.append(f"'{key}': {item['msg']}")
    return "invalid configuration: " + "; ".join(lines)


def _set_dotted(tree: dict[str, Any], dotted_key: str, value: Any) -> None:
    parts = dotted_key.split(".")
    node = tree
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"'{dotted_key}': '{part}' is not a section")
        node = child
    node[parts[-1]] = value


def build_config(
    raw: dict[str, Any] | None = None, overrides: dict[str, Any] | None = None
) -> ScanConfig:
    """Validate a nested dict plus dotted-key overrides (``{"model.name": ...}``) into a ScanConfig.

    Overrides whose value is None are ignored, so unset CLI flags keep the YAML value.
    """
    tree: dict[str, Any] = dict(raw or {})
    for key, value in (overrides or {}).items():
        if value is not None:
            _set_dotted(tree, key, value)
    try:
        return ScanConfig.model_validate(tree)
    except ValidationError as error:
        raise ConfigError(_format_validation_error(error)) from None


def yaml_problem(error: yaml.YAMLError) -> str:
    """A YAML error as 'invalid YAML at line L, column C: problem' (1-based)."""
    mark = getattr(error, "problem_mark", None)
    problem = getattr(error, "problem", None) or str(error).splitlines()[0]
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
    return f"invalid YAML{where}: {problem}"


def load_config(
    path: str | Path | None = None, overrides: dict[str, Any] | None = None
) -> ScanConfig:
    """Read a YAML file (optional) and apply dotted-key overrides; fail early on any bad key."""
    raw: dict[str, Any] = {}
    if path is not None:
        path = Path(path)
        if not path.is_file():
            raise ConfigError(f"config file not found: {path}")
        try:
            loaded = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError as error:
            raise ConfigError(f"{path}: {yaml_problem(error)}") from None
        if not isinstance(loaded, dict):
            raise ConfigError(f"{path}: top level must be a mapping of sections")
        raw = loaded
    return build_config(raw, overrides)
