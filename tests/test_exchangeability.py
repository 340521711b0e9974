"""The exchangeability check the order test rests on: a file sorted by topic, by length or by
a numeric column fires it, the same examples in a random order do not, its p-values are
permutation p-values, and what it means depends on the direction it protects: a preference
found on a sorted file is withheld, a null result stands."""

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
    assert "not random (neighbours are more alike than random pairs)" in check.sentence()
    assert "the preference found is withheld" in check.sentence(significant=True)
    assert "the null result stands" in check.sentence(significant=False)


def test_the_same_examples_in_a_random_order_pass():
    examples = _examples(0)
    random.Random(5).shuffle(examples)
    check = exchangeability_check([text for _, text in examples], resamples=199)
    assert check.exchangeable and "looks random" in check.sentence()


def _bounds(n: int, shards: int) -> list[tuple[int, int]]:
    from minkscan.evaluation.order_shards import shard_bounds

    return shard_bounds(n, shards)


def test_a_file_sorted_by_length_fires_the_check_within_shards_where_word_overlap_does_not():
    """GSM8K-like: answers sorted by length pass the lexical check but not the length one."""
    examples = _examples(3)
    random.Random(5).shuffle(examples)
    texts = sorted((text + " and" * random.Random(i).randrange(30) for i, (_, text) in
                    enumerate(examples)), key=len)  # fmt: skip
    check = exchangeability_check(texts, resamples=199, bounds=_bounds(60, 10))
    assert check.lexically_random and not check.exchangeable
    (length,) = check.sorted_by
    assert length.name == "length" and length.correlation > 0.9 and length.p_value < 0.01
    assert "it follows length" in check.sentence()


def test_a_file_sorted_by_a_numeric_column_fires_the_check_and_a_random_order_does_not():
    examples = _examples(4)
    random.Random(6).shuffle(examples)
    texts = [text for _, text in examples]
    draws = random.Random(7)
    difficulty = sorted(draws.random() for _ in texts)
    check = exchangeability_check(texts, resamples=199, bounds=_bounds(60, 10),
                                  numeric={"difficulty": difficulty})  # fmt: skip
    assert [f.name for f in check.sorted_by] == ["difficulty"]
    shuffled = random.Random(8).sample(difficulty, len(difficulty))
    calm = exchangeability_check(texts, resamples=199, bounds=_bounds(60, 10),
                                 numeric={"difficulty": shuffled})  # fmt: skip
    assert calm.exchangeable and {f.name for f in calm.features} == {"length", "difficulty"}
    assert all(f.p_value > 0.01 for f in calm.features)
