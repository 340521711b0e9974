"""Per-method decision thresholds at a target false-positive rate.

The threshold is the (1 - FPR) quantile of known non-member scores (an observed score, so at
most FPR of them lie above it); a document is flagged when its score is strictly above it
(higher = more likely member for every column). A
percentile bootstrap over the non-members gives the threshold's confidence interval. With
known members too, the TPR at that threshold (Clopper-Pearson interval) and AUROC are kept,
which lets reports turn a flagged fraction into an estimated contaminated fraction.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow.fs as pafs
from scipy.stats import beta

from minkscan.evaluation.metrics import auroc
from minkscan.io.scores import ScoreOutput
from minkscan.io.sources import InputError

SCORE_PREFIXES = ("loss", "zlib", "mink_k", "minkpp_k", "minkpp_mu_k", "minkpp_sigma_k")
HISTOGRAM_SAMPLE = 2000


def scan_scores(path: str | Path) -> pl.LazyFrame:
    """Lazy frame over a `minkscan score` output directory (its complete pieces, read by
    `ScoreOutput`) or one score Parquet file."""
    path = Path(path)
    if path.is_dir():
        output = ScoreOutput(pafs.LocalFileSystem(), str(path.resolve()))
        return pl.from_arrow(output.read()).lazy()
    if not path.exists():
        raise InputError(f"no score Parquet at {path}")
    return pl.scan_parquet(str(path))


def score_columns(schema_names: list[str]) -> list[str]:
    """The per-document score columns in a score file, in file order."""
    return [
        name
        for name in schema_names
        if name in ("loss", "zlib") or name.startswith(SCORE_PREFIXES[2:])
    ]


def clopper_pearson(successes: int, trials: int, confidence: float) -> tuple[float, float]:
    """Exact binomial confidence interval for a proportion."""
    alpha = 1 - confidence
    low = 0.0 if successes == 0 else float(beta.ppf(alpha / 2, successes, trials - successes + 1))
    high = (
        1.0
        if successes == trials
        else float(beta.ppf(1 - alpha / 2, successes + 1, trials - successes))
    )
    return low, high


@dataclass(frozen=True)
class MethodCalibration:
    """Threshold of one score column and what is known about its error rates."""

    threshold: float
    threshold_low: float
    threshold_high: float
    fpr: float
    n_nonmembers: int
    nonmember_sample: list[float]
    tpr: float | None = None
    tpr_low: float | None = None
    tpr_high: float | None = None
    auroc: float | None = None
    n_members: int = 0


@dataclass(frozen=True)
class Calibration:
    """Thresholds for every score column; written as JSON and read back by `report`."""

    target_fpr: float
    confidence: float
    source: str
    methods: dict[str, MethodCalibration] = field(default_factory=dict)

    def write(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(asdict(self), indent=2))
        return path


def load_calibration(path: str | Path) -> Calibration:
    """Read a calibration JSON written by `Calibration.write`."""
    raw = json.loads(Path(path).read_text())
    methods = {name: MethodCalibration(**value) for name, value in raw.pop("methods").items()}
    return Calibration(methods=methods, **raw)


def _method_calibration(
    nonmember: np.ndarray,
    member: np.ndarray | None,
    target_fpr: float,
    confidence: float,
    n_resamples: int,
    rng: np.random.Generator,
) -> MethodCalibration:
    threshold = float(np.quantile(nonmember, 1 - target_fpr, method="higher"))
    resampled = rng.choice(nonmember, (n_resamples, nonmember.size))
    alpha = (1 - confidence) / 2
    low, high = np.quantile(
        np.quantile(resampled, 1 - target_fpr, axis=1, method="higher"), [alpha, 1 - alpha]
    )
    sample_size = min(HISTOGRAM_SAMPLE, nonmember.size)
    sample = rng.choice(nonmember, sample_size, replace=False)
    extra: dict[str, float | int] = {}
    if member is not None and member.size:
        hits = int((member > threshold).sum())
        tpr_low, tpr_high = clopper_pearson(hits, member.size, confidence)
        labels = np.concatenate([np.zeros(nonmember.size, int), np.ones(member.size, int)])
        extra = {
            "tpr": hits / member.size,
            "tpr_low": tpr_low,
            "tpr_high": tpr_high,
            "auroc": auroc(labels, np.concatenate([nonmember, member])),
            "n_members": int(member.size),
        }
    return MethodCalibration(
        threshold=threshold,
        threshold_low=float(low),
        threshold_high=float(high),
        fpr=float((nonmember > threshold).mean()),
        n_nonmembers=int(nonmember.size),
        nonmember_sample=[float(value) for value in sample],
        **extra,
    )


def calibrate(
    nonmembers: pl.DataFrame,
    members: pl.DataFrame | None = None,
    *,
    target_fpr: float = 0.05,
    confidence: float = 0.95,
    n_resamples: int = 1000,
    seed: int = 0,
) -> Calibration:
    """Thresholds at ``target_fpr`` for every score column of the non-member score frame.

    Unscorable rows (null score: empty, not text, too short) are left out per column.
    """
    if not 0 < target_fpr < 1:
        raise ValueError(f"target FPR must be in (0, 1), got {target_fpr}")
    columns = score_columns(nonmembers.columns)
    if not columns:
        raise ValueError("no score columns (loss, zlib, mink_k*, minkpp_k*) in the non-member file")
    rng = np.random.default_rng(seed)
    methods = {}
    for column in columns:
        nonmember = _usable(nonmembers, column)
        if nonmember.size < 2:
            raise ValueError(
                f"'{column}': need at least 2 scored non-members, got {nonmember.size}"
            )
        member = _usable(members, column) if members is not None else None
        methods[column] = _method_calibration(
            nonmember, member, target_fpr, confidence, n_resamples, rng
        )
    source = "labels" if members is not None else "nonmembers"
    return Calibration(target_fpr, confidence, source, methods)


def _usable(frame: pl.DataFrame, column: str) -> np.ndarray:
    values = frame.get_column(column).drop_nulls().cast(pl.Float64).to_numpy()
    return values[np.isfinite(values)]
