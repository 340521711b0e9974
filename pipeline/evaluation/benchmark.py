"""The benchmark run: score labelled Parquet in-process and build the paper-style tables.

Scoring goes through `pipeline.scorer.DocumentScorer`, the same core the Ray actors hold.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from pipeline.config import ModelConfig, ScanConfig
from pipeline.evaluation.extra_pass import (
    load_masked_lm,
    lowercase_scores,
    neighbor_scores,
    neighbor_source,
    reference_scores,
)
from pipeline.evaluation.online import chunk_scores, label_chunks, online_setting
from pipeline.evaluation.tables import (
    decomposition_columns,
    k_sweep_columns,
    method_columns,
    metric_table,
    to_markdown,
)
from pipeline.evaluation.windowed import score_windowed
from pipeline.models.loading import load_model
from pipeline.scorer import DocumentScorer


def read_labelled(paths: Sequence[str]) -> pl.DataFrame:
    """Concatenate labelled Parquet files into columns id, text, label, group.

    ``group`` defaults to the file's stem (e.g. length32) when the file has none.
    """
    frames = []
    for path in paths:
        frame = pl.read_parquet(path)
        missing = {"text", "label"} - set(frame.columns)
        if missing:
            raise ValueError(f"{path}: missing column(s) {sorted(missing)}")
        stem = Path(path).stem
        if "id" not in frame.columns:
            frame = frame.with_row_index("id").with_columns(pl.format(f"{stem}:{{}}", "id"))
        if "group" not in frame.columns:
            frame = frame.with_columns(pl.lit(stem).alias("group"))
        frames.append(
            frame.select(
                pl.col("id").cast(pl.Utf8),
                pl.col("text"),
                pl.col("label").cast(pl.Int64),
                pl.col("group").cast(pl.Utf8),
            )
        )
    return pl.concat(frames)


@dataclass(frozen=True)
class BenchmarkResult:
    """Scores (one row per document, or per chunk online) and the three tables."""

    scores: pl.DataFrame
    main: pl.DataFrame
    k_sweep: pl.DataFrame
    decomposition: pl.DataFrame
    forward_passes: dict[str, int]

    def markdown(self) -> str:
        passes = ", ".join(f"{name} {n}" for name, n in self.forward_passes.items())
        return f"Forward passes per document: {passes}\n\n" + "\n\n".join(
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
        written[2].write_text(json.dumps(content, indent=2))
        for name, table in tables.items():
            path = directory / f"{name}.csv"
            table.write_csv(path)
            written.append(path)
        return written


def _tabulate(
    labelled: pl.DataFrame, scorer: DocumentScorer, k: int, forward_passes: dict[str, int]
) -> BenchmarkResult:
    return BenchmarkResult(
        scores=labelled,
        forward_passes=forward_passes,
        main=metric_table(labelled, method_columns(labelled.columns, k), detailed=True),
        k_sweep=metric_table(labelled, k_sweep_columns(scorer.columns)),
        decomposition=metric_table(labelled, decomposition_columns(scorer.columns, k)),
    )


def run_benchmark(
    config: ScanConfig,
    data: pl.DataFrame,
    k: int = 20,
    reference: ModelConfig | None = None,
    n_neighbors: int = 0,
    neighbor_model: str | None = None,
) -> BenchmarkResult:
    """Score ``data`` (see `read_labelled`) with the configured model and tabulate.

    Besides the single-pass methods, runs Lowercase (one extra pass) and, with a
    ``reference`` model, Ref (one pass of the reference model); with ``n_neighbors`` > 0,
    Neighbor (neighbours from the ``neighbor_model`` masked LM if given, else proposed by
    the target model; see `neighbor_scores` for the passes). With
    ``scoring.window_stride`` the single-pass methods score long documents with sliding
    windows (one pass per window); the extra passes still truncate at ``max_tokens``.
    """
    scorer = DocumentScorer(load_model(config.model), config.scoring)
    texts = data["text"].to_list()
    stride = config.scoring.window_stride
    main = scorer.score_frame(texts) if stride is None else score_windowed(scorer, texts, stride)
    parts = [data, main, lowercase_scores(scorer, texts, main["loss"])]
    passes = {"single-pass methods": 1, "Lowercase": 1}
    if reference is not None:
        ref_scorer = DocumentScorer(load_model(reference), config.scoring)
        parts.append(reference_scores(ref_scorer, texts, main["loss"]))
        passes["Ref (reference model)"] = 1
    if n_neighbors > 0:
        masked_lm = None if neighbor_model is None else load_masked_lm(neighbor_model)
        parts.append(neighbor_scores(scorer, texts, main["loss"], n_neighbors, masked_lm=masked_lm))
        source = neighbor_source(scorer, masked_lm)
        passes[f"Neighbor ({source})"] = n_neighbors + (1 if masked_lm is None else n_neighbors)
    return _tabulate(pl.concat(parts, how="horizontal").drop("text"), scorer, k, passes)


def run_online_benchmark(
    config: ScanConfig, data: pl.DataFrame, k: int = 20, chunk_tokens: int = 32, seed: int = 0
) -> BenchmarkResult:
    """Chunk-level tables in the online setting built from ``data`` (see `online_setting`)."""
    scorer = DocumentScorer(load_model(config.model), config.scoring)
    setting = online_setting(data, seed)
    chunks = chunk_scores(scorer, setting["id"].to_list(), setting["text"].to_list(), chunk_tokens)
    passes = {"all chunks of a document": 1}
    return _tabulate(label_chunks(scorer, setting, chunks), scorer, k, passes)
