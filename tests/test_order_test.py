"""The sharded order test (Oren et al., ICLR 2024): shards, orderings, its statistic and its
two p-values, against independent computations of the paper's definitions; valid under the
null (a published order that is one more random order) and powerful when the published
order is preferred."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest
from minkscan.evaluation.order_run import orderings_table
from minkscan.evaluation.order_test import (
    OrderSettings,
    order_statistics,
    rank_sum_p_value,
    shard_bounds,
    shuffled_orders,
)


def test_shards_are_contiguous_cover_every_example_once_and_differ_by_at_most_one():
    bounds = shard_bounds(103, 10)
    assert bounds[0][0] == 0 and bounds[-1][1] == 103
    assert all(a[1] == b[0] for a, b in itertools.pairwise(bounds))
    sizes = [end - start for start, end in bounds]
    assert max(sizes) - min(sizes) <= 1


def test_too_few_examples_for_the_shards_are_refused_naming_a_shard_count_that_works():
    with pytest.raises(ValueError, match="7 examples cannot fill 4 shards .*--shards 3"):
        shard_bounds(7, 4)
    with pytest.raises(ValueError, match="at least 2 shards"):
        shard_bounds(100, 1)


def test_each_shard_has_order_zero_published_and_seeded_shuffles_of_the_same_examples():
    examples = [f"example {i}" for i in range(12)]
    table = orderings_table(examples, OrderSettings(None, " | ", 3, 4, seed=7)).to_pylist()
    assert len(table) == 3 * 5
    first = [row for row in table if row["shard"] == 0]
    assert first[0]["order"] == 0 and first[0]["text"] == " | ".join(examples[:4])
    for row in first[1:]:
        assert sorted(row["text"].split(" | ")) == sorted(examples[:4])
    again = orderings_table(examples, OrderSettings(None, " | ", 3, 4, seed=7)).to_pylist()
    other = orderings_table(examples, OrderSettings(None, " | ", 3, 4, seed=8)).to_pylist()
    assert again == table and other != table
    assert shuffled_orders(4, 4, 7, 0) != shuffled_orders(4, 4, 7, 1)  # a stream per shard


@pytest.mark.parametrize("at_least", [(0, 0, 0), (1, 2, 0), (3, 3, 3), (4, 1, 2)])
def test_the_rank_p_value_is_the_exact_probability_of_so_small_a_rank_sum(at_least):
    permutations = 4
    observed = sum(at_least)
    outcomes = itertools.product(range(permutations + 1), repeat=len(at_least))
    exact = sum(sum(o) <= observed for o in outcomes) / (permutations + 1) ** len(at_least)
    assert rank_sum_p_value(np.array(at_least), permutations) == pytest.approx(exact, abs=1e-12)


def test_the_statistic_is_published_minus_the_mean_shuffle_t_tested_across_shards():
    rng = np.random.default_rng(0)
    published, shuffled = rng.normal(size=8), rng.normal(size=(8, 5))
    stats = order_statistics(published, shuffled)
    d = published - shuffled.mean(axis=1)
    t = d.mean() / (d.std(ddof=1) / math.sqrt(d.size))
    assert stats.differences == pytest.approx(d.tolist())
    assert stats.t_statistic == pytest.approx(t)
    from scipy.stats import t as student

    assert stats.t_p_value == pytest.approx(student.sf(t, d.size - 1))
    assert stats.at_least == [int((shuffled[i] >= published[i]).sum()) for i in range(8)]


def test_ties_count_against_the_published_order():
    stats = order_statistics(np.zeros(3), np.zeros((3, 4)))
    assert stats.at_least == [4, 4, 4]
    assert stats.permutation_p_value == 1.0 and stats.t_p_value == 1.0


def test_under_the_null_both_p_values_fall_below_5_percent_about_5_percent_of_the_time():
    """400 simulated files whose published order is one more random order: each ordering's
    log-likelihood is a draw of the same distribution (plus a shard effect)."""
    rng = np.random.default_rng(1)
    t_hits = rank_hits = 0
    runs = 400
    for _ in range(runs):
        shard_effect = rng.normal(0, 5, size=(20, 1))
        draws = shard_effect + rng.normal(size=(20, 11))
        stats = order_statistics(draws[:, 0], draws[:, 1:])
        t_hits += stats.t_p_value < 0.05
        rank_hits += stats.permutation_p_value < 0.05
    bound = 0.05 + 3 * math.sqrt(0.05 * 0.95 / runs)  # three standard errors
    assert t_hits / runs <= bound and rank_hits / runs <= bound
    assert t_hits > 0 and rank_hits > 0  # not vacuous: the tests can reject


def test_a_preferred_published_order_is_found():
    rng = np.random.default_rng(2)
    draws = rng.normal(size=(20, 11))
    draws[:, 0] += 1.0
    stats = order_statistics(draws[:, 0], draws[:, 1:])
    assert stats.t_p_value < 1e-3 and stats.permutation_p_value < 1e-3


def test_examples_are_read_in_published_order_from_their_columns_and_limit_keeps_the_first(
    tmp_path,
):
    from minkscan.config import ScanConfig
    from minkscan.evaluation.order_run import read_examples

    rows = [{"q": f"question {i}", "choices": ["a", "b"], "a": i} for i in range(6)]
    (tmp_path / "1.jsonl").write_text("\n".join(json.dumps(r) for r in rows[:3]) + "\n")
    (tmp_path / "2.jsonl").write_text("\n".join(json.dumps(r) for r in rows[3:]) + "\n")
    config = ScanConfig(data={"input": [str(tmp_path)], "limit": 5})
    examples, files = read_examples(config, "{q}\n{choices}\n= {a}")
    assert examples == [f"question {i}\na\nb\n= {i}" for i in range(5)]
    assert [Path(f).name for f in files] == ["1.jsonl", "2.jsonl"]
