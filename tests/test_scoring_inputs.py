"""Bad or unusual input gets a per-row status, never an exception for the whole batch."""

from __future__ import annotations

import pytest
from minkscan import score_texts
from minkscan.config import ConfigError, ScoringConfig, build_config
from minkscan.methods import single_pass_columns
from minkscan.models.loading import LoadedModel
from tiny_models import build_tiny_model


def test_each_bad_row_gets_a_status_and_null_scores_while_good_rows_are_scored(
    tiny_llama: LoadedModel,
) -> None:
    texts = ["A normal sentence about the fox.", "", "   \n\t", None, 42, "The dog."]
    frame = score_texts(texts, model=tiny_llama)
    assert frame.height == len(texts)
    assert frame["status"].to_list() == ["ok", "empty", "empty", "empty", "not_text", "ok"]
    scored = frame["status"] == "ok"
    assert frame.filter(scored)["minkpp_k20"].null_count() == 0
    assert (frame.filter(~scored)["n_tokens"] == 0).all()
    for column in single_pass_columns(ScoringConfig()):
        assert frame.filter(~scored)[column].null_count() == 4, column


def test_a_one_token_text_without_bos_is_too_short_to_score() -> None:
    gpt2_style = build_tiny_model("gpt2")  # adds no BOS: one token, nothing to predict
    frame = score_texts(["A", "AB the fox"], model=gpt2_style)
    assert frame["status"].to_list() == ["too_short", "ok"]
    assert frame["mean_logprob"][0] is None
    with_bos = score_texts(["A"], model=gpt2_style, prepend_bos=True)
    assert with_bos["status"].to_list() == ["ok"] and with_bos["n_tokens"][0] == 1


def test_long_documents_are_truncated_to_max_tokens_and_say_so(tiny_llama: LoadedModel) -> None:
    long_text = "The quick brown fox jumps over the lazy dog. " * 20
    frame = score_texts([long_text, "The quick fox."], model=tiny_llama, max_tokens=16)
    assert frame["status"].to_list() == ["truncated", "ok"]
    assert frame["n_tokens"][0] == 15  # 16 tokens, every one after the first scored
    assert frame["minkpp_k100"][0] is not None


def test_output_has_n_tokens_status_and_every_configured_score_column(
    tiny_llama: LoadedModel,
) -> None:
    frame = score_texts(
        ["The fox."], model=tiny_llama, k_percentages=[5, 25], ablation_k_percentages=[25]
    )
    assert frame.columns == [
        "n_tokens",
        "status",
        "mean_logprob",
        "zlib",
        "mink_k5",
        "mink_k25",
        "minkpp_k5",
        "minkpp_k25",
        "gapk_k5",
        "gapk_k25",
        "minkpp_mu_k25",
        "minkpp_sigma_k25",
    ]


def test_min_k_at_100_percent_is_the_loss(tiny_llama: LoadedModel) -> None:
    frame = score_texts(["The quick brown fox jumps over the lazy dog."], model=tiny_llama)
    assert frame["mink_k100"][0] == pytest.approx(frame["mean_logprob"][0], abs=1e-9)


def test_unknown_scoring_options_are_rejected_by_name(tiny_llama: LoadedModel) -> None:
    with pytest.raises(TypeError, match="k_percentage"):
        score_texts(["x"], model=tiny_llama, k_percentage=[20])


def test_config_rejects_unknown_keys_and_bad_values_naming_the_key() -> None:
    with pytest.raises(ConfigError, match="scoring.k_percentges"):
        build_config({"scoring": {"k_percentges": [20]}})
    with pytest.raises(ConfigError, match="scoring.k_percentages"):
        build_config({"scoring": {"k_percentages": [0, 20]}})
    with pytest.raises(ConfigError, match="model.dtype"):
        build_config(overrides={"model.dtype": "float8"})


def test_config_overrides_use_dotted_keys() -> None:
    config = build_config({"model": {"name": "a"}}, {"model.name": "b", "scoring.max_tokens": 64})
    assert (config.model.name, config.scoring.max_tokens) == ("b", 64)


def test_score_texts_keeps_its_scorer_between_calls_until_released(
    tiny_llama_dir, monkeypatch, capfd
):
    """The second call on a model loads nothing and runs no start-up probe again; at most
    `SCORER_CACHE_SIZE` scorers are kept; `release_scorers` drops them; no library progress
    bar reaches stderr."""
    from minkscan import release_scorers, score_texts
    from minkscan import scorer as scorer_module

    release_scorers()
    loads = []
    real_load = scorer_module.load_model
    monkeypatch.setattr(scorer_module, "load_model", lambda c: loads.append(c) or real_load(c))
    first = score_texts(["A first text here.", ""], model=str(tiny_llama_dir))
    second = score_texts(["A first text here.", ""], model=str(tiny_llama_dir))
    assert len(loads) == 1 and first.equals(second)
    score_texts(["x y z"], model=str(tiny_llama_dir), k_percentages=[20])  # other settings
    score_texts(["x y z"], model=str(tiny_llama_dir), max_tokens=16)
    assert scorer_module._cached_scorer.cache_info().currsize == scorer_module.SCORER_CACHE_SIZE
    release_scorers()
    assert scorer_module._cached_scorer.cache_info().currsize == 0
    assert "Loading weights" not in capfd.readouterr().err
