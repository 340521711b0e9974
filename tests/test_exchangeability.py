"""The exchangeability check the order test rests on: a file sorted by topic fires it, the
same examples in a random order do not, and its p-value is the permutation p-value."""

from __future__ import annotations

import random

from minkscan.evaluation.exchangeability import EXCHANGEABILITY_ALPHA, exchangeability_check

TOPICS = {
    "football": "the striker scored a goal as the team won the league match in the stadium",
    "chemistry": "the reaction of the acid with the metal released hydrogen gas in the lab",
    "elections": "voters elected the new mayor as the party won most seats in the council",
    "astronomy": "the telescope observed a distant galaxy and the orbit of a bright comet",
}


def _examples(seed: int) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    examples = []
    for topic, sentence in TOPICS.items():
        words = sentence.split()
        for _ in range(15):
            examples.append((topic, " ".join(rng.sample(words, 8))))
    return examples


def test_a_file_sorted_by_topic_is_not_exchangeable_and_the_sentence_says_why():
    check = exchangeability_check([text for _, text in _examples(0)], resamples=199)
    assert check.p_value < EXCHANGEABILITY_ALPHA and not check.exchangeable
    assert check.neighbour_similarity > check.random_similarity
    assert check.p_value == 1 / 200  # no random order was as alike
    assert "cannot be trusted on this file" in check.sentence()


def test_the_same_examples_in_a_random_order_pass():
    examples = _examples(0)
    random.Random(5).shuffle(examples)
    check = exchangeability_check([text for _, text in examples], resamples=199)
    assert check.exchangeable and "looks random" in check.sentence()
