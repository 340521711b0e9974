"""Nightly scans: re-score only input shards whose content changed, then report and diff.

Each input shard is fingerprinted by the SHA-256 of its bytes (works the same on local disk
and S3; ETags are not used because multipart uploads make them differ for equal content).
All new and changed shards of one scan are scored by one `run_scoring` call into
``<output>/runs/run-NNNN/``; ``<output>/_nightly_manifest.json`` records each shard's
fingerprint and the run holding its scores (rows are matched back to shards by their
``source``, the shard's path relative to the input root when it was scored), plus the
previous report's results, so the next scan knows what is new, changed, moved (a new path
whose bytes a removed one had: kept, not scored again) or removed and what to diff
against. Runs no shard refers to any more are deleted.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl
import pyarrow.fs as pafs

from minkscan.calibration.threshold import Calibration
from minkscan.config import ScanConfig
from minkscan.distributed.progress import RunSummary
from minkscan.distributed.runner import run_scoring
from minkscan.errors import UserError
from minkscan.io.inputs import discover
from minkscan.io.ownership import check_apart, check_owned, writing
from minkscan.io.paths import filesystem_for, fs_path, join, write_text
from minkscan.io.score_reader import read_output
from minkscan.io.scores import OutputError, ScoreOutput
from minkscan.reporting.build import build_report
from minkscan.reporting.render import json_summary, write_report
from minkscan.reporting.summary import Report
from minkscan.schema import (
    DIFF,
    GROUP,
    MARKER,
    NIGHTLY_MANIFEST,
    OUTPUT_NAMES,
    REPORT_FILES,
    RUNS_DIR,
    SHARD,
    SOURCE,
    parse_part_name,
)

logger = logging.getLogger(__name__)
MANIFEST_NAME = NIGHTLY_MANIFEST
READ_BLOCK = 1 << 22


@dataclass(frozen=True)
class ShardChanges:
    """Input shards sorted by what the scan must do with them."""

    new: list[str]
    changed: list[str]
    unchanged: list[str]
    removed: list[str]
    moved: list[tuple[str, str]] = field(default_factory=list)  # (old path, new path)

    @property
    def to_score(self) -> list[str]:
        return self.new + self.changed


def fingerprint(fs: pafs.FileSystem, path: str) -> str:
    """SHA-256 of the file's bytes, streamed."""
    digest = hashlib.sha256()
    with fs.open_input_stream(path) as stream:
        while block := stream.read(READ_BLOCK):
            digest.update(block)
    return digest.hexdigest()


def plan_changes(current: dict[str, str], previous: dict[str, str]) -> ShardChanges:
    """Compare {shard path: fingerprint} of this scan with the last one. A new path with
    the fingerprint of a removed one is that shard moved."""
    gone: dict[str, str] = {}
    for path in sorted(p for p in previous if p not in current):
        gone.setdefault(previous[path], path)
    new, moved = [], []
    for path in sorted(p for p in current if p not in previous):
        old = gone.pop(current[path], None)
        if old is None:
            new.append(path)
        else:
            moved.append((old, path))
    was_moved = {old for old, _ in moved}
    return ShardChanges(
        new=new,
        changed=sorted(p for p in current if p in previous and previous[p] != current[p]),
        unchanged=sorted(p for p in current if previous.get(p) == current[p]),
        removed=sorted(p for p in previous if p not in current and p not in was_moved),
        moved=moved,
    )


# The only run names a scan writes (`run-0001`, ...): a manifest naming anything else was not
# written by minkscan, and its runs are neither read nor deleted.
RUN_NAME = re.compile(r"run-\d{4,}")


def _read_manifest(fs: pafs.FileSystem, path: str) -> dict:
    """The last scan's manifest, checked before anything is read or deleted by it: every
    shard entry names a fingerprint and a run of this output by its own name (`RUN_NAME`),
    so no path read from the manifest leads outside ``<output>/runs/``."""
    if fs.get_file_info(path).type != pafs.FileType.File:
        return {"shards": {}, "results": []}
    with fs.open_input_stream(path) as stream:
        raw = stream.read()
    try:
        manifest = json.loads(raw)
    except ValueError as error:
        raise UserError(f"{path} is not JSON ({error}); it is not a nightly manifest minkscan "
                        "wrote: move it away to start the scans afresh") from None  # fmt: skip
    problem = _manifest_problem(manifest)
    if problem:
        raise UserError(f"{path}: {problem}; it is not a nightly manifest minkscan wrote: "
                        "move it away to start the scans afresh")  # fmt: skip
    return manifest


def _manifest_problem(manifest: object) -> str | None:
    """What makes ``manifest`` other than one `nightly_scan` writes (None: nothing)."""
    if not isinstance(manifest, dict):
        return f"holds a {type(manifest).__name__}, not an object"
    shards, results = manifest.get("shards"), manifest.get("results", [])
    if not isinstance(shards, dict) or not isinstance(results, list):
        return "has no 'shards' object and 'results' list"
    scans = manifest.get("scans", 0)
    if not isinstance(scans, int) or isinstance(scans, bool) or scans < 0:
        return f"its scan count {scans!r} is not a count"
    if not all(isinstance(row, dict) and {GROUP, "method"} <= row.keys() for row in results):
        return f"a result has no '{GROUP}' and 'method'"
    for name, entry in shards.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("sha256"), str):
            return f"shard '{name}' has no 'sha256' fingerprint"
        run = entry.get("run")
        if not isinstance(run, str) or RUN_NAME.fullmatch(run) is None:
            return (f"shard '{name}' names run {run!r}, not a run directory of this output "
                    "(run-NNNN)")  # fmt: skip
        if not isinstance(entry.get("scored_as", name), str):
            return f"shard '{name}' has a 'scored_as' that is not a path"
    return None


def _write_text(fs: pafs.FileSystem, path: str, text: str) -> None:
    with fs.open_output_stream(path) as stream:
        stream.write(text.encode())


def diff_results(
    previous: list[dict], current: list[dict], moved: Sequence[tuple[str, str]] = ()
) -> list[dict]:
    """Per (group, method): flagged fraction and contamination before and now (a moved
    shard's before is its old path's)."""
    renamed = dict(moved)
    before = {(renamed.get(row[GROUP], row[GROUP]), row["method"]): row for row in previous}
    rows = []
    for row in current:
        old = before.get((row[GROUP], row["method"]))
        rows.append(
            {
                GROUP: row[GROUP],
                "method": row["method"],
                "flagged_before": old["flagged_fraction"] if old else None,
                "flagged_now": row["flagged_fraction"],
                "contamination_before": old["contamination"] if old else None,
                "contamination_now": row["contamination"],
            }
        )
    return rows


@dataclass(frozen=True)
class NightlyResult:
    changes: ShardChanges
    report: Report
    report_paths: list[str]
    diff_path: str
    scoring: RunSummary | None = None  # the scan's scoring run (None: nothing to score)


def _only_minkscans(fs: pafs.FileSystem, directory: str) -> bool:
    """Whether ``directory`` is a score output holding nothing but what minkscan writes."""
    entries = fs.get_file_info(pafs.FileSelector(directory, allow_not_found=True))
    names = {entry.base_name for entry in entries}
    return MARKER in names and all(
        name in OUTPUT_NAMES or parse_part_name(name) is not None for name in names
    )


def _delete_run(fs: pafs.FileSystem, run_root: str) -> None:
    """Delete a run no shard refers to any more, if it holds only what minkscan writes."""
    if fs.get_file_info(run_root).type == pafs.FileType.NotFound:
        return
    if not _only_minkscans(fs, run_root):
        logger.warning("keeping %s: no shard refers to it any more, but it holds files "
                       "minkscan did not write", run_root)  # fmt: skip
        return
    fs.delete_dir(run_root)


def _score_scan(config: ScanConfig, fs: pafs.FileSystem, run_root: str) -> RunSummary:
    """Score one scan's shards into its run directory. A directory left by a scan that was
    killed (no manifest names it yet) is resumed, a shard edited since included; if it
    cannot be (a shard it holds is gone, or the settings changed), it is discarded and the
    scan scored afresh, with a warning."""
    try:
        return run_scoring(config)
    except OutputError as refused:
        if not _only_minkscans(fs, run_root):
            raise
        logger.warning("discarding %s, left by an unfinished scan: %s", run_root, refused)
        fs.delete_dir(run_root)
        return run_scoring(config)


def nightly_scan(
    config: ScanConfig, calibration: Calibration, report_dir: str | Path
) -> NightlyResult:
    """Score new/changed shards of ``config.data.input``, report over all shards, diff;
    holding the writer lease of the scan's output throughout (two scans of one output never
    interleave their manifests) and the report directory's while writing it."""
    data = config.data
    if not data.output:
        raise ValueError("no output given (data.output)")
    check_owned(str(report_dir), REPORT_FILES | {DIFF}, "--report")
    check_apart(fs_path(data.output), list(data.input), [])  # before the lease creates it
    with writing(data.output, data.s3):
        return _scan(config, calibration, report_dir)


def _scan(config: ScanConfig, calibration: Calibration, report_dir: str | Path) -> NightlyResult:
    """`nightly_scan`'s work, under its leases."""
    data = config.data
    fs = filesystem_for([*data.input, data.output], data.s3)
    root = fs_path(data.output)
    prefix = data.output.rstrip("/")
    manifest_path = f"{root}/{MANIFEST_NAME}"
    manifest = _read_manifest(fs, manifest_path)
    previous = {path: entry["sha256"] for path, entry in manifest["shards"].items()}
    found = discover(data.input, fs, format=data.format)
    files, input_root = found.files, found.root
    check_apart(root, [], [file.path for file in files])  # the specs were checked before
    paths = {file.relpath: file.path for file in files}
    current = {relpath: fingerprint(fs, path) for relpath, path in paths.items()}
    changes = plan_changes(current, previous)

    shards = manifest["shards"]
    runs = {path: entry["run"] for path, entry in shards.items() if path in current}
    # Where each shard's rows are in its run: the path it was scored under.
    sources = {path: shards[path].get("scored_as", path) for path in runs}
    for old, new in changes.moved:
        runs[new], sources[new] = shards[old]["run"], shards[old].get("scored_as", old)
    scoring = None
    if changes.to_score:
        run = f"run-{manifest.get('scans', 0) + 1:04d}"
        scheme = "s3://" if prefix.startswith("s3://") else ""
        run_data = data.model_copy(
            update={
                "input": [scheme + paths[relpath] for relpath in changes.to_score],
                "input_root": scheme + input_root,
                "output": f"{prefix}/{RUNS_DIR}/{run}",
            }
        )
        scan = config.model_copy(update={"data": run_data})
        scoring = _score_scan(scan, fs, fs_path(run_data.output))
        runs.update(dict.fromkeys(changes.to_score, run))
        sources.update({path: path for path in changes.to_score})
    for stale in {entry["run"] for entry in manifest["shards"].values()}:
        if stale not in runs.values():
            _delete_run(fs, f"{root}/{RUNS_DIR}/{stale}")

    run_tables = {run: pl.from_arrow(read_output(ScoreOutput(fs, f"{root}/{RUNS_DIR}/{run}")))
                  for run in set(runs.values())}  # fmt: skip
    frames = [
        run_tables[runs[relpath]]
        .filter(pl.col(SOURCE) == sources[relpath])
        .drop(SOURCE)
        .with_columns(pl.lit(relpath).alias(SHARD))
        for relpath in sorted(current)
    ]
    report = build_report(
        pl.concat(frames, how="diagonal_relaxed").lazy(),
        calibration,
        group_column=SHARD,
        model=config.model.name,
        inputs=list(data.input),
    )
    with writing(str(report_dir), data.s3):
        report_paths = write_report(report, report_dir)
        summary = json_summary(report)
        diff = {
            "scanned_at": dt.datetime.now(dt.UTC).isoformat(),
            "previous_scan": manifest.get("scanned_at"),
            "new": changes.new,
            "changed": changes.changed,
            "removed": changes.removed,
            "moved": changes.moved,
            "unchanged": changes.unchanged,
            "results": diff_results(manifest["results"], summary["results"], changes.moved),
        }
        diff_path = write_text(join(str(report_dir), DIFF), json.dumps(diff, indent=2))
    new_manifest = {
        "scanned_at": diff["scanned_at"],
        "scans": manifest.get("scans", 0) + 1,
        "shards": {
            path: {"sha256": sha, "run": runs[path]}
            | ({"scored_as": sources[path]} if sources[path] != path else {})
            for path, sha in current.items()
        },
        "results": summary["results"],
    }
    _write_text(fs, manifest_path, json.dumps(new_manifest, indent=2))
    return NightlyResult(changes, report, report_paths, diff_path, scoring)
