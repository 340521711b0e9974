"""A real pretrained model end to end: bundled SmolLM2-135M on real WikiMIA-24 text."""

from __future__ import annotations

import math

import polars as pl
import pytest
from helpers import SAMPLE, WIKIMIA32
from minkscan import score_texts
from minkscan.config import ModelConfig
from minkscan.models.loading import LoadedModel, load_model
from minkscan.models.names import default_cache_dir
from naive_reference import naive_document_scores


@pytest.fixture(scope="module")
def first_64_rows() -> list[str]:
    """The first 64 rows of WikiMIA-24 length32 (the shipped sample holds the same rows)."""
    source = WIKIMIA32 if WIKIMIA32.exists() else SAMPLE
    return pl.read_parquet(source).head(64)["text"].to_list()


@pytest.mark.skipif(not WIKIMIA32.exists(), reason="shared WikiMIA-24 data not on this machine")
def test_shipped_sample_is_the_first_64_rows_of_wikimia24_length32() -> None:
    assert pl.read_parquet(SAMPLE).equals(pl.read_parquet(WIKIMIA32).head(64))  # labels too


@pytest.fixture(scope="module")
def smollm2_scores(smollm2: LoadedModel, first_64_rows: list[str]) -> pl.DataFrame:
    return score_texts(
        first_64_rows, model=smollm2, k_percentages=[10, 20, 50, 100], ablation_k_percentages=[20]
    )


@pytest.mark.slow
def test_bundled_model_is_cached_as_safetensors_after_first_load(
    smollm2: LoadedModel, temporary_model_cache
) -> None:
    # The suite's own cache, not the user's (`temporary_model_cache`).
    assert default_cache_dir() == temporary_model_cache
    cached = default_cache_dir() / "models" / "smollm2-135m"
    assert any(cached.glob("*.safetensors"))
    assert smollm2.model.get_output_embeddings().weight.shape[0] == 49152


@pytest.mark.slow
def test_every_one_of_the_first_64_wikimia_rows_gets_finite_scores(
    smollm2_scores: pl.DataFrame,
) -> None:
    assert smollm2_scores.height == 64
    assert smollm2_scores["status"].unique().to_list() == ["ok"]
    assert (smollm2_scores["n_tokens"] > 20).all()
    for column in smollm2_scores.columns[2:]:
        assert all(math.isfinite(v) for v in smollm2_scores[column]), column


@pytest.mark.slow
def test_real_model_scores_match_the_float64_reference(
    smollm2: LoadedModel, first_64_rows: list[str], smollm2_scores: pl.DataFrame
) -> None:
    for row in range(4):
        text = first_64_rows[row]
        ids = smollm2.tokenizer(text)["input_ids"]
        expected = naive_document_scores(smollm2, text, ids, [20])
        actual = smollm2_scores.row(row, named=True)
        for column in (
            "mean_logprob",
            "zlib",
            "mink_k20",
            "minkpp_k20",
            "minkpp_mu_k20",
            "minkpp_sigma_k20",
        ):
            assert actual[column] == pytest.approx(expected[column], abs=1e-4, rel=0), column


@pytest.mark.slow
def test_lowest_k_means_grow_with_k_on_real_scores(smollm2_scores: pl.DataFrame) -> None:
    for prefix in ("mink", "minkpp"):
        ks = [smollm2_scores[f"{prefix}_k{p}"] for p in (10, 20, 50, 100)]
        for smaller, larger in zip(ks, ks[1:], strict=False):
            assert (smaller <= larger + 1e-9).all(), prefix


@pytest.mark.slow
def test_bfloat16_scores_track_float32_scores(
    first_64_rows: list[str], smollm2_scores: pl.DataFrame
) -> None:
    bf16 = load_model(ModelConfig(name="smollm2-135m", device="cpu", dtype="bfloat16"))
    frame = score_texts(first_64_rows[:16], model=bf16, k_percentages=[20])
    reference = smollm2_scores.head(16)
    correlation = (
        pl.DataFrame({"a": frame["minkpp_k20"], "b": reference["minkpp_k20"]})
        .select(pl.corr("a", "b"))
        .item()
    )
    assert correlation > 0.95
    assert (frame["mean_logprob"] - reference["mean_logprob"]).abs().max() < 0.1
