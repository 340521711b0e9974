"""Calibration: thresholds at a target FPR from known non-members, TPR/AUROC with members."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from minkscan.calibration import calibrate, load_calibration

N = 2000


def synthetic_scores(rng: np.random.Generator, n: int, shift: float, prefix: str) -> pl.DataFrame:
    """Score frame like `minkscan score` output; members score ``shift`` higher."""
    return pl.DataFrame(
        {
            "id": [f"{prefix}{i}" for i in range(n)],
            "status": ["ok"] * n,
            "n_tokens": [32] * n,
            "mean_logprob": rng.normal(shift, 1.0, n),
            "minkpp_k20": rng.normal(shift, 1.0, n),
        }
    )


@pytest.fixture(scope="module")
def nonmembers() -> pl.DataFrame:
    return synthetic_scores(np.random.default_rng(1), N, 0.0, "n")


@pytest.fixture(scope="module")
def members() -> pl.DataFrame:
    return synthetic_scores(np.random.default_rng(2), N, 2.0, "m")


def test_threshold_is_the_one_minus_fpr_quantile_with_a_bootstrap_interval_around_it(
    nonmembers: pl.DataFrame,
) -> None:
    result = calibrate(nonmembers, target_fpr=0.05, n_resamples=200)
    method = result.methods["minkpp_k20"]
    expected = float(np.quantile(nonmembers["minkpp_k20"].to_numpy(), 0.95, method="higher"))
    assert method.threshold == pytest.approx(expected)
    assert method.threshold_low < method.threshold < method.threshold_high
    assert abs(method.threshold - 1.645) < 0.15  # normal 95% quantile
    assert method.fpr <= 0.05
    assert method.tpr is None and method.auroc is None
    assert result.source == "nonmembers"


def test_labelled_members_give_tpr_and_auroc_at_the_threshold(
    nonmembers: pl.DataFrame, members: pl.DataFrame
) -> None:
    method = calibrate(nonmembers, members, target_fpr=0.05, n_resamples=100).methods[
        "mean_logprob"
    ]
    # P(N(2,1) > 1.645) = 0.64; AUROC of a 2-sigma shift = Phi(2 / sqrt 2) = 0.92
    assert method.tpr == pytest.approx(0.64, abs=0.04)
    assert method.tpr_low < method.tpr < method.tpr_high
    assert method.auroc == pytest.approx(0.92, abs=0.02)
    assert method.n_members == N


def test_the_nonmember_sample_keeps_its_token_counts_with_or_without_members(
    nonmembers: pl.DataFrame, members: pl.DataFrame
) -> None:
    lengths = pl.Series("n_tokens", np.arange(N) % 97 + 3)
    with_lengths = nonmembers.with_columns(lengths)
    for result in (calibrate(with_lengths, n_resamples=10),
                   calibrate(with_lengths, members, n_resamples=10)):  # fmt: skip
        method = result.methods["minkpp_k20"]
        assert len(method.nonmember_lengths) == len(method.nonmember_sample) == N
        by_score = dict(zip(with_lengths["minkpp_k20"], with_lengths["n_tokens"], strict=True))
        assert [by_score[s] for s in method.nonmember_sample] == method.nonmember_lengths


def test_unscorable_rows_with_null_scores_are_left_out(nonmembers: pl.DataFrame) -> None:
    broken = pl.DataFrame(
        {
            "id": ["x"],
            "status": ["empty"],
            "n_tokens": [0],
            "mean_logprob": [None],
            "minkpp_k20": [None],
        },
        schema=nonmembers.schema,
    )
    result = calibrate(pl.concat([nonmembers, broken]), n_resamples=50)
    assert result.methods["mean_logprob"].n_nonmembers == N


def test_calibration_file_round_trips(nonmembers: pl.DataFrame, tmp_path) -> None:
    result = calibrate(nonmembers, n_resamples=50)
    assert load_calibration(result.write(tmp_path / "cal.json")) == result


def test_a_calibration_written_before_the_mean_logprob_rename_reads_its_loss_under_the_new_name(
    nonmembers: pl.DataFrame, tmp_path
) -> None:
    written = calibrate(nonmembers, n_resamples=20)
    raw = json.loads(Path(written.write(tmp_path / "c.json")).read_text())
    raw["methods"]["loss"] = raw["methods"].pop("mean_logprob")  # as an older minkscan named it
    (tmp_path / "c.json").write_text(json.dumps(raw))
    loaded = load_calibration(tmp_path / "c.json")
    assert loaded.methods["mean_logprob"] == written.methods["mean_logprob"]
    assert "loss" not in loaded.methods


def test_bad_target_fpr_and_missing_score_columns_are_clear_errors(
    nonmembers: pl.DataFrame,
) -> None:
    with pytest.raises(ValueError, match="target FPR"):
        calibrate(nonmembers, target_fpr=1.5)
    with pytest.raises(ValueError, match="no score columns"):
        calibrate(nonmembers.select("id", "status"))
