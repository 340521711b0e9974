"""The benchmark run: score labelled Parquet through the Ray pipeline (or read scores already
made) and build the paper-style tables.

Offline scoring goes through `minkscan.distributed.run_scoring`, the same pipeline (and
baseline stages) as `minkscan score`; online detection scores in-process; `tabulate_scores`
reads a score output's rows as they are.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import polars as pl
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from minkscan.config import ConfigError, ScanConfig
from minkscan.distributed.runner import run_scoring
from minkscan.evaluation.blind import BLIND, MIN_TEXTS, with_blind_scores
from minkscan.evaluation.online import chunk_scores, label_chunks, online_setting
from minkscan.evaluation.tables import (
    BLIND_ROW,
    decomposition_columns,
    k_sweep_columns,
    method_columns,
    metric_table,
    small_groups,
    to_markdown,
)
from minkscan.io.inputs import InputError
from minkscan.io.paths import filesystem_for, fs_path
from minkscan.io.score_reader import read_scores
from minkscan.methods import LOSS
from minkscan.models.loading import load_model
from minkscan.schema import GROUP, ID, LABEL, ROW, SOURCE, STATUS, TEXT
from minkscan.scorer import DocumentScorer


@dataclass(frozen=True)
class BenchmarkResult:
    """Scores (one row per document, or per chunk online), the three tables, the forward
    passes per document with the model seconds they took (same keys; empty when the scores
    were read, not made), and notes: what the tables leave out and where they are thin."""

    scores: pl.DataFrame
    main: pl.DataFrame
    k_sweep: pl.DataFrame
    decomposition: pl.DataFrame
    forward_passes: dict[str, int]
    pass_seconds: dict[str, float]
    notes: tuple[str, ...] = ()

    def markdown(self) -> str:
        passes = ", ".join(
            f"{name} {n} ({self.pass_seconds.get(name, 0.0):.1f} s)"
            for name, n in self.forward_passes.items()
        )
        heading = (
            f"Forward passes per document (model seconds): {passes}" if passes
            else "Scores read as they are (no forward pass)"
        )  # fmt: skip
        notes = "".join(f"\n\nNote: {note}" for note in self.notes)
        counts = "n_<group>: scored members/non-members."
        return f"{heading}{notes}\n\n{counts}\n\n" + "\n\n".join(
            f"## {title}\n\n{to_markdown(table)}"
            for title, table in (
                ("Methods", self.main),
                ("k sweep", self.k_sweep),
                ("Min-K%++ decomposition", self.decomposition),
            )
        )

    def write(self, directory: Path) -> list[Path]:
        """Write scores.parquet, tables.md, one CSV per table and tables.json."""
        directory.mkdir(parents=True, exist_ok=True)
        tables = {"main": self.main, "k_sweep": self.k_sweep, "decomposition": self.decomposition}
        written = [directory / "scores.parquet", directory / "tables.md", directory / "tables.json"]
        self.scores.write_parquet(written[0])
        written[1].write_text(self.markdown() + "\n")
        content = {k: t.to_dicts() for k, t in tables.items()}
        content["forward_passes"] = self.forward_passes
        content["pass_seconds"] = self.pass_seconds
        content["notes"] = list(self.notes)
        written[2].write_text(json.dumps(content, indent=2))
        for name, table in tables.items():
            path = directory / f"{name}.csv"
            table.write_csv(path)
            written.append(path)
        return written


def _tabulate(
    labelled: pl.DataFrame,
    k: int,
    forward_passes: dict[str, int],
    pass_seconds: dict[str, float],
    *,
    blind_expected: bool = True,
) -> BenchmarkResult:
    """The three tables over every score column ``labelled`` holds, with the blind baseline
    as a row where every group had enough texts for it (and, where ``blind_expected``, a note
    saying why not)."""
    columns = labelled.columns
    has_blind = BLIND in columns and not labelled[BLIND].null_count()
    blind = {BLIND_ROW: BLIND} if has_blind else {}
    notes = small_groups(labelled)
    if blind_expected and not has_blind:
        notes.append(_no_blind_note(labelled))
    if not method_columns(columns, k):
        raise InputError(f"the scores hold no main-table method's column at k={k} (columns: "
                         f"{columns[:8]}): give --main-k a k the scores have")  # fmt: skip
    return BenchmarkResult(
        scores=labelled,
        forward_passes=forward_passes,
        pass_seconds=pass_seconds,
        main=metric_table(labelled, method_columns(columns, k) | blind, detailed=True),
        k_sweep=metric_table(labelled, k_sweep_columns(columns) | blind),
        decomposition=metric_table(labelled, decomposition_columns(columns, k) | blind),
        notes=tuple(notes),
    )


def _no_blind_note(labelled: pl.DataFrame) -> str:
    """Why the blind baseline's row is missing."""
    if TEXT not in labelled.columns:
        return (f"no blind-baseline row: the scores hold no '{TEXT}' column (keep it with "
                f"`minkscan score --keep-columns {LABEL},{TEXT}`)")  # fmt: skip
    return (f"no blind-baseline row: a group has fewer than {MIN_TEXTS} texts of a label, too "
            "few to train the text-only classifier on")  # fmt: skip


def tabulate_scores(scores: pl.DataFrame, k: int = 20) -> BenchmarkResult:
    """The tables from score rows already made (columns id, label, group, status, the score
    columns, and text when kept), nothing re-scored: the blind baseline is trained on the
    kept texts."""
    _check_scored(scores)
    if TEXT in scores.columns:
        blind = with_blind_scores(scores, TEXT, LABEL, GROUP).select(ID, BLIND)
        scores = scores.join(blind, on=ID, how="left", maintain_order="left")
    return _tabulate(scores, k, {}, {})


@contextmanager
def _work_dir(work_dir: str | None) -> Iterator[str]:
    if work_dir is not None:
        yield work_dir
        return
    with tempfile.TemporaryDirectory(prefix="minkscan-benchmark-") as directory:
        yield directory


def run_benchmark(
    config: ScanConfig, data: pl.DataFrame, k: int = 20, work_dir: str | None = None
) -> BenchmarkResult:
    """Score ``data`` (see `read_labelled`) with `run_scoring` and tabulate.

    Besides the single-pass methods, the tables hold every baseline enabled in
    ``config.baselines`` (each a stage of the pipeline). The ids and texts are written as
    the pipeline's input under ``work_dir`` and scored into ``work_dir/scores``, labels and
    groups kept in the score files (`data.keep_columns`), so no join is needed; the
    default, a temporary local directory, suits the embedded Ray and single-node clusters,
    while a multi-node cluster needs shared storage (e.g. s3://bucket/prefix). A
    ``work_dir`` that already holds scores is resumed, not re-scored.
    """
    with _work_dir(work_dir) as directory:
        fs = filesystem_for([directory], config.data.s3)
        base = directory.rstrip("/")
        _write_input(fs, f"{base}/input/labelled.parquet", data.select(ID, TEXT, LABEL, GROUP))
        data_config = config.data.model_copy(
            update={
                "input": [f"{base}/input/labelled.parquet"],
                "output": f"{base}/scores",
                "text_column": TEXT,
                "id_column": ID,
                "keep_columns": [LABEL, GROUP],
                "skip_bad_shards": False,
            }
        )
        config = config.model_copy(update={"data": data_config})
        summary = run_scoring(config)
        scores = read_scores(config.data.output, config.data.s3).table
    labelled = pl.from_arrow(scores).sort(ROW).drop(SOURCE, ROW)  # input order
    _check_scored(labelled)
    blind = with_blind_scores(data, TEXT, LABEL, GROUP).select(ID, BLIND)
    labelled = labelled.join(blind, on=ID, how="left", maintain_order="left")
    return _tabulate(labelled, k, summary.forward_passes, summary.pass_seconds)


def _write_input(fs: pafs.FileSystem, path: str, data: pl.DataFrame) -> None:
    """The benchmark's input under its work directory: written once, so that a re-run on the
    same data resumes its scores; a work directory holding other data is refused."""
    if fs.get_file_info(fs_path(path)).type == pafs.FileType.File:
        with fs.open_input_file(fs_path(path)) as handle:
            if pl.from_arrow(pq.read_table(handle)).equals(data):
                return
        raise InputError(f"--work-dir {path.rsplit('/', 2)[0]} holds a benchmark of other data: "
                         "give another --work-dir, or the same data to resume")  # fmt: skip
    fs.create_dir(fs_path(path.rsplit("/", 1)[0]), recursive=True)
    with fs.open_output_stream(fs_path(path)) as stream:
        pq.write_table(data.to_arrow(), stream)


def _check_scored(labelled: pl.DataFrame) -> None:
    """InputError naming the first group whose members or non-members have no scored
    document (no metric exists there), with the rows' statuses."""
    for (group,), rows in labelled.group_by(GROUP, maintain_order=True):
        for value, kind in ((1, "member"), (0, "non-member")):
            part = rows.filter(pl.col(LABEL) == value)
            if part.filter(pl.col(LOSS).is_finite()).is_empty():
                counts = part.group_by(STATUS).len().sort(STATUS).rows()
                statuses = ", ".join(f"{status} {n}" for status, n in counts) or "no rows"
                raise InputError(f"group '{group}' has no scored {kind} document ({statuses}): "
                                 "no detection metric exists without both")  # fmt: skip


def run_online_benchmark(
    config: ScanConfig, data: pl.DataFrame, k: int = 20, chunk_tokens: int = 32, seed: int = 0
) -> BenchmarkResult:
    """Chunk-level tables in the online setting built from ``data`` (see `online_setting`).

    Scores in-process, one forward pass per text: each chunk is conditioned on all the text
    before it, which sliding windows would cut, so ``scoring.window_stride`` must be unset.
    """
    if config.scoring.window_stride is not None:
        raise ConfigError(
            "'scoring.window_stride': online detection conditions every chunk on all the text "
            "before it, so it cannot use sliding windows"
        )
    scorer = DocumentScorer(load_model(config.model), config.scoring)
    setting = online_setting(data, seed)
    started = time.perf_counter()
    chunks = chunk_scores(scorer, setting[ID].to_list(), setting[TEXT].to_list(), chunk_tokens)
    label = "all chunks of a document"
    seconds = {label: time.perf_counter() - started}
    chunks = label_chunks(scorer, setting, chunks)
    return _tabulate(chunks, k, {label: 1}, seconds, blind_expected=False)
