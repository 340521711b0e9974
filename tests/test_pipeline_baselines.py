"""Extra-pass baselines and sliding windows as stages of `run_scoring`: the same numbers as
the in-process functions, each row once, bad rows kept with their status and null scores."""

from __future__ import annotations

import json
import re
from pathlib import Path

import polars as pl
import pytest
from minkscan.baselines.batch import RunnerBatch
from minkscan.baselines.extra_pass import lowercase_scores, neighbor_scores, reference_scores
from minkscan.baselines.pac import PAC
from minkscan.baselines.samia import SaMIA
from minkscan.baselines.wbc import WBC
from minkscan.cli import main
from minkscan.config import build_config
from minkscan.distributed.runner import run_scoring
from minkscan.io.scores import OutputError
from minkscan.models.loading import load_model
from minkscan.scorer import DocumentScorer
from tiny_models import TRAINING_TEXT

TEXTS = [*TRAINING_TEXT[:4], "", "A", None, " ".join(TRAINING_TEXT[4:])]
IDS = [f"doc-{i:02d}" for i in range(len(TEXTS))]
BASELINE_COLUMNS = [
    "lowercase",
    "lowercase_n_tokens",
    "neighbor",
    "neighbor_source",
    "ref",
    "ref_n_tokens",
]


pytestmark = pytest.mark.usefixtures("local_ray")


@pytest.mark.slow
def test_baseline_stages_match_the_in_process_functions(tiny_llama_dir, tiny_gpt2_dir, tmp_path):
    frame = pl.DataFrame({"id": IDS, "text": TEXTS}, schema={"id": pl.Utf8, "text": pl.Utf8})
    frame.write_parquet(tmp_path / "in.parquet")
    overrides = {
        "model.name": str(tiny_llama_dir),
        "model.device": "cpu",
        # Windows of 32 tokens: most texts are longer, so every pass below is windowed.
        "scoring": {"k_percentages": [20], "max_tokens": 32, "window_stride": 12},
        "data.input": [str(tmp_path / "in.parquet")],
        "data.output": str(tmp_path / "out"),
        "ray.block_rows": 3,
        "baselines": {
            "lowercase": True,
            "reference_model": {"name": str(tiny_gpt2_dir), "device": "cpu"},
            "neighbors": 2,
            "neighbor_seed": 5,
        },
    }
    config = build_config({}, overrides)
    summary = run_scoring(config)

    assert summary.documents == len(TEXTS)
    scores = pl.read_parquet(str(tmp_path / "out" / "part-*.parquet")).sort("id")
    assert scores["id"].to_list() == IDS
    target = DocumentScorer(load_model(config.model), config.scoring)
    reference = DocumentScorer(load_model(config.baselines.reference_model), config.scoring)
    assert scores.columns == [
        "id",
        "source",
        "row",
        "n_tokens",
        "status",
        *target.columns,
        *BASELINE_COLUMNS,
    ]
    base = target.score_frame(TEXTS)
    expected = pl.concat(
        [
            base,
            lowercase_scores(target, target.encode(TEXTS), base["mean_logprob"]),
            neighbor_scores(
                target, target.encode(TEXTS), base["mean_logprob"], n_neighbors=2, seed=5
            ),
            reference_scores(reference, reference.encode(TEXTS), base["mean_logprob"]),
        ],
        how="horizontal",
    )
    assert "windowed" in scores["status"].to_list()
    assert scores["status"].to_list() == expected["status"].to_list()
    assert scores["ref_n_tokens"].to_list() != scores["n_tokens"].to_list()  # own tokenizer
    for column in ("n_tokens", "lowercase_n_tokens", "ref_n_tokens", "neighbor_source"):
        assert scores[column].to_list() == expected[column].to_list(), column
    for column in ("mean_logprob", "minkpp_k20", "lowercase", "neighbor", "ref"):
        got, want = scores[column].to_list(), expected[column].to_list()
        assert [g is None for g in got] == [w is None for w in want], column
        assert all(
            g is None or g == pytest.approx(w, rel=1e-5, abs=1e-6)
            for g, w in zip(got, want, strict=True)
        ), column
    for index in (4, 6):  # empty, missing text
        assert all(
            scores[c][index] is None for c in ("mean_logprob", "lowercase", "neighbor", "ref")
        )
    # "A" is <bos> A for the target but one token, nothing to predict, for the reference.
    assert scores["mean_logprob"][5] is not None and scores["ref"][5] is None
    passes = {
        "single-pass methods": 1,
        "Lowercase": 1,
        f"Neighbor (causal-lm:{tiny_llama_dir})": 3,
        f"Ref ({tiny_gpt2_dir})": 1,
    }
    assert summary.forward_passes == passes
    manifest = json.loads(Path(summary.manifest).read_text())
    assert manifest["summary"]["forward_passes"] == passes
    # Each pass is timed by the stage that runs it; the timing never reaches the score files.
    assert summary.pass_seconds.keys() == passes.keys()
    assert all(seconds > 0 for seconds in summary.pass_seconds.values())
    assert manifest["summary"]["pass_seconds"] == summary.pass_seconds
    assert re.search(
        r"forward passes per document \(actor seconds\): single-pass methods 1 \(\d+\.\d s\), "
        r"Lowercase 1 \(\d+\.\d s\)",
        summary.line(),
    )


def test_resuming_with_other_baselines_fails_before_scoring_and_names_the_columns(
    tiny_llama_dir, tmp_path
):
    pl.DataFrame({"id": IDS[:1], "text": TEXTS[:1]}).write_parquet(tmp_path / "in.parquet")
    overrides = {
        "model.name": str(tiny_llama_dir),
        "data.input": [str(tmp_path / "in.parquet")],
        "data.output": str(tmp_path / "out"),
    }
    run_scoring(build_config({}, overrides))
    written = sorted(path.name for path in (tmp_path / "out").iterdir())
    with pytest.raises(OutputError, match="holds scores of another run") as refused:
        run_scoring(build_config({}, overrides | {"baselines.lowercase": True}))
    assert "baselines.lowercase: False -> True" in str(refused.value)
    assert "lowercase_n_tokens'" in str(refused.value)  # the columns it would add
    assert sorted(path.name for path in (tmp_path / "out").iterdir()) == written


@pytest.mark.slow
def test_pac_wbc_and_samia_run_as_stages_with_the_in_process_values(
    tiny_llama_dir, tiny_gpt2_dir, tmp_path
):
    """Through the CLI: PAC and SaMIA on the scoring actors, WBC on the reference's (reading
    the main pass's per-token log p, which never reach the score files)."""
    texts = TEXTS[:3] + ["", "A"]
    ids = IDS[: len(texts)]
    pl.DataFrame({"id": ids, "text": texts}).write_parquet(tmp_path / "in.parquet")
    code = main(["score", "--input", str(tmp_path / "in.parquet"), "--output",
                 str(tmp_path / "out"), "--model", str(tiny_llama_dir), "--set",
                 f"baselines.reference_model={tiny_gpt2_dir}", "--set", "baselines.pac=true",
                 "--set", "baselines.wbc=true",
                 "--set", "baselines.samia=true", "--set", "baselines.samia_samples=2",
                 "--set", "baselines.samia_max_length=48",
                 "--set", "ray.block_rows=2"])  # fmt: skip
    assert code == 0
    scores = pl.read_parquet(str(tmp_path / "out" / "part-*.parquet")).sort("id")
    assert {"pac", "wbc", "samia", "samia_generated_tokens"} <= set(scores.columns)
    assert not any(name.startswith("_") for name in scores.columns)

    config = build_config({}, {"model.name": str(tiny_llama_dir), "baselines": {
        "pac": True, "wbc": True, "samia": True, "samia_samples": 2, "samia_max_length": 48,
        "reference_model": str(tiny_gpt2_dir)}})  # fmt: skip
    target = DocumentScorer(load_model(config.model), config.scoring)
    reference = DocumentScorer(load_model(config.baselines.reference_model), config.scoring)
    documents = target.encode(texts)
    loss = pl.Series(target.score_documents(documents)["mean_logprob"], dtype=pl.Float64)
    main_pass = RunnerBatch(documents, loss)
    references = RunnerBatch(reference.encode(texts), loss,
                             target_logprobs=main_pass.logprobs(target))  # fmt: skip
    expected = {
        "pac": PAC(config.baselines)(target, main_pass)["pac"],
        "samia": SaMIA(config.baselines)(target, main_pass)["samia"],
        "wbc": WBC(config.baselines)(reference, references)["wbc"],
    }
    for column, want in expected.items():
        got = scores[column].to_list()
        assert [g is None for g in got] == [w is None for w in want], column
        assert got == pytest.approx(want.to_list(), abs=1e-6), column
    assert scores["pac"][3] is None and scores["wbc"][4] is None  # empty; nothing for gpt2
    manifest = json.loads((tmp_path / "out" / "_manifest.json").read_text())
    assert manifest["summary"]["forward_passes"] == {
        "single-pass methods": 1, "PAC": 5, "SaMIA": 2, f"Ref ({tiny_gpt2_dir})": 1,
        f"WBC ({tiny_gpt2_dir})": 0,
    }  # fmt: skip
