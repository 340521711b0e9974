"""`minkscan benchmark` end to end on a tiny model, and the tables it is built from."""

from __future__ import annotations

import json

import polars as pl
import pytest
from minkscan.cli import main
from minkscan.evaluation.tables import metric_table, to_markdown
from tiny_models import TRAINING_TEXT


def test_metric_table_has_auroc_and_tpr_per_group_plus_all() -> None:
    frame = pl.DataFrame(
        {
            "label": [0, 1, 0, 1, 0, 1],
            "group": ["32", "32", "64", "64", "64", "64"],
            "good": [0.5, 0.6, 0.1, 0.3, 0.2, 0.4],
            "bad": [0.9, 0.1, 0.8, 0.2, None, None],
        }
    )
    table = metric_table(frame, {"Good": "good", "Bad": "bad"})
    good, bad = table.to_dicts()
    assert good["method"] == "Good" and good["auroc_32"] == good["auroc_64"] == 1.0
    assert good["auroc_all"] == pytest.approx(7 / 9)
    assert good["tpr@0.05fpr_all"] == pytest.approx(1 / 3)
    assert bad["auroc_all"] == 0.0  # null scores are dropped, not counted as zero


def test_a_group_named_all_keeps_its_own_columns_beside_the_pooled_ones() -> None:
    frame = pl.DataFrame(
        {"label": [0, 1, 0, 1], "group": ["all", "all", "x", "x"], "good": [0.1, 0.2, 0.4, 0.3]}
    )
    (row,) = metric_table(frame, {"Good": "good"}).to_dicts()
    assert row["auroc_all"] == 1.0 and row["auroc_x"] == 0.0  # the group "all" alone
    assert row["auroc_all groups"] == 0.5 and row["n_all groups"] == "2/2"


def test_detailed_metric_table_adds_auroc_interval_tpr_at_1pct_and_fpr_at_95pct() -> None:
    frame = pl.DataFrame(
        {"label": [0, 0, 0, 0, 1, 1, 1, 1], "group": ["g"] * 8, "s": [1, 2, 3, 6, 4, 5, 7, 8]}
    )
    (row,) = metric_table(frame, {"S": "s"}, detailed=True, n_resamples=50).to_dicts()
    assert row["auroc_g"] == pytest.approx(14 / 16)
    assert row["auroc_g_lo"] <= row["auroc_g"] <= row["auroc_g_hi"] <= 1.0
    assert row["auroc_g_lo"] < row["auroc_g_hi"]
    assert row["tpr@0.01fpr_g"] == pytest.approx(0.5)  # threshold 7: no false positive
    assert row["fpr@0.95tpr_g"] == pytest.approx(0.25)  # threshold 4: one non-member (6) above
    markdown = to_markdown(metric_table(frame, {"S": "s"}, detailed=True, n_resamples=50))
    assert "auroc_g_lo" not in markdown and f"0.875 [{row['auroc_g_lo']:.3f}, " in markdown


@pytest.mark.usefixtures("local_ray")
@pytest.mark.slow
def test_benchmark_command_scores_through_the_pipeline_with_baselines_and_windows(
    tiny_llama_dir, tiny_gpt2_dir, tmp_path, capsys
):
    texts = TRAINING_TEXT * 2  # 12 per group; --limit 4 takes the first 4 of each label
    paths = []
    for group in ("length32", "length64"):
        path = tmp_path / f"{group}.parquet"
        pl.DataFrame({"text": texts, "label": [0, 1] * (len(texts) // 2)}).write_parquet(path)
        paths.append(str(path))
    out, work = tmp_path / "out", tmp_path / "work"
    args = ["benchmark", "--input", *paths, "--neighbors", "2", "--model", str(tiny_llama_dir)]
    args += ["--lowercase", "--set", "baselines.wbc=true", "--set", "baselines.pac=true"]
    args += ["--ref-model", str(tiny_gpt2_dir), "--max-tokens", "24", "--window-stride", "16"]
    args += ["--limit", "4"]
    code = main([*args, "--output", str(out), "--work-dir", str(work)])
    assert code == 0
    assert "Min-K%++" in capsys.readouterr().out
    assert list((work / "scores").glob("part-*.parquet"))  # scored by run_scoring's shards
    tables = json.loads((out / "tables.json").read_text())
    assert [row["method"] for row in tables["main"]] == [
        "Loss",
        "Zlib",
        "Lowercase",
        "Neighbor",
        "Ref",
        "WBC",
        "PAC",
        "Min-K%",
        "Min-K%++",
        "Gap-K%",
    ]
    main_columns = {"auroc_length32", "auroc_length64", "auroc_all", "tpr@0.05fpr_all"}
    main_columns |= {"auroc_all_lo", "auroc_all_hi", "tpr@0.01fpr_all", "fpr@0.95tpr_all"}
    assert main_columns <= set(tables["main"][0])
    assert tables["forward_passes"] == {
        "single-pass methods": 1,
        "Lowercase": 1,
        f"Ref ({tiny_gpt2_dir})": 1,
        f"Neighbor (causal-lm:{tiny_llama_dir})": 3,  # 1 proposal pass + 2 neighbours
        f"WBC ({tiny_gpt2_dir})": 0,  # reads the main pass and Ref's
        "PAC": 5,
    }
    assert len(tables["k_sweep"]) == 30  # Min-K%, Min-K%++ and Gap-K% at k = 10..100
    assert [row["method"] for row in tables["decomposition"]] == ["log p", "-mu", "/sigma", "both"]
    assert all(0.0 <= row["auroc_all"] <= 1.0 for row in tables["k_sweep"])
    scores = pl.read_parquet(out / "scores.parquet")
    assert scores.height == 2 * 8 and scores["id"].n_unique() == scores.height
    assert scores["group"].to_list() == ["length32"] * 8 + ["length64"] * 8  # N per label
    assert scores["label"].to_list() == [0, 1] * 8  # both labels, in input order
    # Every text is over --max-tokens: scored in full with sliding windows, Ref included.
    assert (scores["status"] == "windowed").all() and (scores["n_tokens"] > 24).all()
    assert (scores["ref_n_tokens"] > 24).all() and scores["ref"].null_count() == 0
    assert scores["neighbor_source"].unique().to_list() == [f"causal-lm:{tiny_llama_dir}"]
    for name in ("main", "k_sweep", "decomposition"):
        assert pl.read_csv(out / f"{name}.csv").height == len(tables[name])


def test_benchmark_rejects_data_without_labels_in_one_line(tiny_llama_dir, tmp_path, capsys):
    path = tmp_path / "unlabelled.parquet"
    pl.DataFrame({"text": ["a b c"]}).write_parquet(path)
    assert main(["benchmark", "--input", str(path), "--model", str(tiny_llama_dir)]) == 2
    assert "missing column(s) ['label']" in capsys.readouterr().err


def test_online_benchmark_reports_chunk_level_tables(tiny_llama_dir, tmp_path) -> None:
    path = tmp_path / "labelled.parquet"
    pl.DataFrame({"text": TRAINING_TEXT, "label": [0, 1] * 3}).write_parquet(path)
    out = tmp_path / "online"
    args = ["benchmark", "--online", "--chunk-tokens", "4", "--input", str(path)]
    assert main([*args, "--model", str(tiny_llama_dir), "--output", str(out)]) == 0
    tables = json.loads((out / "tables.json").read_text())
    assert {"auroc_online", "tpr@0.05fpr_online"} <= set(tables["main"][0])
    chunks = pl.read_parquet(out / "scores.parquet")
    assert {"id", "chunk", "chunk_start", "chunk_end", "label"} <= set(chunks.columns)


def test_group_with_one_class_names_the_group_in_the_error() -> None:
    frame = pl.DataFrame(
        {"label": [0, 1, 1], "group": ["a", "a", "b"], "mean_logprob": [0.1, 0.2, 0.3]}
    )
    with pytest.raises(ValueError, match="group b: .*both members"):
        metric_table(frame, {"Loss": "mean_logprob"})


@pytest.mark.usefixtures("local_ray")
@pytest.mark.slow
def test_benchmark_resumes_from_its_work_dir_and_refuses_one_of_other_data(
    tiny_llama_dir, tmp_path, capsys
):
    path = tmp_path / "set.parquet"
    pl.DataFrame({"text": TRAINING_TEXT, "label": [0, 1] * 3}).write_parquet(path)
    work = tmp_path / "work"
    args = ["benchmark", "--model", str(tiny_llama_dir), "--work-dir", str(work)]
    assert main([*args, "--input", str(path), "--output", str(tmp_path / "one")]) == 0
    parts = {p.name: p.stat().st_mtime_ns for p in (work / "scores").glob("part-*.parquet")}
    assert main([*args, "--input", str(path), "--output", str(tmp_path / "two")]) == 0
    again = {p.name: p.stat().st_mtime_ns for p in (work / "scores").glob("part-*.parquet")}
    assert again == parts  # resumed: nothing scored twice
    first = json.loads((tmp_path / "one" / "tables.json").read_text())["main"]
    assert json.loads((tmp_path / "two" / "tables.json").read_text())["main"] == first
    other = tmp_path / "other.parquet"
    pl.DataFrame({"text": TRAINING_TEXT[:4], "label": [0, 1] * 2}).write_parquet(other)
    capsys.readouterr()
    assert main([*args, "--input", str(other), "--output", str(tmp_path / "three")]) == 2
    assert f"--work-dir {work} holds a benchmark of other data" in capsys.readouterr().err


def _score_file(path, n: int = 40, *, text: bool = True) -> pl.DataFrame:
    """A score Parquet file as `minkscan score` writes one: non-members first, then members
    whose Min-K%++ is higher."""
    label = [0] * (n // 2) + [1] * (n // 2)
    frame = pl.DataFrame({
        "id": [f"d{i}" for i in range(n)], "status": ["ok"] * n, "n_tokens": [9] * n,
        "mean_logprob": [float(i % 7) for i in range(n)],
        "minkpp_k20": [i + 5.0 * lab for i, lab in enumerate(label)], "label": label,
    })  # fmt: skip
    if text:
        frame = frame.with_columns(pl.format("text number {}", pl.col("id")).alias("text"))
    frame.write_parquet(path)
    return frame


def test_benchmark_reads_a_score_file_as_it_is_with_counts_per_label_and_notes(
    tmp_path, capsys
) -> None:
    _score_file(tmp_path / "scored.parquet", text=False)
    out = tmp_path / "tables"
    assert main(["benchmark", "--input", str(tmp_path / "scored.parquet"), "--limit", "12",
                 "--output", str(out)]) == 0  # fmt: skip
    printed = capsys.readouterr()
    # --limit takes N of each label, so both labels stay (the file lists non-members first).
    tables = json.loads((out / "tables.json").read_text())
    (minkpp,) = [row for row in tables["main"] if row["method"] == "Min-K%++"]
    assert minkpp["n_all"] == "12/12" and minkpp["auroc_all"] == 1.0
    assert "group all has 12 members and 12 non-members" in printed.err
    assert "no blind-baseline row: the scores hold no 'text' column" in printed.err
    assert "no blind-baseline row" in (out / "tables.md").read_text()
    assert not any(row["method"].startswith("Blind") for row in tables["main"])


def test_benchmark_joins_labels_to_scores_and_refuses_a_mix_of_scores_and_texts(
    tmp_path, capsys
) -> None:
    frame = _score_file(tmp_path / "scored.parquet")
    unlabelled = tmp_path / "unlabelled.parquet"
    frame.drop("label").write_parquet(unlabelled)
    labels = tmp_path / "labels.parquet"
    frame.select("id", "label").write_parquet(labels)
    out = tmp_path / "tables"
    assert main(["benchmark", "--input", str(unlabelled), "--output", str(out)]) == 2
    assert "has no 'label' column: keep it with `minkscan score --keep-columns label,text`" in (
        capsys.readouterr().err
    )
    args = ["benchmark", "--input", str(unlabelled), "--labels", str(labels)]
    assert main([*args, "--output", str(out)]) == 0
    tables = json.loads((out / "tables.json").read_text())
    assert tables["main"][0]["n_all"] == "20/20"
    texts = tmp_path / "texts.parquet"
    pl.DataFrame({"text": ["a", "b"], "label": [0, 1]}).write_parquet(texts)
    capsys.readouterr()
    mixed = ["benchmark", "--input", str(unlabelled), str(texts), "--output", str(out)]
    assert main(mixed) == 2
    assert f"--input mixes score outputs with labelled texts to score ({texts})" in (
        capsys.readouterr().err
    )
