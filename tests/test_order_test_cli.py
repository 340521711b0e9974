"""`minkscan order-test` as a user runs it: a JSON lines benchmark scored as its raw lines,
each tokenised on its own (the authors' `compute_sharded_comparison_test.py`), a Parquet
benchmark through a template, the scoring pipeline's actors, a result that is the test of
independently computed log-likelihoods and names what it tested, a re-run that resumes,
several files in one table with Holm's adjustment, and bad input refused in one line before
anything is scored or written."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import torch
from helpers import SAMPLE
from minkscan.cli import main
from minkscan.commands import order_test as order_command
from minkscan.config import ModelConfig
from minkscan.evaluation import order_shards
from minkscan.evaluation.order_examples import COLUMN, LINES, PART_SEPARATOR, TEMPLATE
from minkscan.evaluation.order_run import orderings_table
from minkscan.evaluation.order_test import OrderSettings, order_statistics
from minkscan.models.loading import load_model
from minkscan.statistics import holm

TEMPLATE_TEXT = "Q: {question}\\nA: {answer}"


def _write_benchmark(path: Path, start: int, rows: int = 24) -> Path:
    texts = pl.read_parquet(SAMPLE)["text"].slice(start, rows).to_list()
    with path.open("w") as handle:
        for index, text in enumerate(texts):
            row = {"question": text[:50], "answer": text[50:100], "level": index % 5}
            handle.write(json.dumps(row) + "\n")
    return path


@pytest.fixture(scope="module")
def benchmark_file(tmp_path_factory) -> Path:
    """24 question/answer examples as JSON lines, in their published order."""
    return _write_benchmark(tmp_path_factory.mktemp("bench") / "bench.jsonl", 0)


def _authors_log_likelihood(loaded, examples: list[str]) -> float:
    """The authors' way, independently: each example `tokenizer.encode`d on its own, the
    token lists concatenated, log p summed over every token after the first (float64)."""
    tokens = [t for example in examples for t in loaded.tokenizer.encode(example)]
    ids = torch.tensor([tokens])
    with torch.no_grad():
        logits = loaded.model(input_ids=ids).logits.double()
    logp = torch.log_softmax(logits[0, :-1], dim=-1)
    return float(logp.gather(1, ids[0, 1:, None]).sum())


def _expected(loaded, examples: list[str], settings: OrderSettings):
    table = orderings_table(examples, settings).to_pylist()
    grid = np.zeros((settings.shards, settings.permutations + 1))
    for row in table:
        parts = row["text"].split(PART_SEPARATOR)
        grid[row["shard"], row["order"]] = _authors_log_likelihood(loaded, parts)
    return order_statistics(grid[:, 0], grid[:, 1:])


@pytest.mark.usefixtures("local_ray")
@pytest.mark.slow
def test_raw_lines_are_scored_as_the_authors_score_them_and_the_result_names_what_was_tested(
    benchmark_file, tiny_llama_dir, tmp_path, capsys
):
    out = tmp_path / "order"
    args = ["order-test", "--input", str(benchmark_file), "--model", str(tiny_llama_dir),
            "--shards", "4", "--permutations", "5", "--seed", "3",
            "--output", str(out)]  # fmt: skip
    assert main(args) == 0
    printed = capsys.readouterr().out
    result = json.loads((out / "order_test.json").read_text())
    lines = benchmark_file.read_text().splitlines(keepends=True)
    loaded = load_model(ModelConfig(name=str(tiny_llama_dir), device="cpu"))
    expected = _expected(loaded, lines, OrderSettings(LINES, None, None, "\n", 4, 5, 3))
    stats = result["statistics"]
    assert stats["published"] == pytest.approx(expected.published, rel=1e-4)
    assert stats["t_p_value"] == pytest.approx(expected.t_p_value, rel=1e-3, abs=1e-6)
    assert stats["permutation_p_value"] == pytest.approx(expected.permutation_p_value)
    # Every ordering of a shard holds the same tokens.
    scores = pl.read_parquet(out / "scores" / "*.parquet")
    assert (scores.group_by("shard").agg(pl.col("n_tokens").n_unique())["n_tokens"] == 1).all()
    assert result["scored"] == "raw lines" and result["settings"]["examples"] == LINES
    assert result["examples"] == result["examples_read"] == 24
    digest = __import__("hashlib").sha256(benchmark_file.read_bytes()).hexdigest()
    assert result["input_content"] == {str(benchmark_file): f"sha256:{digest}"}
    assert result["weights"].startswith("sha256:")
    assert result["decision"] in ("evidence", "no evidence", "withheld")
    verdict = result["verdict"][0]
    assert f"{benchmark_file} (raw lines, examples 1-24 of 24, sha256:{digest[:16]}" in verdict
    assert f"(weights {result['weights']})" in verdict and verdict in printed
    if result["decision"] == "no evidence":
        assert f"could have detected a preference of {result['detectable_preference']:.3g}" in (
            verdict
        )
    # The exchangeability check read position against length and the numeric column.
    features = {f["name"] for f in result["exchangeability"]["features"]}
    assert features == {"length", "level"}


@pytest.mark.usefixtures("local_ray")
@pytest.mark.slow
def test_a_template_on_s3_is_tested_and_a_killed_run_resumes_shard_by_shard(
    benchmark_file, tiny_llama_dir, tmp_path, s3_server, capsys
):
    """A Parquet benchmark in, the order test's output out, on S3, as a cluster runs it."""
    endpoint, client = s3_server
    pl.read_ndjson(benchmark_file).write_parquet(tmp_path / "bench.parquet")
    client.upload_file(str(tmp_path / "bench.parquet"), "corpus", "bench/bench.parquet")
    config = tmp_path / "s3.yaml"
    config.write_text(
        f"model: {{name: '{tiny_llama_dir}', device: cpu}}\n"
        f"data:\n  s3: {{endpoint_url: '{endpoint}', region: us-east-1,"
        " access_key_id: testing, secret_access_key: testing}\n"
    )
    args = ["order-test", "--config", str(config), "--input", "s3://corpus/bench/bench.parquet",
            "--template", TEMPLATE_TEXT, "--shards", "4", "--permutations", "3", "--seed", "5",
            "--output", "s3://corpus/order"]  # fmt: skip
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "16 orderings: about 16 forward passes" in printed
    assert "scored 16 documents" in printed
    assert "silent about shuffled, reformatted or paraphrased copies" in printed

    def result() -> dict:
        body = client.get_object(Bucket="corpus", Key="order/order_test.json")["Body"]
        return json.loads(body.read())

    examples = [f"Q: {r['question']}\nA: {r['answer']}\n"
                for r in pl.read_ndjson(benchmark_file).to_dicts()]  # fmt: skip
    loaded = load_model(ModelConfig(name=str(tiny_llama_dir), device="cpu"))
    expected = _expected(loaded, examples, OrderSettings(TEMPLATE, None, None, "\n", 4, 3, 5))
    stats = result()["statistics"]
    assert stats["published"] == pytest.approx(expected.published, rel=1e-4)
    assert stats["t_p_value"] == pytest.approx(expected.t_p_value, rel=1e-3, abs=1e-6)
    assert result()["cost"]["forward_passes"] == 16 and result()["examples"] == 24
    assert result()["scored"] == "template 'Q: {question}\\nA: {answer}', each followed by '\\n'"
    assert list(result()["input_content"]) == ["corpus/bench/bench.parquet"]

    # Killed after three shards were committed: the re-run scores the fourth alone.
    parts = sorted(o["Key"] for o in client.list_objects_v2(Bucket="corpus")["Contents"]
                   if o["Key"].startswith("order/scores/part-"))  # fmt: skip
    assert len(parts) == 4  # one piece and one commit per shard
    client.delete_object(Bucket="corpus", Key=parts[0])
    client.delete_object(Bucket="corpus", Key="order/order_test.json")
    assert main(args) == 0
    assert "scored 4 documents" in capsys.readouterr().out
    assert result()["statistics"] == stats

    changed = list(args)
    changed[changed.index("--seed") + 1] = "6"
    assert main(changed) == 2
    assert "holds an order test with other settings" in capsys.readouterr().err


@pytest.mark.usefixtures("local_ray")
@pytest.mark.slow
def test_several_files_are_tested_in_one_table_with_holm_adjusted_p_values(
    tiny_llama_dir, tmp_path, capsys
):
    benchmarks = tmp_path / "benchmarks"
    benchmarks.mkdir()
    _write_benchmark(benchmarks / "a.jsonl", 0, 12)
    _write_benchmark(benchmarks / "b.jsonl", 12, 12)
    out = tmp_path / "orders"
    args = ["order-test", "--input", str(benchmarks), "--per-file", "--model",
            str(tiny_llama_dir), "--shards", "4", "--permutations", "2",
            "--output", str(out)]  # fmt: skip
    assert main(args) == 0
    printed = capsys.readouterr().out
    summary = json.loads((out / "order_tests.json").read_text())
    tests = summary["tests"]
    assert [t["file"] for t in tests] == ["a.jsonl", "b.jsonl"]
    singles = [json.loads((out / t["directory"] / "order_test.json").read_text()) for t in tests]
    t_p = [s["statistics"]["t_p_value"] for s in singles]
    assert [t["t_p_holm"] for t in tests] == pytest.approx(holm(t_p))
    assert [t["t_p_value"] for t in tests] == pytest.approx(t_p)
    assert summary["verdict"].endswith("after Holm's adjustment across 2 tests that any was "
                                       "trained on in published order.") or "Evidence" in (
        summary["verdict"])  # fmt: skip
    assert "| a.jsonl |" in printed and (out / "order_tests.md").read_text() in printed


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--shards", "13"], "24 examples cannot fill 13 shards of at least 2 examples"),
        (["--shards", "2", "--permutations", "2"], "cannot reach p < 0.05: its exact p-value"),
        (["--template", "{question} {choices}"], "no column(s) ['choices']"),
        (["--template", "just text"], "reads no column"),
        (["--template", "{question:>2000000000}"], "has a format spec or conversion"),
        (["--shards", "1"], "use --shards between 2 and 12"),
        (["--permutations", "0"], "--permutations must be at least 1"),
        (["--shards", "2", "--permutations", "999999999"], "use --permutations 10,000 or fewer"),
        (["--separator", "\\n\\n"], "--separator follows examples read from a column"),
    ],
)
def test_bad_input_is_one_line_and_exit_2_before_anything_is_written(
    benchmark_file, tiny_llama_dir, tmp_path, capsys, extra, message
):
    out = tmp_path / "refused"
    args = ["order-test", "--input", str(benchmark_file), "--output", str(out), "--model",
            str(tiny_llama_dir), *extra]  # fmt: skip
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
    assert not out.exists()


def test_a_latin1_file_is_refused_naming_its_line(tiny_llama_dir, tmp_path, capsys):
    bench = tmp_path / "latin1.jsonl"
    bench.write_bytes(b'{"q": "one"}\n{"q": "two"}\n{"q": "caf\xe9"}\n{"q": "four"}\n')
    args = ["order-test", "--input", str(bench), "--output", str(tmp_path / "o"), "--model",
            str(tiny_llama_dir), "--shards", "2", "--permutations", "1"]  # fmt: skip
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"minkscan order-test: {bench}: line 3 is not UTF-8 (byte 0xe9); convert the " \
        "file to UTF-8"  # fmt: skip


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("orderings.parquet", "holds orderings.parquet without the plan the order test writes"),
        ("notes.txt", "holds files this command did not write (notes.txt)"),
    ],
)
def test_an_output_holding_files_the_order_test_did_not_write_is_refused_and_left_alone(
    benchmark_file, tiny_llama_dir, tmp_path, capsys, name, message
):
    out = tmp_path / "mine"
    out.mkdir()
    (out / name).write_text("a user's own file")
    args = ["order-test", "--input", str(benchmark_file), "--output", str(out), "--model",
            str(tiny_llama_dir), "--shards", "4", "--permutations", "3"]  # fmt: skip
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert str(out) in err and message in err and len(err.splitlines()) == 1
    assert (out / name).read_text() == "a user's own file"
    assert sorted(p.name for p in out.iterdir()) == [name]


def test_an_output_another_run_is_writing_is_refused_before_anything_is_scored(
    benchmark_file, tiny_llama_dir, tmp_path, capsys
):
    from minkscan.io.lease import WriterLease

    out = tmp_path / "busy"
    out.mkdir()
    WriterLease(str(out), s3=None).acquire()  # another live order test holds it
    args = ["order-test", "--input", str(benchmark_file), "--output", str(out), "--model",
            str(tiny_llama_dir), "--shards", "4", "--permutations", "3"]  # fmt: skip
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert f"output {out} is being written by another run" in err and len(err.splitlines()) == 1
    assert sorted(p.name for p in out.iterdir()) == ["_lease.json"]


def test_orderings_longer_than_the_context_are_scored_with_sliding_windows(tiny_llama):
    """The order test's scoring settings (stride: half the context) give each long ordering
    the log-likelihood of its sliding windows, every token after the first predicted once."""
    from minkscan.config import ScanConfig
    from minkscan.evaluation.order_run import order_config
    from minkscan.scorer import DocumentScorer
    from minkscan.scoring.windows import plan_windows

    config = order_config(ScanConfig(scoring={"max_tokens": 64}), "/tmp/x", OrderSettings(
        COLUMN, None, "text", "\n", 2, 1, 0))  # fmt: skip
    assert config.scoring.window_stride == 32 and config.scoring.part_separator == PART_SEPARATOR
    examples = pl.read_parquet(SAMPLE)["text"].head(6).to_list()
    text = PART_SEPARATOR.join(examples)
    scored = DocumentScorer(tiny_llama, config.scoring).score_frame([text]).row(0, named=True)
    assert scored["status"] == "windowed"
    ids = [t for example in examples for t in tiny_llama.tokenizer.encode(example)]
    total = 0.0
    for window in plan_windows(len(ids), 64, 32):
        part = torch.tensor([ids[window.start : window.end]])
        with torch.no_grad():
            logp = torch.log_softmax(tiny_llama.model(input_ids=part).logits[0, :-1].double(), -1)
        picked = logp.gather(1, part[0, 1:, None])[window.first_kept :, 0]
        total += float(picked.sum())
    assert scored["mean_logprob"] * scored["n_tokens"] == pytest.approx(total, rel=1e-4)
    assert scored["n_tokens"] == len(ids) - 1


def test_the_cli_defaults_are_the_librarys():
    assert order_command.DEFAULT_SHARDS == order_shards.DEFAULT_SHARDS
    assert order_command.DEFAULT_PERMUTATIONS == order_shards.DEFAULT_PERMUTATIONS


def test_an_output_inside_the_benchmark_directory_is_refused_before_anything_is_written(
    benchmark_file, tiny_llama_dir, tmp_path, capsys
):
    """Else the next run would read the orderings it wrote as examples of the benchmark."""
    folder = tmp_path / "benchmarks"
    folder.mkdir()
    (folder / "bench.jsonl").write_bytes(benchmark_file.read_bytes())
    out = folder / "order"
    args = ["order-test", "--input", str(folder), "--output", str(out), "--model",
            str(tiny_llama_dir), "--shards", "4", "--permutations", "3"]  # fmt: skip
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"minkscan order-test: output {out} is inside the input {folder}: its files "
                   "would be read as documents; put the output outside the input")  # fmt: skip
    assert not out.exists()
