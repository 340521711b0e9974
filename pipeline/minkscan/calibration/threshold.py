"""Per-method decision thresholds at a target false-positive rate.

The threshold is the (1 - FPR) quantile of known non-member scores (an observed score, so at
most FPR of them lie above it); a document is flagged when its score is strictly above it,
``score > threshold`` (`is_flagged`; higher = more likely member for every column). A
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

from minkscan.errors import UserError
from minkscan.io.paths import read_text, write_text
from minkscan.methods import DEFAULT_PRIMARY, FORMER_NAMES, score_columns
from minkscan.schema import N_TOKENS, TEXT
from minkscan.statistics import auroc, clopper_pearson

# Non-member scores (with their token counts) kept in the calibration file: all of them up to
# this many, else a uniform random sample of this many. Reports draw them, check lengths
# against them and give each audited document its conformal p-value against them (a random
# sample stays exchangeable with the non-members, so the p-values stay valid, with
# resolution 1 / (sample + 1); `minkscan.calibration.conformal`).
NONMEMBER_SAMPLE = 10_000
# Non-member (and member) texts kept when the score files hold the text: for the report's
# blind baseline (`minkscan.evaluation.blind`) and as ReCaLL / Con-ReCall prefixes, each cut
# to `BLIND_TEXT_CHARS` characters.
BLIND_TEXT_SAMPLE = 1000
BLIND_TEXT_CHARS = 2000


def primary_method(methods: list[str], declared: str | None = None) -> str:
    """The declared primary method, else Min-K%++ k=20 when scored, else the first column."""
    if declared is not None:
        if declared not in methods:
            raise ValueError(f"method '{declared}' is not among {methods}")
        return declared
    return DEFAULT_PRIMARY if DEFAULT_PRIMARY in methods else methods[0]


def has_score(score: pl.Expr) -> pl.Expr:
    """Whether a row has a score a verdict counts: any value but null and NaN (+inf is the
    most member-like score there is, and is flagged; -inf the least)."""
    score = score.cast(pl.Float64)
    return score.is_not_null() & score.is_not_nan()


def is_flagged(score: pl.Expr, threshold: float) -> pl.Expr:
    """The one flagging rule: strictly above the calibrated threshold."""
    return score > threshold


@dataclass(frozen=True)
class MethodCalibration:
    """Threshold of one score column and what is known about its error rates."""

    threshold: float
    threshold_low: float
    threshold_high: float
    fpr: float
    n_nonmembers: int
    nonmember_sample: list[float]
    nonmember_lengths: list[int] = field(default_factory=list)  # n_tokens of the sample
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
    model: str | None = None  # the model that scored the calibration set, when known
    nonmember_texts: list[str] = field(default_factory=list)  # a sample, for the blind baseline
    member_texts: list[str] = field(default_factory=list)  # a sample, for Con-ReCall prefixes

    def write(self, path: str | Path) -> str:
        """Write the calibration as JSON to a local path or an ``s3://`` URI."""
        return write_text(str(path), json.dumps(asdict(self), indent=2))


def load_calibration(path: str | Path) -> Calibration:
    """Read a calibration JSON written by `Calibration.write` (a clear error otherwise); a
    method an older minkscan wrote under a former column name is read under its name now."""
    try:
        raw = json.loads(read_text(str(path)))
        methods = {FORMER_NAMES.get(name, name): MethodCalibration(**value)
                   for name, value in raw.pop("methods").items()}  # fmt: skip
        return Calibration(methods=methods, **raw)
    except FileNotFoundError:
        raise UserError(
            f"no calibration file at {path} (write one with `minkscan calibrate`)"
        ) from None
    except (ValueError, TypeError, KeyError, AttributeError) as error:
        raise UserError(f"{path} is not a minkscan calibration file: {error}") from None


def _method_calibration(
    nonmember: np.ndarray,
    lengths: np.ndarray | None,
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
    sample_size = min(NONMEMBER_SAMPLE, nonmember.size)
    picked = rng.choice(nonmember.size, sample_size, replace=False)
    extra: dict[str, float | int | list[int]] = {}
    if lengths is not None:
        extra["nonmember_lengths"] = [int(value) for value in lengths[picked]]
    if member is not None and member.size:
        hits = int((member > threshold).sum())
        tpr_low, tpr_high = clopper_pearson(hits, member.size, confidence)
        labels = np.concatenate([np.zeros(nonmember.size, int), np.ones(member.size, int)])
        extra |= {
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
        nonmember_sample=[float(value) for value in nonmember[picked]],
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
    model: str | None = None,
) -> Calibration:
    """Thresholds at ``target_fpr`` for every score column of the non-member score frame.

    Unscorable rows (null score: empty, not text, too short) are left out per column.
    """
    if not 0 < target_fpr < 1:
        raise ValueError(f"target FPR must be in (0, 1), got {target_fpr}")
    columns = score_columns(nonmembers.columns)
    if not columns:
        raise ValueError("no score columns (see minkscan.methods) in the non-member scores")
    rng = np.random.default_rng(seed)
    methods = {}
    for column in columns:
        nonmember, lengths = _usable(nonmembers, column)
        if nonmember.size < 2:
            raise ValueError(
                f"'{column}': need at least 2 scored non-members, got {nonmember.size}"
            )
        member = _usable(members, column)[0] if members is not None else None
        methods[column] = _method_calibration(
            nonmember, lengths, member, target_fpr, confidence, n_resamples, rng
        )
    source = "labels" if members is not None else "nonmembers"
    texts = np.random.default_rng([seed, 1])  # apart from the thresholds' bootstrap
    return Calibration(
        target_fpr, confidence, source, methods, model, _text_sample(nonmembers, texts),
        [] if members is None else _text_sample(members, texts),
    )  # fmt: skip


def _text_sample(frame: pl.DataFrame, rng: np.random.Generator) -> list[str]:
    """Up to `BLIND_TEXT_SAMPLE` non-empty texts of ``frame`` (none without a text column),
    each cut to `BLIND_TEXT_CHARS` characters."""
    if TEXT not in frame.columns:
        return []
    texts = [t for t in frame[TEXT].to_list() if isinstance(t, str) and t.strip()]
    if len(texts) > BLIND_TEXT_SAMPLE:
        texts = [texts[i] for i in sorted(rng.choice(len(texts), BLIND_TEXT_SAMPLE, False))]
    return [text[:BLIND_TEXT_CHARS] for text in texts]


def _usable(frame: pl.DataFrame, column: str) -> tuple[np.ndarray, np.ndarray | None]:
    """Finite scores of a column, and the token counts of the same rows (if known)."""
    rows = frame.filter(pl.col(column).is_not_null() & pl.col(column).cast(pl.Float64).is_finite())
    lengths = rows[N_TOKENS].to_numpy() if N_TOKENS in rows.columns else None
    return rows[column].cast(pl.Float64).to_numpy(), lengths


# Rule for a trustworthy threshold: the (1 - FPR) quantile must rest on at least this many
# non-member scores above it, i.e. n_nonmembers * target FPR >= 20.
MIN_EXPECTED_FALSE_POSITIVES = 20


def sample_size_warning(calibration: Calibration, method: str) -> str | None:
    """A sentence when ``method``'s threshold rests on too few non-members, else None."""
    cal = calibration.methods[method]
    expected = cal.n_nonmembers * calibration.target_fpr
    if expected >= MIN_EXPECTED_FALSE_POSITIVES:
        return None
    needed = int(np.ceil(MIN_EXPECTED_FALSE_POSITIVES / calibration.target_fpr))
    return (
        f"too few calibration non-members for '{method}': {cal.n_nonmembers} at target FPR "
        f"{calibration.target_fpr:g} put only {expected:.1f} expected false positives above the "
        f"threshold (rule: at least {MIN_EXPECTED_FALSE_POSITIVES}, i.e. {needed} non-members); "
        f"the threshold's {100 * calibration.confidence:.0f}% interval is "
        f"[{cal.threshold_low:.3g}, {cal.threshold_high:.3g}]"
    )
