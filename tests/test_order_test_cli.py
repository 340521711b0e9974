"""`minkscan order-test` as a user runs it: a benchmark file with several columns, a
template, the scoring pipeline's actors, a result that is the test of independently
computed log-likelihoods, a re-run that resumes, and bad input refused in one line before
anything is scored."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import torch
from helpers import SAMPLE
from minkscan.cli import main
from minkscan.config import ModelConfig
from minkscan.evaluation.order_run import orderings_table
from minkscan.evaluation.order_test import OrderSettings, order_statistics
from minkscan.models.loading import load_model

TEMPLATE = "Q: {question}\\nA: {answer}"


@pytest.fixture(scope="module")
def benchmark_file(tmp_path_factory) -> Path:
    """24 question/answer examples as JSON lines, in their published order."""
    path = tmp_path_factory.mktemp("bench") / "bench.jsonl"
    texts = pl.read_parquet(SAMPLE)["text"].head(24).to_list()
    with path.open("w") as handle:
        for text in texts:
            handle.write(json.dumps({"question": text[:50], "answer": text[50:100]}) + "\n")
    return path


def _log_likelihood(loaded, text: str) -> float:
    """Sum of log p of every token after the first, in float64, from the model's logits."""
    ids = torch.tensor([loaded.tokenizer(text)["input_ids"]])
    with torch.no_grad():
        logits = loaded.model(input_ids=ids).logits.double()
    logp = torch.log_softmax(logits[0, :-1], dim=-1)
    return float(logp.gather(1, ids[0, 1:, None]).sum())


@pytest.mark.usefixtures("local_ray")
def test_the_result_is_the_order_test_of_the_orderings_log_likelihoods_and_a_killed_run_resumes(
    benchmark_file, tiny_llama_dir, tmp_path, s3_server, capsys
):
    """On S3 (a Parquet benchmark in, the order test's output out), as a cluster runs it."""
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
            "--template", TEMPLATE, "--shards", "4", "--permutations", "3", "--seed", "5",
            "--output", "s3://corpus/order"]  # fmt: skip
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "16 orderings: about 16 forward passes" in printed
    assert "scored 16 documents" in printed
    assert "silent about shuffled, reformatted or paraphrased copies" in printed

    def result() -> dict:
        body = client.get_object(Bucket="corpus", Key="order/order_test.json")["Body"]
        return json.loads(body.read())

    examples = [f"Q: {r['question']}\nA: {r['answer']}"
                for r in pl.read_ndjson(benchmark_file).to_dicts()]  # fmt: skip
    table = orderings_table(examples, OrderSettings(None, "\n\n", 4, 3, 5)).to_pylist()
    loaded = load_model(ModelConfig(name=str(tiny_llama_dir), device="cpu"))
    grid = np.zeros((4, 4))
    for row in table:
        grid[row["shard"], row["order"]] = _log_likelihood(loaded, row["text"])
    expected = order_statistics(grid[:, 0], grid[:, 1:])
    stats = result()["statistics"]
    assert stats["published"] == pytest.approx(expected.published, rel=1e-4)
    assert stats["t_p_value"] == pytest.approx(expected.t_p_value, rel=1e-3, abs=1e-6)
    assert stats["permutation_p_value"] == pytest.approx(expected.permutation_p_value)
    assert result()["cost"]["forward_passes"] == 16 and result()["examples"] == 24

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


def test_orderings_longer_than_the_context_are_scored_with_sliding_windows(tiny_llama):
    """The order test's scoring settings (stride: half the context) give each long ordering
    the log-likelihood of its sliding windows, every token after the first predicted once."""
    from minkscan.config import ScanConfig
    from minkscan.evaluation.order_run import order_config
    from minkscan.scorer import DocumentScorer
    from minkscan.scoring.windows import plan_windows

    config = order_config(ScanConfig(scoring={"max_tokens": 64}), "/tmp/x", OrderSettings(
        None, "\n\n", 2, 1, 0))  # fmt: skip
    assert config.scoring.window_stride == 32
    text = " ".join(pl.read_parquet(SAMPLE)["text"].head(6).to_list())
    scored = DocumentScorer(tiny_llama, config.scoring).score_frame([text]).row(0, named=True)
    assert scored["status"] == "windowed"
    ids = tiny_llama.tokenizer(text)["input_ids"]
    total = 0.0
    for window in plan_windows(len(ids), 64, 32):
        part = torch.tensor([ids[window.start : window.end]])
        with torch.no_grad():
            logp = torch.log_softmax(tiny_llama.model(input_ids=part).logits[0, :-1].double(), -1)
        picked = logp.gather(1, part[0, 1:, None])[window.first_kept :, 0]
        total += float(picked.sum())
    assert scored["loss"] * scored["n_tokens"] == pytest.approx(total, rel=1e-4)
    assert scored["n_tokens"] == len(ids) - 1


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--shards", "13"], "24 examples cannot fill 13 shards"),
        (["--template", "{question} {choices}"], "no column(s) ['choices']"),
        (["--shards", "1"], "at least 2 shards"),
        (["--permutations", "0"], "--permutations must be at least 1"),
    ],
)
def test_bad_input_is_one_line_and_exit_2_before_anything_is_scored(
    benchmark_file, tiny_llama_dir, tmp_path, capsys, extra, message
):
    out = tmp_path / "refused"
    args = ["order-test", "--input", str(benchmark_file), "--output", str(out), "--model",
            str(tiny_llama_dir), "--template", TEMPLATE, *extra]  # fmt: skip
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
    assert not (out / "scores").exists()
