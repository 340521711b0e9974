"""Extra-pass baselines: Ref on the reference tokenizer; Lowercase; Neighbor's perturbations."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
import torch
from minkscan.baselines.extra_pass import (
    MaskedLM,
    document_rng,
    load_masked_lm,
    lowercase_scores,
    make_neighbours,
    masked_lm_neighbour,
    neighbor_scores,
    propose_replacements,
    reference_scores,
)
from minkscan.config import ScoringConfig
from minkscan.scorer import DocumentScorer
from minkscan.text.tokenize import EncodedDocument
from tiny_models import TRAINING_TEXT, build_tiny_model
from transformers import BertConfig, BertForMaskedLM, BertTokenizer


@pytest.fixture(scope="module")
def target(tiny_llama) -> DocumentScorer:
    return DocumentScorer(tiny_llama, ScoringConfig())


def test_ref_is_target_minus_reference_loss_with_the_reference_tokenizer(target) -> None:
    reference_model = build_tiny_model("gpt2", seed=3)  # no BOS: one token fewer per text
    reference = DocumentScorer(reference_model, ScoringConfig())
    base = target.score_frame(TRAINING_TEXT)
    ref = reference_scores(reference, reference.encode(TRAINING_TEXT), base["mean_logprob"])
    own_lengths = [len(reference_model.tokenizer(t)["input_ids"]) - 1 for t in TRAINING_TEXT]
    assert ref["ref_n_tokens"].to_list() == own_lengths
    assert ref["ref_n_tokens"].to_list() != base["n_tokens"].to_list()
    expected = base["mean_logprob"] - reference.score_frame(TRAINING_TEXT)["mean_logprob"]
    assert ref["ref"].to_list() == pytest.approx(expected.to_list())


def test_lowercase_compares_the_text_with_its_lowercased_form(target) -> None:
    texts = ["The Quick Brown Fox.", "already lower case text", None]
    base = target.score_frame(texts)
    lowered = lowercase_scores(target, target.encode(texts), base["mean_logprob"])
    assert lowered["lowercase"][1] == pytest.approx(0.0, abs=1e-6)
    expected = (
        base["mean_logprob"][0] - target.score_frame(["the quick brown fox."])["mean_logprob"][0]
    )
    assert lowered["lowercase"][0] == pytest.approx(expected)
    assert lowered["lowercase"][2] is None and lowered["lowercase_n_tokens"][2] == 0


def test_neighbours_keep_length_and_replace_only_chosen_positions(target) -> None:
    (document,) = target.encode([TRAINING_TEXT[1]])
    proposals = propose_replacements(target, document.input_ids)
    assert len(proposals) == len(document.input_ids)
    assert all(p != o for p, o in zip(proposals[1:], document.input_ids[1:], strict=True))
    assert max(proposals) < len(target.loaded.tokenizer)
    neighbours = make_neighbours(document, proposals, 3, 0.25, np.random.default_rng(0))
    n_replace = round(0.25 * (len(document.input_ids) - 1))
    for ids in neighbours:
        assert len(ids) == len(document.input_ids) and ids[0] == document.input_ids[0]
        changed = [
            i for i, (a, b) in enumerate(zip(ids, document.input_ids, strict=True)) if a != b
        ]
        assert len(changed) == n_replace
        assert all(ids[i] == proposals[i] for i in changed)
    assert len(set(neighbours)) > 1  # positions are drawn afresh per neighbour


def test_neighbor_score_is_loss_minus_mean_neighbour_loss_from_the_target_lm(target) -> None:
    texts = [TRAINING_TEXT[0], "", TRAINING_TEXT[2]]
    base = target.score_frame(texts)
    scores = neighbor_scores(
        target, target.encode(texts), base["mean_logprob"], n_neighbors=2, fraction=0.3, seed=7
    )
    assert scores["neighbor_source"].to_list() == [f"causal-lm:{target.loaded.name}"] * 3
    assert scores["neighbor"][1] is None
    for index in (0, 2):
        (document,) = target.encode([texts[index]])
        proposals = propose_replacements(target, document.input_ids)
        rng = document_rng(7, document.text)
        neighbours = [
            EncodedDocument(document.text, ids, document.status)
            for ids in make_neighbours(document, proposals, 2, 0.3, rng)
        ]
        losses = target.score_documents(neighbours)["mean_logprob"]
        expected = base["mean_logprob"][index] - sum(losses) / 2
        assert scores["neighbor"][index] == pytest.approx(expected, abs=1e-6)


@pytest.fixture(scope="module")
def tiny_masked_lm(tmp_path_factory) -> MaskedLM:
    """A random 1-layer BERT over the words of TRAINING_TEXT, saved and loaded by directory."""
    directory = tmp_path_factory.mktemp("tiny-bert")
    words = sorted({w.strip(".%+-").lower() for text in TRAINING_TEXT for w in text.split()})
    vocabulary = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", *filter(None, words)]
    (directory / "vocab.txt").write_text("\n".join(vocabulary))
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=len(vocabulary),
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
    )
    BertForMaskedLM(config).save_pretrained(directory)
    BertTokenizer(str(directory / "vocab.txt")).save_pretrained(directory)
    return load_masked_lm(str(directory))


def test_masked_lm_neighbours_replace_words_and_are_reported_as_the_source(
    target, tiny_masked_lm
) -> None:
    text = "the quick brown fox jumps over the lazy dog."
    neighbour = masked_lm_neighbour(tiny_masked_lm, text, 0.3, np.random.default_rng(1))
    tokenize = tiny_masked_lm.tokenizer.tokenize
    original_words, new_words = tokenize(text), tokenize(neighbour)
    assert len(new_words) == len(original_words)
    changed = sum(a != b for a, b in zip(original_words, new_words, strict=True))
    assert changed == round(0.3 * len(original_words))
    base = target.score_frame([text])
    scores = neighbor_scores(
        target, target.encode([text]), base["mean_logprob"], n_neighbors=2, fraction=0.3, seed=4,
        masked_lm=tiny_masked_lm,
    )  # fmt: skip
    assert scores["neighbor_source"].to_list() == [f"masked-lm:{tiny_masked_lm.name}"]
    rng = document_rng(4, text)
    neighbour_texts = [masked_lm_neighbour(tiny_masked_lm, text, 0.3, rng) for _ in range(2)]
    expected = base["mean_logprob"][0] - target.score_frame(neighbour_texts)["mean_logprob"].mean()
    assert scores["neighbor"][0] == pytest.approx(expected, abs=1e-6)


def test_neighbor_score_of_a_document_does_not_depend_on_the_rest_of_its_batch(target) -> None:
    alone = neighbor_scores(
        target, target.encode(TRAINING_TEXT[3:4]), pl.Series([-5.0]), n_neighbors=2, seed=1
    )
    texts = TRAINING_TEXT[:4]
    together = neighbor_scores(
        target, target.encode(texts), pl.Series([-5.0] * 4), n_neighbors=2, seed=1
    )
    assert together["neighbor"][3] == pytest.approx(alone["neighbor"][0], abs=1e-6)


def test_windowed_proposals_replace_every_position_of_a_long_document(tiny_llama) -> None:
    windowed = DocumentScorer(tiny_llama, ScoringConfig(max_tokens=16, window_stride=8))
    (document,) = windowed.encode([TRAINING_TEXT[2]])
    assert document.status == "windowed" and len(document.input_ids) > 2 * 16
    proposals = propose_replacements(windowed, document.input_ids)
    full_context = propose_replacements(
        DocumentScorer(tiny_llama, ScoringConfig()), document.input_ids
    )
    assert len(proposals) == len(document.input_ids)
    assert all(p != o for p, o in zip(proposals[1:], document.input_ids[1:], strict=True))
    assert proposals[:16] == full_context[:16]  # the first window sees the same prefix
