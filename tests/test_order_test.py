"""The sharded order test (Oren et al., ICLR 2024): shards, orderings, its statistic and its
two p-values, against independent computations of the authors' definitions; settings that
cannot reach the test level refused; the preference a null result could have detected;
valid under the null (a published order that is one more random order) and powerful when
the published order is preferred; examples read as the authors read them."""

from __future__ import annotations

import io
import itertools
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
from minkscan.config import ScanConfig
from minkscan.evaluation.order_examples import (
    LINES,
    PART_SEPARATOR,
    TEMPLATE,
    read_examples,
)
from minkscan.evaluation.order_run import orderings_table
from minkscan.evaluation.order_shards import (
    default_permutations,
    plan_problem,
    shard_bounds,
    shuffled_orders,
)
from minkscan.evaluation.order_test import (
    OrderSettings,
    detectable_preference,
    order_statistics,
    rank_sum_p_value,
)
from minkscan.io.inputs import InputError
from scipy.stats import t as student


def settings(shards: int, permutations: int, seed: int = 0) -> OrderSettings:
    return OrderSettings(LINES, None, None, "\n", shards, permutations, seed)


def test_shards_are_cut_as_the_authors_cut_them():
    """compute_sharded_comparison_test.py: the first n % shards shards one example longer."""
    n, shards = 103, 10
    authors = [(x + 1 if i < n % shards else x) for i, x in enumerate([n // shards] * shards)]
    edges = [0, *itertools.accumulate(authors)]
    assert shard_bounds(n, shards) == list(itertools.pairwise(edges))


def test_each_shard_holds_its_examples_in_published_order_and_distinct_shuffles_of_them():
    examples = [f"example {i}\n" for i in range(12)]
    table = orderings_table(examples, settings(3, 4, seed=7)).to_pylist()
    assert len(table) == 3 * 5
    first = [row for row in table if row["shard"] == 0]
    assert first[0]["order"] == 0 and first[0]["text"] == PART_SEPARATOR.join(examples[:4])
    orders = [tuple(row["text"].split(PART_SEPARATOR)) for row in first]
    assert all(sorted(order) == sorted(examples[:4]) for order in orders)
    assert len(set(orders)) == 5  # no shuffle repeats another or the published order
    again = orderings_table(examples, settings(3, 4, seed=7)).to_pylist()
    other = orderings_table(examples, settings(3, 4, seed=8)).to_pylist()
    assert again == table and other != table
    assert shuffled_orders(4, 4, 7, 0) != shuffled_orders(4, 4, 7, 1)  # a stream per shard


@pytest.mark.parametrize(("size", "permutations"), [(2, 1), (3, 5), (7, 300), (12, 200)])
def test_shuffles_never_equal_the_published_order_nor_each_other(size, permutations):
    for shard in range(5):
        orders = [tuple(o) for o in shuffled_orders(size, permutations, 0, shard)]
        assert tuple(range(size)) not in orders and len(set(orders)) == permutations
        assert all(sorted(order) == list(range(size)) for order in orders)


def test_more_shuffles_than_a_shard_has_orders_are_refused():
    with pytest.raises(ValueError, match="only 5 other orders"):
        shuffled_orders(3, 6, 0, 0)


@pytest.mark.parametrize(
    ("examples", "shards", "permutations", "message"),
    [
        (100, 2, 2, "--shards 2 --permutations 2 cannot reach p < 0.05: its exact p-value is "
                    "at least (1/3)^2 = 0.11; use --permutations 4 (p >= 0.04) or --shards 3 "
                    "(p >= 0.037)"),
        (3, 2, 1, "3 examples are too few for the order test: it needs 2 shards of 2 examples"),
        (7, 4, 1, "7 examples cannot fill 4 shards of at least 2 examples: use --shards "
                  "between 2 and 3"),
        (7, 1, 1, "needs at least 2 shards (a t-test across them), got 1: use --shards between"),
        (8, 4, 2, "shards of 2 examples have only 1 order besides the published one, fewer "
                  "than --permutations 2"),
        (9, 3, 1, "(1/2)^3 = 0.12; use --permutations 2 (p >= 0.037)"),
        (6, 3, 1, "6 examples are too few to reach it with these shuffles per shard"),
        (100, 2, 10**9, "--permutations 1,000,000,000 is more than the 10,000 shuffles per "
                        "shard an order test takes"),
    ],
)  # fmt: skip
def test_settings_that_cannot_reach_the_level_are_refused_naming_settings_that_can(
    examples, shards, permutations, message
):
    assert message in plan_problem(examples, shards, permutations, 0.05)


def test_settings_that_can_reach_the_level_pass():
    assert plan_problem(100, 2, 4, 0.05) is None
    assert plan_problem(10, 5, 1, 0.05) is None  # (1/2)^5 = 0.031
    assert plan_problem(164, 50, 5, 0.05) is None  # HumanEval: shards of 3 or 4


def test_the_default_shuffles_are_as_many_as_the_smallest_shard_has_up_to_50():
    assert default_permutations(164, 50, 50) == 5  # shards of 3 have 5 other orders
    assert default_permutations(100, 50, 50) == 1
    assert default_permutations(1000, 50, 50) == 50


@pytest.mark.parametrize("at_least", [(0, 0, 0), (1, 2, 0), (3, 3, 3), (4, 1, 2)])
def test_the_rank_p_value_is_the_exact_probability_of_so_small_a_rank_sum(at_least):
    permutations = 4
    observed = sum(at_least)
    outcomes = itertools.product(range(permutations + 1), repeat=len(at_least))
    exact = sum(sum(o) <= observed for o in outcomes) / (permutations + 1) ** len(at_least)
    assert rank_sum_p_value(np.array(at_least), permutations) == pytest.approx(exact, abs=1e-12)


def test_the_statistic_is_the_authors_t_of_published_minus_the_mean_shuffle():
    """Their code: z = mean(d) / np.std(d) * sqrt(n), p = 1 - t.cdf(z, n - 1)."""
    rng = np.random.default_rng(0)
    published, shuffled = rng.normal(size=8), rng.normal(size=(8, 5))
    stats = order_statistics(published, shuffled)
    d = published - shuffled.mean(axis=1)
    z = np.mean(d) / np.std(d) * np.sqrt(len(d))
    assert stats.differences == pytest.approx(d.tolist())
    assert stats.t_statistic == pytest.approx(z)
    assert stats.t_p_value == pytest.approx(1 - student.cdf(z, df=len(d) - 1))
    assert stats.at_least == [int((shuffled[i] >= published[i]).sum()) for i in range(8)]


def test_ties_count_against_the_published_order():
    stats = order_statistics(np.zeros(3), np.zeros((3, 4)))
    assert stats.at_least == [4, 4, 4]
    assert stats.permutation_p_value == 1.0 and stats.t_p_value == 1.0


@pytest.mark.parametrize("shards", [5, 20])
def test_the_detectable_preference_is_found_with_80_percent_power(shards):
    """Simulated runs whose per-shard differences have the stated mean: the authors' t-test
    finds 80% of them at 5%."""
    rng = np.random.default_rng(3)
    spread = 2.0
    observed = rng.normal(0, spread, shards)
    delta = detectable_preference(observed, 0.05)
    sigma = observed.std(ddof=1)
    runs = 4000
    found = sum(
        order_statistics(rng.normal(delta, sigma, shards), np.zeros((shards, 1))).t_p_value < 0.05
        for _ in range(runs)
    )
    assert found / runs == pytest.approx(0.8, abs=3 * math.sqrt(0.16 / runs))


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


def test_a_json_lines_file_is_its_raw_lines_as_the_authors_read_them(tmp_path):
    """readlines() in text mode: each line with its newline, CRLF read as LF, a blank line
    kept, the last line without a newline; the numeric fields come along."""
    rows = [{"q": f"question {i}", "score": i * 1.5} for i in range(5)]
    raw = "\r\n".join(json.dumps(r) for r in rows[:3]) + "\n\n" + "\n".join(
        json.dumps(r) for r in rows[3:]
    )  # fmt: skip
    (tmp_path / "bench.jsonl").write_bytes(raw.encode())
    config = ScanConfig(data={"input": [str(tmp_path / "bench.jsonl")]})
    examples = read_examples(config, LINES, None, "\n")
    with open(tmp_path / "bench.jsonl") as handle:  # the authors' load_dataset
        assert examples.texts == handle.readlines()
    assert examples.texts == io.StringIO(raw, newline=None).readlines()
    assert examples.texts[2:4] == [json.dumps(rows[2]) + "\n", "\n"]
    assert examples.read == 6 and list(examples.content) == [str(tmp_path / "bench.jsonl")]
    assert examples.content[str(tmp_path / "bench.jsonl")].startswith("sha256:")
    assert examples.numeric == {}  # the blank line has no score


def test_examples_are_rendered_in_published_order_and_limit_keeps_the_first(tmp_path):
    rows = [{"q": f"question {i}", "choices": ["a", "b"], "a": i} for i in range(6)]
    (tmp_path / "1.jsonl").write_text("\n".join(json.dumps(r) for r in rows[:3]) + "\n")
    (tmp_path / "2.jsonl").write_text("\n".join(json.dumps(r) for r in rows[3:]) + "\n")
    config = ScanConfig(data={"input": [str(tmp_path)], "limit": 5})
    examples = read_examples(config, TEMPLATE, "{q}\n{choices}\n= {a}", "\n")
    assert examples.texts == [f"question {i}\na\nb\n= {i}\n" for i in range(5)]
    assert [Path(f).name for f in examples.files] == ["1.jsonl", "2.jsonl"]
    assert examples.read == 6 and examples.numeric == {"a": [0.0, 1.0, 2.0, 3.0, 4.0]}


@pytest.mark.parametrize(
    ("lines", "template", "message"),
    [
        (['{"q": "a"}', '{"q": "b"}'], "just text", "reads no column"),
        (['{"q": "a"}', '{"q": "b"}'], "{q:>2000000000}", "has a format spec or conversion"),
        (['{"q": "a"}', '{"q": "b"}'], "{q!r}", "has a format spec or conversion"),
        (['{"q": "a"}', '{"q": "b"}'], "{0}", "is not a column name"),
        (['{"q": "a"}', '{"q": "b"}'], "{q[0]}", "is not a column name"),
        (['{"q": "a"}', '{"q": "b"}'], "{q", "expected '}' before end of string"),
        (['{"q": ""}', '{"q": " "}'], "{q}", "every rendered example is empty"),
        (['{"q": "a"}', '{"q": "a"}'], "{q}", "all 2 examples read the same"),
        (['{"q": "a\\u001eb"}', '{"q": "c"}'], "{q}", "example 1 holds the character U+001E"),
    ],
)
def test_examples_that_cannot_be_tested_are_refused_in_one_line(tmp_path, lines, template, message):
    (tmp_path / "bench.jsonl").write_text("\n".join(lines) + "\n")
    config = ScanConfig(data={"input": [str(tmp_path / "bench.jsonl")]})
    with pytest.raises(InputError, match=re.escape(message)):
        read_examples(config, TEMPLATE, template, "\n")


def test_a_file_that_is_not_utf8_is_refused_naming_its_line(tmp_path):
    path = tmp_path / "bench.jsonl"
    path.write_bytes(b'{"q": "one"}\n{"q": "caf\xe9"}\n')
    config = ScanConfig(data={"input": [str(path)]})
    with pytest.raises(InputError, match=f"{path}: line 2 is not UTF-8 \\(byte 0xe9\\)"):
        read_examples(config, LINES, None, "\n")


def _result(shift: float, exchangeable: bool):
    from minkscan.evaluation.exchangeability import ExchangeabilityCheck, OrderedFeature
    from minkscan.evaluation.order_test import Cost, OrderTestResult

    rng = np.random.default_rng(4)
    stats = order_statistics(rng.normal(shift, 1, 10), rng.normal(0, 1, (10, 5)))
    features = [OrderedFeature("length", 0.9 if not exchangeable else 0.0,
                               0.001 if not exchangeable else 0.8)]  # fmt: skip
    check = ExchangeabilityCheck(0.1, 0.1, 0.5, 40, 999, features)
    content = {"bench.jsonl": "sha256:" + "ab" * 32}
    return OrderTestResult(settings(10, 5), ["bench.jsonl"], 40, "tiny", 0.05,
                           Cost(60, 60, 999), stats, check, 40, content, "w1")  # fmt: skip


def test_on_a_sorted_file_a_preference_is_withheld_naming_the_audits_that_can_answer():
    result = _result(shift=5.0, exchangeable=False)
    assert result.significant and result.decision == "withheld"
    finding, check = result.verdict()
    assert finding.startswith("Withheld: the model prefers the published order of bench.jsonl")
    assert "dataset inference against a private held-out split" in finding
    assert "it follows length" in check and "the preference found is withheld" in check
    assert result.to_json()["trustworthy"] is False


def test_on_a_sorted_file_a_null_result_stands_and_states_what_it_could_detect():
    result = _result(shift=0.0, exchangeable=False)
    assert not result.significant and result.decision == "no evidence"
    finding, check = result.verdict()
    assert finding.startswith("No evidence at the 5% level that the model tiny (weights w1) was "
                              "trained on bench.jsonl (raw lines, examples 1-40 of 40, "
                              "sha256:abababababababab")  # fmt: skip
    detectable = result.statistics.detectable(0.05)
    assert f"could have detected a preference of {detectable:.3g} nats per shard" in finding
    assert "the null result stands" in check and result.to_json()["trustworthy"] is True


def test_on_a_random_file_a_preference_is_evidence():
    result = _result(shift=5.0, exchangeable=True)
    assert result.decision == "evidence" and result.verdict()[0].startswith("Evidence at the 5%")
