"""`run_scoring`: the Ray Data pipeline from Parquet shards to Parquet score shards.

read_parquet -> prepare_rows (ids, skip finished) -> TokenizeStage (CPU actors)
-> ScoreStage (one model replica per actor, ActorPoolStrategy; also the Lowercase and
Neighbor baselines) [-> ReferenceStage (reference model replicas, own actor pool)]
-> write_parquet.
Ray Data streams blocks through the stages with bounded memory, retries batches of dead
actors and restarts them; resuming is a filter on the ids already in the output.
"""

from __future__ import annotations

import importlib.metadata
import logging
import math
import os
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import ray

from pipeline.config import ScanConfig
from pipeline.distributed.stages import (
    ID,
    STATUS,
    ReferenceStage,
    ScoreStage,
    TokenizeStage,
    prepare_rows,
    torch_threads,
)
from pipeline.evaluation.extra_pass import baseline_columns, forward_passes
from pipeline.io.outputs import existing_columns, read_columns, write_manifest
from pipeline.io.paths import ShardCheck, check_shards, expand_inputs, filesystem_for, fs_path
from pipeline.scoring.aggregate import score_column_names

logger = logging.getLogger(__name__)

# Reading, id assignment and tokenisation are light; small CPU reservations leave the cores
# to the model actors.
LIGHT_TASK_CPUS = 0.25


@dataclass
class RunSummary:
    """What one run did: counts over this run and over the whole output, and timings."""

    output: str
    manifest: str
    documents: int
    tokens: int
    seconds: float
    statuses: dict[str, int]
    total_documents: int
    resumed_documents: int
    skipped_shards: dict[str, str] = field(default_factory=dict)
    forward_passes: dict[str, int] = field(default_factory=dict)

    @property
    def docs_per_second(self) -> float:
        return self.documents / self.seconds if self.seconds > 0 else 0.0

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0

    def line(self) -> str:
        """The one-line summary printed at the end of a run."""
        statuses = ", ".join(f"{k}={v}" for k, v in sorted(self.statuses.items()))
        passes = ", ".join(f"{k} {v}" for k, v in self.forward_passes.items())
        return (
            f"scored {self.documents} documents ({self.tokens} tokens) in {self.seconds:.1f} s: "
            f"{self.docs_per_second:.1f} docs/s, {self.tokens_per_second:.0f} tokens/s; "
            f"statuses: {statuses or 'none'}; forward passes per document: {passes}; "
            f"already done: {self.resumed_documents}; "
            f"skipped shards: {len(self.skipped_shards)}; output: {self.output}"
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
    pool sizes, plus one light read / write task."""
    cpus = 2 * LIGHT_TASK_CPUS + config.ray.num_actors * config.ray.cpus_per_actor
    if config.baselines.reference_model is not None:
        cpus += config.baselines.reference_num_actors * _reference_resources(config)[0]
    return cpus


def ensure_ray(config: ScanConfig) -> None:
    """Join the configured cluster (or the job's), else start an embedded local Ray.

    The embedded Ray gets at least `required_cpus` logical CPUs: on a machine with fewer
    cores the actors share them instead of waiting forever for CPUs that never come.
    """
    if ray.is_initialized():
        return
    if config.ray.address or os.environ.get("RAY_ADDRESS"):
        ray.init(address=config.ray.address, log_to_driver=False)
        return
    ray.init(include_dashboard=False, log_to_driver=False)
    needed = math.ceil(required_cpus(config))
    if ray.cluster_resources().get("CPU", 0) < needed:
        logger.warning("the pipeline's actors need %d CPUs; oversubscribing this machine", needed)
        ray.shutdown()
        ray.init(num_cpus=needed, include_dashboard=False, log_to_driver=False)


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


@contextmanager
def _data_context(**settings: Any) -> Iterator[None]:
    """Ray Data context settings for the datasets built inside the block, restored after."""
    context = ray.data.DataContext.get_current()
    previous = {name: getattr(context, name) for name in settings}
    for name, value in settings.items():
        setattr(context, name, value)
    try:
        yield
    finally:
        for name, value in previous.items():
            setattr(context, name, value)


def _read_shards(paths: list[str], fs: pafs.FileSystem, derive_ids: bool) -> ray.data.Dataset:
    """``read_parquet`` through Ray Data's V1 Parquet reader, whose read tasks honour
    ``num_cpus``; V2 adds a file-listing task that takes a whole CPU, which deadlocks a
    small node once the model actors hold their CPUs."""
    with _data_context(use_datasource_v2=False):
        return ray.data.read_parquet(
            paths,
            filesystem=fs,
            include_paths=derive_ids,
            include_row_hash=derive_ids,
            num_cpus=LIGHT_TASK_CPUS,
            # At least one block per shard: finished shards reach the output (and count as
            # done for a resume) while later ones are still scoring.
            override_num_blocks=len(paths),
        )


def output_columns(config: ScanConfig) -> list[str]:
    """The columns of every score shard the configuration writes, in order."""
    scoring = config.scoring
    return [
        ID,
        "n_tokens",
        STATUS,
        *score_column_names(scoring.k_percentages, scoring.ablation_k_percentages),
        *baseline_columns(config.baselines),
    ]


def _write_scores(
    config: ScanConfig, shards: ShardCheck, finished: pa.Array, fs: pafs.FileSystem, output: str
) -> None:
    """Read -> id / resume filter -> tokenise -> score (-> Ref) -> Parquet score shards."""
    data, ray_config = config.data, config.ray
    derive = not shards.has_id_column
    columns = [data.text_column] + ([] if derive else [data.id_column])
    dataset = _read_shards(shards.readable, fs, derive).select_columns(
        columns + (["path", "row_hash"] if derive else [])
    )
    dataset = dataset.map_batches(
        prepare_rows,
        batch_format="pyarrow",
        batch_size=None,
        num_cpus=LIGHT_TASK_CPUS,
        fn_kwargs={
            "text_column": data.text_column,
            "id_column": None if derive else data.id_column,
            "finished": finished,
        },
    )
    dataset = dataset.map_batches(
        TokenizeStage,
        batch_format="pyarrow",
        batch_size=ray_config.tokenize_batch_size,
        compute=ray.data.ActorPoolStrategy(size=1),
        num_cpus=LIGHT_TASK_CPUS,
        fn_constructor_args=(config.model, config.scoring),
    )
    dataset = dataset.map_batches(
        ScoreStage,
        batch_format="pyarrow",
        batch_size=ray_config.tokenize_batch_size,
        compute=ray.data.ActorPoolStrategy(
            min_size=ray_config.num_actors,
            max_size=ray_config.max_actors or ray_config.num_actors,
        ),
        num_cpus=ray_config.cpus_per_actor,
        num_gpus=ray_config.gpus_per_actor,
        max_restarts=ray_config.max_restarts,
        max_task_retries=ray_config.max_task_retries,
        fn_constructor_args=(
            config.model,
            config.scoring,
            torch_threads(ray_config.cpus_per_actor),
            config.baselines,
        ),
    )
    reference = config.baselines.reference_model
    if reference is not None:
        cpus, gpus = _reference_resources(config)
        dataset = dataset.map_batches(
            ReferenceStage,
            batch_format="pyarrow",
            batch_size=ray_config.tokenize_batch_size,
            compute=ray.data.ActorPoolStrategy(size=config.baselines.reference_num_actors),
            num_cpus=cpus,
            num_gpus=gpus,
            max_restarts=ray_config.max_restarts,
            max_task_retries=ray_config.max_task_retries,
            fn_constructor_args=(reference, config.scoring, torch_threads(cpus)),
        )
    dataset.write_parquet(
        output, filesystem=fs, ray_remote_args={"num_cpus": LIGHT_TASK_CPUS}
    )


def run_scoring(config: ScanConfig) -> RunSummary:
    """Score ``config.data.input`` into Parquet shards under ``config.data.output``.

    Output columns: ``id`` plus those of `pipeline.score_texts`, then those of the enabled
    baselines (``lowercase``, ``lowercase_n_tokens``, ``neighbor``, ``neighbor_source``,
    ``ref``, ``ref_n_tokens``). Ids already in the output are not scored again, so a re-run
    after a crash completes the output.
    """
    data = config.data
    if not data.output:
        raise ValueError("no output given (data.output / --output)")
    fs = filesystem_for([*data.input, data.output], data.s3)
    shards = check_shards(
        expand_inputs(data.input, fs),
        fs,
        text_column=data.text_column,
        id_column=data.id_column,
        skip_bad=data.skip_bad_shards,
    )
    for path, reason in shards.skipped.items():
        logger.warning("skipping bad shard %s: %s", path, reason)
    output = fs_path(data.output)
    finished = read_columns(fs, output, [ID])[ID].combine_chunks()
    expected = output_columns(config)
    existing = existing_columns(fs, output)
    if existing is not None and existing != expected:
        raise ValueError(
            f"{data.output} holds score shards with columns {existing}, but this configuration "
            f"writes {expected}: resume with the same scoring and baselines settings, or give "
            "a new output"
        )

    ensure_ray(config)
    started = time.perf_counter()
    with _data_context(target_max_block_size=config.ray.block_bytes):
        _write_scores(config, shards, finished, fs, output)
    seconds = time.perf_counter() - started

    written = read_columns(fs, output, [ID, "n_tokens", "status"])
    if len(finished):
        written_ids = written[ID]
        this_run = written.filter(
            pc.invert(pc.is_in(written_ids, value_set=finished.cast(written_ids.type)))
        )
    else:
        this_run = written
    summary = RunSummary(
        output=data.output,
        manifest="",
        documents=this_run.num_rows,
        tokens=int(pc.sum(this_run["n_tokens"]).as_py() or 0),
        seconds=seconds,
        statuses=dict(Counter(this_run["status"].to_pylist())),
        total_documents=written.num_rows,
        resumed_documents=len(finished),
        skipped_shards=shards.skipped,
        forward_passes=forward_passes(config.baselines, config.model.name),
    )
    manifest = {
        "config": _redacted(config),
        "model": config.model.name,
        "versions": _versions(),
        "inputs": shards.readable,
        "summary": {k: v for k, v in asdict(summary).items() if k != "manifest"} | {
            "docs_per_second": summary.docs_per_second,
            "tokens_per_second": summary.tokens_per_second,
        },
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    summary.manifest = write_manifest(fs, output, manifest)
    return summary

