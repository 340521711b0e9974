"""The fused, batched scorer computes exactly what the paper defines (float64 reference)."""

from __future__ import annotations

import pytest
from minkscan.config import ScoringConfig
from minkscan.models.loading import LoadedModel
from minkscan.scorer import DocumentScorer
from naive_reference import naive_document_scores
from transformers import masking_utils

TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "Min-K%++ normalises each token log-probability.",
    "Ray Data streams Parquet shards through pools of model actors on a cluster, "
    "and every shard is scored by one replica.",
    "Numbers like 12345 and symbols like %, $ and #.",
    "zzz qqq xx",
    "In 2024 several events happened.",
]
PERCENTAGES = [10, 20, 50, 100]
TOLERANCE = 1e-5


def scoring(**overrides: object) -> ScoringConfig:
    options = {
        "k_percentages": PERCENTAGES,
        "ablation_k_percentages": PERCENTAGES,
        "row_chunk": 7,  # several row and vocabulary tiles even on tiny inputs
        "vocab_chunk": 128,  # does not divide the padded vocabularies (~337)
    }
    return ScoringConfig(**(options | overrides))


def assert_matches_reference(loaded: LoadedModel, scorer: DocumentScorer) -> None:
    documents = scorer.encode(TEXTS)
    scores = scorer.score_documents(documents)
    for row, (text, document) in enumerate(zip(TEXTS, documents, strict=True)):
        expected = naive_document_scores(loaded, text, list(document.input_ids), PERCENTAGES)
        assert scores["n_tokens"][row] == len(document.input_ids) - 1
        for column, value in expected.items():
            assert scores[column][row] == pytest.approx(value, abs=TOLERANCE, rel=0), (row, column)


@pytest.mark.parametrize("packing", [True, False], ids=["packed", "padded"])
@pytest.mark.parametrize("head", ["fused", "logits"])
def test_every_score_column_matches_the_float64_reference(
    tiny_model: LoadedModel, head: str, packing: bool
) -> None:
    scorer = DocumentScorer(tiny_model, scoring(head=head, packing=packing))
    assert scorer.packing is packing
    assert_matches_reference(tiny_model, scorer)


def test_packed_rows_hold_several_documents_each(tiny_model: LoadedModel) -> None:
    # The reference test above covers packing only if rows really hold several documents.
    rows: list[int] = []
    hook = tiny_model.model.register_forward_pre_hook(
        lambda _, args, kwargs: rows.append(kwargs["input_ids"].shape[0]), with_kwargs=True
    )
    try:
        DocumentScorer(tiny_model, scoring(batch_tokens=100_000)).score_frame(TEXTS)
    finally:
        hook.remove()
    assert rows[-1] < len(TEXTS)


def test_a_model_whose_attention_ignores_packing_is_scored_padded_with_a_warning(
    tiny_llama: LoadedModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Without packed-sequence support every packed document would attend to the ones before it.
    monkeypatch.setattr(masking_utils, "find_packed_sequence_indices", lambda positions: None)
    with pytest.warns(RuntimeWarning, match="does not keep packed documents apart"):
        scorer = DocumentScorer(tiny_llama, scoring())
    assert not scorer.packing
    assert_matches_reference(tiny_llama, scorer)


def test_model_vocabulary_is_padded_beyond_the_tokenizer(tiny_model: LoadedModel) -> None:
    # The reference test above covers padded vocabularies only if the fixture really has one.
    assert tiny_model.model.get_output_embeddings().weight.shape[0] > len(tiny_model.tokenizer)


def test_auto_head_uses_the_fused_path_for_plain_linear_heads(tiny_model: LoadedModel) -> None:
    assert DocumentScorer(tiny_model, scoring()).head_path == "fused"


def test_a_head_that_rescales_its_logits_is_scored_from_the_models_own_logits(
    tiny_llama: LoadedModel,
) -> None:
    # The fused path reads the head's weight; a model that rescales the head's output (a logit
    # scale) must be caught by the start-up probe, or every score would be silently wrong.
    head = tiny_llama.model.get_output_embeddings()
    hook = head.register_forward_hook(lambda module, inputs, logits: logits * 2.0)
    try:
        with pytest.warns(RuntimeWarning, match="falling back to the model's logits"):
            scorer = DocumentScorer(tiny_llama, scoring())
        assert scorer.head_path == "logits"
        assert_matches_reference(tiny_llama, scorer)
    finally:
        hook.remove()


def test_prepend_bos_scores_the_first_text_token_too(tiny_model: LoadedModel) -> None:
    plain = DocumentScorer(tiny_model, scoring())
    with_bos = DocumentScorer(tiny_model, scoring(prepend_bos=True))
    tokenizer = tiny_model.tokenizer
    text = TEXTS[0]
    n_text_tokens = len(tokenizer(text, add_special_tokens=False)["input_ids"])
    assert with_bos.score_frame([text])["n_tokens"][0] == n_text_tokens
    bos_added_by_default = tokenizer.bos_token_id in tokenizer(text)["input_ids"]
    expected_plain = n_text_tokens if bos_added_by_default else n_text_tokens - 1
    assert plain.score_frame([text])["n_tokens"][0] == expected_plain
    assert_matches_reference(tiny_model, with_bos)


LAYOUTS = {
    "packed": {"packing": True},
    "padded-left": {"packing": False, "padding_side": "left"},
    "padded-right": {"packing": False, "padding_side": "right"},
}


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("batch_tokens", [2, 40, 100_000])
def test_scores_do_not_depend_on_batching_packing_or_padding(
    tiny_model: LoadedModel, layout: str, batch_tokens: int
) -> None:
    alone = [
        DocumentScorer(tiny_model, scoring(packing=False)).score_frame([text]).row(0, named=True)
        for text in TEXTS
    ]
    batched = DocumentScorer(
        tiny_model, scoring(batch_tokens=batch_tokens, **LAYOUTS[layout])
    ).score_frame(TEXTS)
    for row, expected in enumerate(alone):
        actual = batched.row(row, named=True)
        assert actual["status"] == expected["status"]
        for column, value in expected.items():
            if isinstance(value, float):
                assert actual[column] == pytest.approx(value, abs=TOLERANCE, rel=0), column


def test_scores_do_not_depend_on_which_documents_share_the_batch(tiny_llama: LoadedModel) -> None:
    scorer = DocumentScorer(tiny_llama, scoring(batch_tokens=100_000))
    target = TEXTS[1]
    in_company = [
        scorer.score_frame([target, *companions]).row(0, named=True)
        for companions in ([], TEXTS[2:3], [TEXTS[4], TEXTS[0], TEXTS[3]])
    ]
    for other in in_company[1:]:
        for column, value in in_company[0].items():
            if isinstance(value, float):
                assert other[column] == pytest.approx(value, abs=TOLERANCE, rel=0), column
