"""`run_scoring`: one scoring run, from its plan to its manifest.

Before Ray starts, everything that can be checked is (`minkscan.distributed.plan`). The run
then takes the output's writer lease (one run writes an output at a time), records itself
in the output's marker, starts or joins Ray, counts ids, streams the pipeline
(`minkscan.distributed.pipeline`) and adds up what the commits report
(`minkscan.distributed.progress`). Completion is per input piece and read from the
output's file names, so a killed run loses at most the pieces in flight and a re-run reads
only the pieces (and, of a partly committed piece, the rows) still missing.
"""

from __future__ import annotations

import logging
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable

import pyarrow.fs as pafs

from minkscan.config import ScanConfig
from minkscan.distributed.adoption import rows_check
from minkscan.distributed.console import stop_signals_mark_stopping
from minkscan.distributed.context import data_context
from minkscan.distributed.failures import user_error_in
from minkscan.distributed.ids import IdReport, check_ids
from minkscan.distributed.manifest import write_manifest
from minkscan.distributed.pipeline import build_dataset
from minkscan.distributed.plan import RunPlan, plan_run
from minkscan.distributed.progress import Progress, RunSummary, quiet_ray
from minkscan.distributed.session import (
    end_leftover_sessions,
    joins_cluster,
    ray_session,
    verbose,
    warn_if_too_small,
)
from minkscan.errors import Interrupted, RunFailed, interrupted_code
from minkscan.io.lease import WriterLease
from minkscan.io.older_outputs import adopt
from minkscan.io.paths import is_s3
from minkscan.methods import forward_passes, pass_labels
from minkscan.models.names import first_use_note

logger = logging.getLogger(__name__)


def run_scoring(config: ScanConfig) -> RunSummary:
    """Score ``config.data.input`` into score files under ``config.data.output``.

    Output columns: ``id``, ``source`` (input path relative to the input root), ``row``,
    then those of `minkscan.score_texts` and of the enabled baselines. A re-run scores only
    what earlier runs did not commit; every input row appears exactly once.
    """
    plan = plan_run(config)
    if not joins_cluster(config):
        end_leftover_sessions()  # even a run that needs no Ray tidies up after a killed one
    for path, reason in plan.bad.items():
        logger.warning("skipping bad shard %s: %s", path, reason)
    if plan.to_score and not joins_cluster(config):  # a cluster's nodes keep their own cache
        for model in (config.model, config.baselines.reference_model):
            note = model and first_use_note(model.name, model.cache_dir)
            if note:
                logger.info(note)
    fresh = plan.fs.get_file_info(plan.output.root).type == pafs.FileType.NotFound
    plan.fs.create_dir(plan.output.root, recursive=True)
    lease = WriterLease(plan.output.root, s3=config.data.s3 if is_s3(config.data.output) else None)
    try:
        with lease.held():
            if plan.old_format:  # an output of an older minkscan: rekeyed by content
                adopt(plan.output, plan.files, not plan.has_ids, rows_check(config, plan))
            plan = plan_run(config)  # again, now that no other run can write the output
            progress = Progress(config.ray.progress_seconds, plan.rows_to_score)
            _forget_reread(plan)
            ids = None
            if plan.to_score:
                ids = _score(config, plan, progress, lease)
            else:
                plan.output.create(plan.record, plan.files, derived_ids=not plan.has_ids)
            seconds = time.perf_counter() - progress.started
            summary = _summary(config, plan, progress, seconds, ids)
            summary.manifest = write_manifest(plan.output, config, summary)
            plan.output.tidy()
    except BaseException as error:
        if fresh and not plan.output.exists():  # refused before it wrote its marker
            plan.fs.delete_dir(plan.output.root)
        if isinstance(error, KeyboardInterrupt):  # before the pipeline or after it, not in it
            committed = _committed_rows(plan) if plan.output.exists() else 0
            raise Interrupted(committed, interrupted_code(error)) from None
        raise
    if summary.skipped_shards and summary.total_documents == 0:
        raise RunFailed(
            f"every input shard was skipped ({len(summary.skipped_shards)}; e.g. "
            f"{next(iter(summary.skipped_shards))}): nothing was scored"
        )
    return summary


def _score(
    config: ScanConfig, plan: RunPlan, progress: Progress, lease: WriterLease
) -> IdReport | None:
    """Start or join Ray, count ids, then run the pipeline over the pieces still to score,
    adding up the commits' statistics as they arrive. A minkscan error raised inside a
    task or actor surfaces as itself (one line naming its shard or path)."""
    data = config.data
    # Map functions raise their own exceptions (wrapped by Ray's task error, which keeps
    # them as its cause), not Ray Data's UserCodeException, which keeps only their text.
    settings = {"target_max_block_size": config.ray.block_bytes,
                "raise_original_map_exception": True}  # fmt: skip
    interrupted: KeyboardInterrupt | None = None
    restore_signals: Callable[[], None] = _nothing
    terminal = sys.stderr.isatty() and not verbose()  # asked before quiet_ray pipes stderr
    width = shutil.get_terminal_size().columns
    if terminal and not joins_cluster(config):  # the wait before the bar: Ray's start-up
        counted = "" if progress.total is None else f" ({progress.total:,} documents to score)"
        logger.info("starting Ray on this machine%s", counted)
    try:
        with quiet_ray(), ray_session(config, plan.stages), data_context(**settings):
            warn_if_too_small(config, plan.stages)
            ids = None
            if (data.check_ids or data.require_unique_ids) and plan.has_ids:
                ids = check_ids(data, plan.pieces, plan.fs, plan.output.root)
            plan.output.create(plan.record, plan.files, derived_ids=not plan.has_ids)
            to_score = _without_bad(plan)
            progress.start(terminal=terminal, width=width)
            restore_signals = stop_signals_mark_stopping()
            try:
                if to_score:
                    dataset = build_dataset(plan.stages, to_score, config.ray.block_rows)
                    for stats in dataset.iter_batches(batch_format="pyarrow", batch_size=None):
                        lease.check()
                        progress.add(stats)
                    if progress.unwritten:
                        raise RunFailed(
                            f"{progress.unwritten:,} scored rows were not written (the commit "
                            "actor was lost); re-run the same command to score them again"
                        )
            except KeyboardInterrupt as interrupt:  # Ctrl-C, or SIGTERM (`Terminated`)
                interrupted = interrupt
                _ignore_ctrl_c()  # until the line below is ready
            finally:
                progress.close()
            if interrupted is None:
                return ids
        # Ray is shut down: no commit writes any more, so the file names give the final count.
        committed = _committed_rows(plan)
    except Exception as error:
        cause = user_error_in(error)
        if cause is not None and cause is not error:
            raise cause from None
        raise
    finally:
        restore_signals()
    raise Interrupted(committed, interrupted_code(interrupted)) from None


def _committed_rows(plan: RunPlan) -> int:
    """Rows of the output's visible score files: what a stopped run keeps."""
    return sum(part.rows for part in plan.output.visible(plan.output.parts()))


def _nothing() -> None:
    """Nothing to restore."""


def _ignore_ctrl_c() -> None:
    """Ignore Ctrl-C while a stopped run shuts Ray down and counts what it committed (a
    second, impatient one would cut that short and lose the line saying how many rows are
    kept); `stop_signals_mark_stopping`'s restore brings it back."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def _forget_reread(plan: RunPlan) -> None:
    """Forget the bad-shard records of shards this run reads again (``skip_bad_shards``
    off) or no longer names (changed since, or gone): they are recorded again if they fail
    again."""
    recorded = plan.output.bad_shards()
    plan.output.forget_bad([key for key in recorded if key not in plan.recorded_bad])


def _without_bad(plan: RunPlan) -> list:
    """The pieces to score minus those of shards found bad since planning (by the id check)."""
    bad = plan.output.bad_shards()
    return [piece for piece in plan.to_score if piece.file.key not in bad]


def _summary(
    config: ScanConfig,
    plan: RunPlan,
    progress: Progress,
    seconds: float,
    ids: IdReport | None,
) -> RunSummary:
    """Drop the score files of every shard recorded as bad, this run's and a killed earlier
    run's alike (none of a skipped shard's rows stays, whenever it was found bad), then sum
    up the run and what the output holds."""
    found = plan.output.bad_shards()
    dropped = [key for key in found if key not in plan.recorded_bad]
    plan.output.delete_parts([part for part in plan.output.parts() if part.key in found])
    progress.drop(found)
    skipped = {**plan.bad, **{found[key]["path"]: found[key]["reason"] for key in dropped}}
    complete, _ = plan.output.completion(plan.output.visible(plan.output.parts()))
    total = sum(piece.rows for piece in complete)
    return RunSummary(
        output=config.data.output,
        manifest="",
        documents=progress.documents,
        tokens=progress.tokens,
        seconds=seconds,
        statuses=progress.statuses,
        total_documents=total,
        resumed_documents=plan.rows_done_before,
        pieces=len(plan.pieces),
        pieces_done_before=plan.done_before,
        skipped_shards=skipped,
        skipped_files=plan.skipped_files,
        input_changes=plan.changes,
        forward_passes=forward_passes(config.baselines, config.model.name),
        pass_seconds={
            label: progress.seconds[key]
            for key, label in pass_labels(config.baselines, config.model.name).items()
        },
        ids=ids,
    )
