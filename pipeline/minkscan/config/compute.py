"""The sections that decide what is computed: the model, the scoring of the main pass, and
the extra-pass baselines."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from minkscan.config.base import (
    DEFAULT_K_PERCENTAGES,
    DEFAULT_MODEL,
    Section,
    gpu_share,
    local_path,
)


class ModelConfig(Section):
    """Which causal LM scores the text, and how it is placed in memory."""

    name: str = Field(
        DEFAULT_MODEL,
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


class ScoringConfig(Section):
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
    part_separator: str | None = Field(
        None,
        description="Tokenise each part of a text between these characters on its own (with "
        "the tokenizer's special tokens) and score the parts' ids concatenated; the order "
        "test sets it so that every ordering of a shard holds the same tokens. None: the "
        "text is tokenised whole.",
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
        "or s3://); when set, the same pass also scores DC-PDD and AECA (columns dcpdd, aeca).",
    )
    dcpdd_clip: float = Field(
        0.01, gt=0, description="DC-PDD: upper bound of each token's calibrated term (a)."
    )
    aeca_lambda: float = Field(
        1.0,
        ge=0,
        description="AECA: weight of the NLL stream's spread (its authors sweep 1..10 against "
        "the labels; 1 is the lowest, and Fast-MIA's default).",
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
        if self.part_separator == "":
            raise ValueError("part_separator must be at least one character (or null)")
        if self.window_stride is not None and self.window_stride >= self.max_tokens:
            raise ValueError(
                f"window_stride ({self.window_stride}) must be below max_tokens "
                f"({self.max_tokens}) so that each window keeps some context"
            )
        return self


class BaselinesConfig(Section):
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
    recall_prefix: list[str] = Field(
        default_factory=list,
        description="ReCaLL: known non-member texts whose concatenation conditions every "
        "document, in this order (empty = off); `--recall-prefix-from` picks them from a "
        "calibration or a text file.",
    )
    conrecall_member_prefix: list[str] = Field(
        default_factory=list,
        description="Con-ReCall: known member texts, the contrasting prefix (empty = off; "
        "needs recall_prefix).",
    )
    gradnorm: bool = Field(
        False,
        description="GradNorm: minus the mean parameter-gradient norm (gradnorm_p) of each "
        "document's loss; one backward pass per document on a float32 target replica in its "
        "own stage.",
    )
    gradnorm_num_actors: int = Field(1, ge=1, description="GradNorm replicas.")
    gradnorm_p: Literal[1, 2, "inf"] = Field(
        "inf",
        description="GradNorm: the norm of each parameter tensor's gradient; 'inf' as MIMIR "
        "(1 and 2 are deviations).",
    )
    conrecall_gamma: float = Field(
        0.5,
        ge=0,
        description="Con-ReCall: weight of the member-prefix likelihood (the authors sweep "
        "0.1-1.0 and report the best; 0.5 is the middle of that sweep).",
    )
    pac: bool = Field(
        False,
        description="PAC: the mean polarized distance of pac_augmentations word-swapped copies "
        "minus the document's; that many extra passes.",
    )
    pac_augmentations: int = Field(5, ge=1, description="PAC: copies per document (N).")
    pac_alpha: float = Field(
        0.3, gt=0, le=1, description="PAC: word swaps per copy, as a share of the words."
    )
    pac_seed: int = Field(0, description="PAC: seed of the swaps (per document and text).")
    wbc: bool = Field(
        False,
        description="WBC: windows where the reference model's loss exceeds the target's; needs "
        "reference_model, and costs no pass beyond Ref's.",
    )
    wbc_windows: list[int] = Field(
        default_factory=lambda: [1, 5, 10, 20], description="WBC: window sizes, in tokens."
    )
    samia: bool = Field(
        False,
        description="SaMIA: sample continuations of each document's first half and compare "
        "them with its second (ROUGE-1 recall); generation, off by default.",
    )
    samia_samples: int = Field(10, ge=1, description="SaMIA: continuations per document.")
    samia_prefix_ratio: float = Field(
        0.5, gt=0, lt=1, description="SaMIA: share of the words given as the prompt."
    )
    samia_max_length: int = Field(
        1024,
        ge=2,
        description="SaMIA: tokens of prompt plus continuation, as the authors' generate "
        "(max_length=1024); a smaller value is a deviation that saves time.",
    )
    samia_zlib: bool = Field(
        False, description="SaMIA: weight each recall by its continuation's zlib length."
    )
    samia_seed: int = Field(0, description="SaMIA: seed of the sampling (per document).")
    recall_separator: str = Field(
        "",
        description="ReCaLL/Con-ReCall: text between the shots of a prefix. '' concatenates "
        "them as the authors' code does; anything else is a deviation.",
    )

    @field_validator("reference_gpus_per_actor")
    @classmethod
    def _whole_gpus(cls, gpus: float | None) -> float | None:
        return None if gpus is None else gpu_share(gpus)

    @field_validator("reference_model", mode="before")
    @classmethod
    def _name_or_section(cls, value: Any) -> Any:
        return {"name": value} if isinstance(value, str) else value

    @model_validator(mode="after")
    def _neighbor_model_needs_neighbors(self) -> BaselinesConfig:
        if self.neighbor_model is not None and self.neighbors == 0:
            raise ValueError("neighbor_model is set but neighbors is 0")
        if self.conrecall_member_prefix and not self.recall_prefix:
            raise ValueError("conrecall_member_prefix needs recall_prefix (non-member texts)")
        if self.wbc and self.reference_model is None:
            raise ValueError("wbc needs reference_model (it compares the two models' losses)")
        if any(size < 1 for size in self.wbc_windows) or not self.wbc_windows:
            raise ValueError(
                f"wbc_windows must be window sizes of at least 1, got {self.wbc_windows}"
            )
        return self
