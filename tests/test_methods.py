"""One registry owns every method: the scorer's columns, which columns of a file are scores
(so the extra-pass baselines are calibrated and reported like the rest), display names and
Gap-K%'s smoothing."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
import torch
from minkscan import methods
from minkscan.calibration import calibrate
from minkscan.config import BaselinesConfig, ScoringConfig
from minkscan.methods import (
    METHODS,
    Method,
    baseline_columns,
    forward_passes,
    method_of,
    score_columns,
    single_pass_columns,
    title,
)
from minkscan.scorer import DocumentScorer
from minkscan.scoring.aggregate import moving_average


def test_single_pass_columns_come_from_the_registry_in_its_order() -> None:
    columns = single_pass_columns(ScoringConfig(k_percentages=[10, 20]))
    assert columns == ["mean_logprob", "zlib", "mink_k10", "mink_k20", "minkpp_k10", "minkpp_k20",
                       "gapk_k10", "gapk_k20", "minkpp_mu_k20", "minkpp_sigma_k20"]  # fmt: skip
    assert all(method_of(c).extra_pass is None for c in columns)
    with_dcpdd = single_pass_columns(ScoringConfig(dcpdd_frequencies="freq.parquet"))
    assert {"dcpdd", "aeca"} <= set(with_dcpdd) and "dcpdd" not in columns
    extra = {"lowercase", "neighbor", "ref", "recall", "conrecall", "gradnorm", "pac", "wbc",
             "samia"}  # fmt: skip
    assert {m.key for m in METHODS if m.extra_pass} == extra


def test_baselines_are_score_columns_and_their_details_are_not() -> None:
    names = ["id", "n_tokens", "status", "mean_logprob", "lowercase", "lowercase_n_tokens",
             "neighbor", "neighbor_source", "ref", "ref_n_tokens", "minkpp_mu_k20", "token_z",
             "label"]  # fmt: skip
    assert score_columns(names) == ["mean_logprob", "lowercase", "neighbor", "ref", "minkpp_mu_k20"]
    assert title("gapk_k20") == "Gap-K% k=20" and title("ref") == "Ref"


def test_extra_pass_baselines_are_calibrated_like_the_rest() -> None:
    rng = np.random.default_rng(0)
    names = ["mean_logprob", "lowercase", "neighbor", "ref", "gapk_k20"]
    frame = pl.DataFrame({name: rng.normal(0, 1, 500) for name in names})
    assert set(calibrate(frame, n_resamples=10).methods) == set(frame.columns)


def test_moving_average_is_valid_mode_and_leaves_short_rows_alone() -> None:
    values = torch.tensor([[1.0, 2.0, 3.0, 4.0, 5.0], [7.0, 8.0, 0.0, 0.0, 0.0]])
    smoothed, lengths = moving_average(values, torch.tensor([5, 2]), 3)
    assert lengths.tolist() == [3, 2]
    assert smoothed[0, :3].tolist() == [2.0, 3.0, 4.0]
    assert smoothed[1, :2].tolist() == [7.0, 8.0]


def test_output_columns_and_forward_passes_of_the_baselines_come_from_the_registry() -> None:
    none = BaselinesConfig()
    assert baseline_columns(none) == [] and forward_passes(none, "t") == {"single-pass methods": 1}
    every = BaselinesConfig(lowercase=True, reference_model="gpt2", neighbors=4)
    assert baseline_columns(every) == ["lowercase", "lowercase_n_tokens", "neighbor",
                                       "neighbor_source", "ref", "ref_n_tokens"]  # fmt: skip
    assert forward_passes(every, "t") == {
        "single-pass methods": 1,
        "Lowercase": 1,
        "Neighbor (causal-lm:t)": 5,  # one proposal pass + 4 neighbours
        "Ref (gpt2)": 1,
    }
    masked = BaselinesConfig(neighbors=4, neighbor_model="bert")
    assert forward_passes(masked, "t")["Neighbor (masked-lm:bert)"] == 8


def test_a_method_added_to_the_registry_is_scored_with_no_other_change(
    tiny_llama, monkeypatch
) -> None:
    # A per-k method is its registry row and its per-token values: the scorer computes it,
    # names its columns and orders them from the registry alone.
    negated = Method("negk", "Negated Min-K%", "k_percentages", token=lambda s: -s.target_logprob)
    monkeypatch.setattr(methods, "SINGLE_PASS", (*methods.SINGLE_PASS, negated))
    monkeypatch.setattr(methods, "METHODS", (*methods.METHODS, negated))
    scorer = DocumentScorer(tiny_llama, ScoringConfig(k_percentages=[20, 100]))
    frame = scorer.score_frame(["The quick brown fox jumps over the lazy dog.", ""])
    assert frame.columns[-2:] == ["negk_k20", "negk_k100"]
    # The lowest 100% of -log p is all of it: its mean is minus the Loss score.
    assert frame["negk_k100"][0] == pytest.approx(-frame["mean_logprob"][0], rel=1e-9)
    assert frame["negk_k100"][1] is None
    assert title("negk_k20") == "Negated Min-K% k=20"
