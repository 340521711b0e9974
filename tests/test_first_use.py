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
