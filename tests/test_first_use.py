"""A bundled model's first use says it will take a while (it is assembled and dequantised
once); later uses, with the copy cached, say nothing."""

from __future__ import annotations

from minkscan.models.names import bundled_cache, first_use_note


def test_the_first_use_of_a_bundled_model_is_announced_and_later_ones_are_not(tmp_path):
    note = first_use_note("gemma3-270m", tmp_path)
    assert note == (
        f"first use of the bundled model 'gemma3-270m': converting it once into "
        f"{tmp_path / 'models' / 'gemma3-270m'} (a minute or two; later runs load it in seconds)"
    )
    bundled_cache("gemma3-270m", tmp_path).mkdir(parents=True)
    (bundled_cache("gemma3-270m", tmp_path) / "config.json").write_text("{}")
    assert first_use_note("gemma3-270m", tmp_path) is None


def test_models_that_are_not_bundled_get_no_note(tmp_path):
    assert first_use_note(str(tmp_path / "a-local-model"), tmp_path) is None


def test_score_texts_says_so_too_before_it_converts(tmp_path, monkeypatch, caplog):
    import minkscan.scorer as scorer
    import pytest

    class Loaded(Exception):
        """Where the model would load (and convert): the note came before it or not at all."""

    def load_model(config):
        raise Loaded

    monkeypatch.setattr(scorer, "load_model", load_model)
    scorer.release_scorers()
    with pytest.raises(Loaded):
        scorer.score_texts(["a text"], model="smollm2-135m", cache_dir=tmp_path)
    (record,) = [r for r in caplog.records if r.name == "minkscan.scorer"]
    assert record.levelname == "WARNING"  # a library's caller sees warnings only
    assert record.getMessage() == first_use_note("smollm2-135m", tmp_path)
