"""`run_scoring`: the Ray Data pipeline from input pieces to committed score files.

Before Ray starts, everything that can be checked is: the inputs (listing and footers),
the output directory (`minkscan.io.scores.ScoreOutput.check`), the models. Then:
pieces -> read (CPU tasks) -> TokenizeStage (CPU actor) -> ScoreStage (one model replica
per actor; also Lowercase and Neighbor) [-> ReferenceStage] -> commit (CPU tasks writing
score files, one per piece and batch) -> statistics rows streamed back to the driver.

Completion is per input piece and read from the output's file names, so a killed run
loses at most the pieces in flight and a re-run reads only the pieces (and, of a partly
committed piece, the rows) still missing. The driver holds no per-document state: its
summary adds up the statistics each commit returns.
"""

from __future__ import annotations

import importlib.metadata
import json
import logging
import math
import os
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import ray

from minkscan.config import ConfigError, ScanConfig
from minkscan.distributed.context import data_context
from minkscan.distributed.ids import IdReport, check_ids
from minkscan.distributed.pieces import STATUS, commit_scores, read_pieces
from minkscan.distributed.stages import ReferenceStage, ScoreStage, TokenizeStage, torch_threads
from minkscan.io.paths import filesystem_for, fs_path
from minkscan.io.scores import MANIFEST, ScoreOutput
from minkscan.io.sources import (
    ID,
    ROW,
    SOURCE,
    TEXT,
    InputError,
    Piece,
    ShardError,
    piece_descriptor,
    plan_inputs,
)
from minkscan.methods import (
    baseline_columns,
    forward_passes,
    pass_labels,
    single_pass_columns,
)
from minkscan.models.loading import check_model
from minkscan.scorer import TOKEN_COLUMNS

logger = logging.getLogger(__name__)

# Tokenisation and commits are light; small CPU reservations leave the cores to the model
# actors. A read task holds one CPU, Ray Data's default, which its streaming repartition into
# blocks of `ray.block_rows` rows needs to run fused into it rather than as tasks of its own.
LIGHT_TASK_CPUS = 0.25
READ_TASK_CPUS = 1.0


@dataclass
class RunSummary:
    """What one run did (from the commits' statistics) and what the output now holds.

    ``forward_passes`` (per document) and ``pass_seconds`` (the model actors' compute
    seconds in this run, summed over actors) are keyed alike: the main pass, then each
    extra-pass method (`minkscan.methods.pass_labels`).
    """

    output: str
    manifest: str
    documents: int
    tokens: int
    seconds: float
    statuses: dict[str, int]
    total_documents: int
    resumed_documents: int
    pieces: int = 0
    pieces_done_before: int = 0
    skipped_shards: dict[str, str] = field(default_factory=dict)
    forward_passes: dict[str, int] = field(default_factory=dict)
    pass_seconds: dict[str, float] = field(default_factory=dict)
    ids: IdReport | None = None

    @property
    def docs_per_second(self) -> float:
        return self.documents / self.seconds if self.seconds > 0 else 0.0

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0

    def line(self) -> str:
        """The one-line summary printed at the end of a run."""
        statuses = ", ".join(f"{k}={v}" for k, v in sorted(self.statuses.items()))
        passes = ", ".join(
            f"{k} {v} ({self.pass_seconds.get(k, 0.0):.1f} s)"
            for k, v in self.forward_passes.items()
        )
        ids = f"; ids: {self.ids.line()}" if self.ids and self.ids.line() else ""
        return (
            f"scored {self.documents} documents ({self.tokens} tokens) in {self.seconds:.1f} s: "
            f"{self.docs_per_second:.1f} docs/s, {self.tokens_per_second:.0f} tokens/s; "
            f"statuses: {statuses or 'none'}; forward passes per document (actor seconds): "
            f"{passes}; "
            f"already done: {self.resumed_documents}; "
            f"skipped shards: {len(self.skipped_shards)}{ids}; output: {self.output}"
        )


def _reference_resources(config: ScanConfig) -> tuple[float, float]:
    """CPUs and GPUs of one reference-model actor (the scoring actor's unless set)."""
    baselines, ray_config = config.baselines, config.ray
    cpus = baselines.reference_cpus_per_actor
    gpus = baselines.reference_gpus_per_actor
    return (
        ray_config.cpus_per_actor if cpus is None else cpus,
        ray_config.gpus_per_actor if gpus is None else gpus,
    )


def required_cpus(config: ScanConfig) -> float:
    """Logical CPUs held by the tokenizer, scoring and reference actors at their minimum
    pool sizes, plus one read and one commit task."""
    cpus = READ_TASK_CPUS + 2 * LIGHT_TASK_CPUS + config.ray.num_actors * config.ray.cpus_per_actor
    if config.baselines.reference_model is not None:
        cpus += config.baselines.reference_num_actors * _reference_resources(config)[0]
    return cpus


def required_gpus(config: ScanConfig) -> tuple[float, float]:
    """GPUs held by the scoring and reference actors at their minimum pool sizes, and the
    most that one actor needs on one node."""
    ray_config, baselines = config.ray, config.baselines
    total, widest = ray_config.num_actors * ray_config.gpus_per_actor, ray_config.gpus_per_actor
    if baselines.reference_model is not None:
        reference = _reference_resources(config)[1]
        total += baselines.reference_num_actors * reference
        widest = max(widest, reference)
    return total, widest


def _joins_cluster(config: ScanConfig) -> bool:
    return bool(config.ray.address or os.environ.get("RAY_ADDRESS"))


def ensure_ray(config: ScanConfig) -> None:
    """Join the configured cluster (or the job's), else start an embedded local Ray.

    Without an address a new local Ray is started even when one is already running on
    the machine (``address="local"``): joining a stranger's cluster by accident is never
    what ``minkscan score`` without ``--address`` means. It gets at least `required_cpus`
    logical CPUs, so a small machine shares its cores instead of waiting for CPUs it does
    not have.
    """
    if ray.is_initialized():
        return
    if _joins_cluster(config):
        ray.init(address=config.ray.address, log_to_driver=False)
        return
    needed = max(math.ceil(required_cpus(config)), os.cpu_count() or 1)
    ray.init(address="local", num_cpus=needed, include_dashboard=False, log_to_driver=False)


def warn_if_too_small(config: ScanConfig) -> None:
    """Log a warning when the Ray cluster has fewer CPUs or GPUs than the run holds at its
    minimum (`required_cpus`, `required_gpus`): it then waits for an autoscaler to add nodes,
    or stalls until Ray Data's no-progress timeout. The embedded Ray always has the CPUs; it
    has only this machine's GPUs and no node will join it, so too few is an error there."""
    _check_gpus(config)
    have = ray.cluster_resources().get("CPU", 0.0)
    needed = required_cpus(config)
    if have < needed:
        logger.warning(
            "the Ray cluster has %g CPUs but this run needs at least %g (scoring and reference "
            "actors, tokenizer, one read and one commit task): it waits for more nodes; lower "
            "ray.cpus_per_actor / ray.num_actors if none will come",
            have,
            needed,
        )


def _check_gpus(config: ScanConfig) -> None:
    total, widest = required_gpus(config)
    node_gpus = [n["Resources"].get("GPU", 0.0) for n in ray.nodes() if n["Alive"]] or [0.0]
    have, most = sum(node_gpus), max(node_gpus)
    if have >= total and most >= widest:
        return
    problem = (
        f"this run needs {total:g} GPUs ({widest:g} per actor on one node: ray.gpus_per_actor"
        f"{', baselines.reference_gpus_per_actor' if config.baselines.reference_model else ''})"
        f" but the Ray cluster has {have:g} (at most {most:g} on a node)"
    )
    if not _joins_cluster(config):
        raise ConfigError(
            f"{problem}: set ray.gpus_per_actor 0 to score on CPUs, or --address a cluster "
            "with GPUs"
        )
    logger.warning(
        "%s: it waits for GPU nodes; lower ray.gpus_per_actor if none will come", problem
    )


@contextmanager
def ray_session(config: ScanConfig) -> Iterator[None]:
    """`ensure_ray` for the duration of a block; a Ray started here is shut down after it."""
    started = not ray.is_initialized()
    ensure_ray(config)
    try:
        yield
    finally:
        if started:
            ray.shutdown()


def _versions() -> dict[str, str]:
    names = ["minkscan", "torch", "transformers", "ray", "pyarrow"]
    return {name: importlib.metadata.version(name) for name in names}


def _redacted(config: ScanConfig) -> dict[str, Any]:
    dumped = config.model_dump(mode="json")
    if dumped["data"]["s3"]["secret_access_key"]:
        dumped["data"]["s3"]["secret_access_key"] = "***"
    return dumped


def kept_input_columns(config: ScanConfig) -> tuple[str, ...]:
    """The input columns copied into the score files as they are (the text column is kept
    as ``text``, after the scores, see `keeps_text`)."""
    data = config.data
    return tuple(name for name in data.keep_columns if name != data.text_column)


def keeps_text(config: ScanConfig) -> bool:
    """Whether score files hold the text: asked for, or needed by the token scores' spans."""
    return config.scoring.token_scores or config.data.text_column in config.data.keep_columns


def output_columns(config: ScanConfig) -> list[str]:
    """The columns of every score file the configuration writes, in order.

    Raises ConfigError when a kept input column would take the name of one of them.
    """
    scoring = config.scoring
    own = [
        ID,
        SOURCE,
        ROW,
        "n_tokens",
        STATUS,
        *single_pass_columns(scoring),
        *(TOKEN_COLUMNS if scoring.token_scores else ()),
        *baseline_columns(config.baselines),
    ]
    kept = kept_input_columns(config)
    clashes = [name for name in kept if name in own or name in (TEXT, config.data.id_column)]
    if clashes:
        raise ConfigError(
            f"'data.keep_columns': {clashes} would overwrite the score file's own column(s) of "
            "that name; rename them in the input"
        )
    return [*own[:3], *kept, *own[3:], *([TEXT] if keeps_text(config) else [])]


@dataclass(frozen=True)
class RunPlan:
    """Everything decided before Ray starts."""

    fs: pafs.FileSystem
    output: ScoreOutput
    columns: list[str]
    pieces: list[Piece]
    to_score: list[Piece]
    done_before: int
    rows_done_before: int
    bad: dict[str, str]
    has_ids: bool
    settings: dict[str, Any]


def plan_run(config: ScanConfig) -> RunPlan:
    """Check inputs, output and models and decide which pieces (and rows) to score.

    Raises InputError / ShardError / OutputError / ModelNotAvailable before any work.
    """
    data = config.data
    if not data.output:
        raise InputError("no output given (data.output / --output)")
    columns = output_columns(config)
    fs = filesystem_for([*data.input, data.output], data.s3)
    inputs = plan_inputs(
        fs, data, id_column=data.id_column, keep_columns=kept_input_columns(config)
    )
    pieces = inputs.pieces
    output = ScoreOutput(fs, fs_path(data.output))
    settings = {"piece_rows": data.piece_rows, "limit": data.limit}
    output.check(columns, settings)
    for model in [config.model, config.baselines.reference_model]:
        if model is not None:
            check_model(model)

    complete, partial = output.completion(output.parts())
    to_score, done_before, rows_before = [], 0, 0
    for piece in pieces:
        key = piece.key()
        if piece.end is None:  # whole-file piece: its end is known once it was read
            finished = [p for p in complete if p.startswith(f"{piece.file.key}-0-")]
            started = [p for p in partial if p.startswith(f"{piece.file.key}-0-")]
            key = (finished or started or [key])[0]
        if key in complete:
            done_before += 1
            start, end = (int(n) for n in key.split("-")[1:])
            rows_before += end - start
        elif key in partial:
            done = output.committed_rows(partial[key])
            to_score.append(Piece(piece.file, piece.start, piece.end, piece.row_groups,
                                  tuple(done)))  # fmt: skip
        else:
            to_score.append(piece)
    return RunPlan(
        fs,
        output,
        columns,
        pieces,
        to_score,
        done_before,
        rows_before,
        inputs.bad,
        inputs.has_ids,
        settings,
    )


def _shard_error(error: BaseException) -> ShardError | None:
    """The ShardError behind an error raised through Ray (which wraps it in task errors of
    its own classes, some of them subclasses of it), if any."""
    seen: set[int] = set()
    stack: list[BaseException | None] = [error]
    while stack:
        current = stack.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        if type(current) is ShardError:
            return current
        stack += [current.__cause__, current.__context__, getattr(current, "cause", None)]
    return None


def _dataset(config: ScanConfig, plan: RunPlan) -> ray.data.Dataset:
    """The pipeline over the pieces still to score; yields one statistics row per commit."""
    data, ray_config = config.data, config.ray
    pieces = ray.data.from_items(
        [piece_descriptor(piece) for piece in plan.to_score],
        override_num_blocks=len(plan.to_score),
    )
    dataset = pieces.map_batches(
        read_pieces,
        fn_kwargs={
            "fs": plan.fs,
            "output_root": plan.output.root,
            "text_column": data.text_column,
            "id_column": data.id_column if plan.has_ids else None,
            "keep_columns": kept_input_columns(config),
            "skip_bad": data.skip_bad_shards,
        },
        batch_format="pyarrow",
        batch_size=1,
        num_cpus=READ_TASK_CPUS,
    )
    # Blocks of at most block_rows rows from here on (cut inside the read tasks, into which
    # Ray fuses this): each stage's output block goes on as soon as it is done, so the Ref
    # stage scores rows while the scoring actors do the next.
    dataset = dataset.repartition(target_num_rows_per_block=ray_config.block_rows)
    dataset = dataset.map_batches(
        TokenizeStage,
        batch_format="pyarrow",
        batch_size=ray_config.block_rows,
        compute=ray.data.ActorPoolStrategy(size=1),
        num_cpus=LIGHT_TASK_CPUS,
        fn_constructor_kwargs={"model": config.model, "scoring": config.scoring},
    )
    dataset = dataset.map_batches(
        ScoreStage,
        batch_format="pyarrow",
        batch_size=ray_config.block_rows,
        compute=ray.data.ActorPoolStrategy(
            min_size=ray_config.num_actors,
            max_size=ray_config.max_actors or ray_config.num_actors,
        ),
        num_cpus=ray_config.cpus_per_actor,
        num_gpus=ray_config.gpus_per_actor,
        fn_constructor_kwargs={
            "model": config.model,
            "scoring": config.scoring,
            "threads": torch_threads(ray_config.cpus_per_actor),
            "baselines": config.baselines,
            "keep_text": keeps_text(config),
            "gpus": int(ray_config.gpus_per_actor),
        },
    )
    reference = config.baselines.reference_model
    if reference is not None:
        cpus, gpus = _reference_resources(config)
        dataset = dataset.map_batches(
            ReferenceStage,
            batch_format="pyarrow",
            batch_size=ray_config.block_rows,
            compute=ray.data.ActorPoolStrategy(size=config.baselines.reference_num_actors),
            num_cpus=cpus,
            num_gpus=gpus,
            fn_constructor_kwargs={
                "reference": reference,
                "scoring": config.scoring,
                "threads": torch_threads(cpus),
                "keep_text": keeps_text(config),
                "gpus": int(gpus),
            },
        )
    return dataset.map_batches(
        commit_scores,
        batch_format="pyarrow",
        batch_size=data.commit_rows,
        num_cpus=LIGHT_TASK_CPUS,
        fn_kwargs={"fs": plan.fs, "output_root": plan.output.root},
    )


@dataclass
class _Progress:
    """Running totals of the commits' statistics, and the periodic progress line."""

    every: float
    documents: int = 0
    tokens: int = 0
    statuses: Counter = field(default_factory=Counter)
    seconds: Counter = field(default_factory=Counter)
    started: float = field(default_factory=time.perf_counter)
    last_line: float = field(default_factory=time.perf_counter)

    def add(self, stats: pa.Table) -> None:
        self.documents += sum(stats["rows"].to_pylist())
        self.tokens += sum(stats["tokens"].to_pylist())
        for counts in stats["statuses"].to_pylist():
            self.statuses.update(json.loads(counts))
        for seconds in stats["seconds"].to_pylist():
            self.seconds.update(json.loads(seconds))
        now = time.perf_counter()
        if now - self.last_line >= self.every:
            self.last_line = now
            rate = self.documents / (now - self.started)
            logger.info("progress: %d documents committed, %.1f docs/s", self.documents, rate)


@contextmanager
def quiet_unless_terminal() -> Iterator[None]:
    """In a terminal, Ray Data's progress bars; otherwise (logs of a nightly job) none of its
    progress blocks or INFO lines: the driver's own progress line every
    ``ray.progress_seconds`` says how far the run is."""
    if sys.stderr.isatty():
        yield
        return
    ray_data = logging.getLogger("ray.data")
    level = ray_data.level
    ray_data.setLevel(logging.WARNING)
    try:
        with data_context(enable_progress_bars=False, print_on_execution_start=False):
            yield
    finally:
        ray_data.setLevel(level)


def _score(config: ScanConfig, plan: RunPlan, progress: _Progress) -> None:
    """Run the pipeline, adding up the commits' statistics as they arrive."""
    try:
        with data_context(target_max_block_size=config.ray.block_bytes):
            for stats in _dataset(config, plan).iter_batches(
                batch_format="pyarrow", batch_size=None
            ):
                progress.add(stats)
    except Exception as error:  # noqa: BLE001 - re-raised, with the shard's path if any
        shard = _shard_error(error)
        if shard is not None:
            raise shard from error
        raise


def _drop_bad_shards(plan: RunPlan) -> dict[str, str]:
    """Remove every score file of the shards that failed while being read; {path: reason}."""
    bad = plan.output.bad_shards()
    if bad:
        plan.output.delete_parts([part for part in plan.output.parts() if part.key in bad])
    return {entry["path"]: entry["reason"] for entry in bad.values()}


def run_scoring(config: ScanConfig) -> RunSummary:
    """Score ``config.data.input`` into score files under ``config.data.output``.

    Output columns: ``id``, ``source`` (input path relative to the input root), ``row``,
    then those of `minkscan.score_texts` and of the enabled baselines. A re-run scores only
    what earlier runs did not commit; every input row appears exactly once.
    """
    plan = plan_run(config)
    for path, reason in plan.bad.items():
        logger.warning("skipping bad shard %s: %s", path, reason)
    ids = None
    progress = _Progress(config.ray.progress_seconds)
    with quiet_unless_terminal():
        if plan.to_score:  # a complete output needs no Ray at all
            ensure_ray(config)
            warn_if_too_small(config)
            wanted = config.data.check_ids or config.data.require_unique_ids
            ids = check_ids(config, plan) if wanted and plan.has_ids else None
        plan.output.create(plan.columns, plan.settings)
        progress.started = time.perf_counter()
        if plan.to_score:
            _score(config, plan, progress)
    seconds = time.perf_counter() - progress.started
    skipped = {**plan.bad, **_drop_bad_shards(plan)}
    complete, _ = plan.output.completion(plan.output.parts())
    total = sum(int(k.split("-")[2]) - int(k.split("-")[1]) for k in complete)
    summary = RunSummary(
        output=config.data.output,
        manifest="",
        documents=progress.documents,
        tokens=progress.tokens,
        seconds=seconds,
        statuses=dict(progress.statuses),
        total_documents=total,
        resumed_documents=plan.rows_done_before,
        pieces=len(plan.pieces),
        pieces_done_before=plan.done_before,
        skipped_shards=skipped,
        forward_passes=forward_passes(config.baselines, config.model.name),
        pass_seconds={
            label: progress.seconds[key]
            for key, label in pass_labels(config.baselines, config.model.name).items()
        },
        ids=ids,
    )
    manifest = {
        "config": _redacted(config),
        "model": config.model.name,
        "versions": _versions(),
        "inputs": config.data.input,
        "summary": {k: v for k, v in asdict(summary).items() if k != "manifest"}
        | {
            "docs_per_second": summary.docs_per_second,
            "tokens_per_second": summary.tokens_per_second,
        },
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    summary.manifest = plan.output.write_json(MANIFEST, manifest)
    return summary
