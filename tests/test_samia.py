"""SaMIA computes what its authors' `sampling.py` and `eval_samia.py` compute: continuations
of the first half of the words, sampled at temperature 1 with top-k 50, each scored by the
ROUGE-1 recall of its suffix against the document's (times its zlib length when asked),
averaged; ROUGE-1 agrees with Google's `rouge-score`; sampling is seeded per document."""

from __future__ import annotations

import random
import zlib
from collections import Counter

import polars as pl
import pytest
import torch
from minkscan.baselines.batch import RunnerBatch
from minkscan.baselines.samia import SaMIA, document_seed, prompt_of, rouge1_recall, suffix_of
from minkscan.config import BaselinesConfig, ScoringConfig
from minkscan.scorer import DocumentScorer
from rouge_score import rouge_scorer
from tiny_models import TRAINING_TEXT


class Words:
    """rouge-score tokenises on single spaces, as the authors' `get_suffix` splits."""

    def tokenize(self, text: str) -> list[str]:
        return [word for word in text.split(" ") if word]


def test_rouge1_recall_agrees_with_rouge_score():
    scorer = rouge_scorer.RougeScorer(["rouge1"], tokenizer=Words())
    rng = random.Random(0)
    vocabulary = ["the", "The", "a", "river", "bank,", "bank", "1", "é"]
    for _ in range(200):
        candidate = [rng.choice(vocabulary) for _ in range(rng.randint(1, 12))]
        reference = [rng.choice(vocabulary) for _ in range(rng.randint(1, 12))]
        expected = scorer.score(" ".join(reference), " ".join(candidate))["rouge1"].recall
        assert rouge1_recall(candidate, reference) == pytest.approx(expected)
    assert rouge1_recall([], ["a"]) == 0.0 and rouge1_recall(["a"], []) == 0.0


def test_the_prompt_is_the_first_half_of_the_words_and_the_suffix_the_rest():
    text = "one two  three four five six seven"
    assert prompt_of(text, 0.5) == "one two three"  # int(7 * 0.5) words
    # The suffix starts after round(words * 0.5) words, as theirs: round(3.5) is 4, so a
    # 7-word text's prompt has 3 words and its suffix skips the fourth.
    assert suffix_of(text, round(7 * 0.5)) == ["five", "six", "seven"]


def authors_score(samples: list[str], text: str, weighted: bool) -> float:
    """`eval_samia.py`'s score of one document from its decoded samples."""

    def get_suffix(t: str, cut: int) -> list[str]:
        return [w for w in t.split(" ") if w != ""][cut:]

    cut = round(len(get_suffix(text, 0)) * 0.5)
    reference = get_suffix(text, cut)
    values = []
    for sample in samples:
        candidate = get_suffix(sample, cut)
        overlap = Counter(candidate) & Counter(reference)
        recall = sum(overlap.values()) / len(reference) if candidate and reference else 0
        weight = len(zlib.compress(" ".join(candidate).encode("utf-8"))) if weighted else 1
        values.append(recall * weight)
    return sum(values) / len(values)


@pytest.mark.parametrize("weighted", [False, True])
def test_samia_scores_the_authors_samples_as_the_authors_do(tiny_model, weighted):
    """On a tokenizer without BOS (gpt2) and with one (llama, gemma3)."""
    settings = BaselinesConfig(samia=True, samia_samples=3, samia_max_length=40,
                               samia_zlib=weighted, samia_seed=1)  # fmt: skip
    scorer = DocumentScorer(tiny_model, ScoringConfig())
    texts = [TRAINING_TEXT[0], TRAINING_TEXT[2], ""]  # the second's prompt is cut
    documents = scorer.encode(texts)
    frame = SaMIA(settings)(scorer, RunnerBatch(documents, pl.Series([0.0] * 3)))
    tokenizer = tiny_model.tokenizer
    rows = zip(texts[:2], frame["samia"][:2], frame["samia_generated_tokens"][:2], strict=True)
    for text, got, produced in rows:
        # Their sampling: generate(do_sample, temperature 1, top_k 50, top_p 1, max_length).
        words = tokenizer(prompt_of(text, 0.5), truncation=True, max_length=39)["input_ids"]
        prompt = torch.tensor([words])
        torch.manual_seed(document_seed(1, text))
        out = tiny_model.model.generate(
            prompt, attention_mask=torch.ones_like(prompt), do_sample=True, temperature=1.0,
            top_k=50, top_p=1.0, max_length=40, num_return_sequences=3,
            pad_token_id=tokenizer.pad_token_id or tokenizer.eos_token_id,
        )  # fmt: skip
        samples = tokenizer.batch_decode(out, skip_special_tokens=True)
        assert got == pytest.approx(authors_score(samples, text, weighted))
        assert 0 < produced <= 3 * (40 - prompt.shape[1])
    assert frame["samia"][2] is None and frame["samia_generated_tokens"][2] is None


def test_a_documents_samples_do_not_depend_on_its_batch(tiny_llama):
    settings = BaselinesConfig(samia=True, samia_samples=2, samia_max_length=30)
    scorer = DocumentScorer(tiny_llama, ScoringConfig())
    runner = SaMIA(settings)

    def samia(texts: list[str]) -> list[float | None]:
        batch = RunnerBatch(scorer.encode(texts), pl.Series([0.0] * len(texts)))
        return runner(scorer, batch)["samia"].to_list()

    assert samia([TRAINING_TEXT[0], TRAINING_TEXT[1]])[1] == samia([TRAINING_TEXT[1]])[0]
