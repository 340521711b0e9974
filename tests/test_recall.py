"""ReCaLL and Con-ReCall compute what their authors' code computes (ruoyuxie/recall and
WangCheng0116/CON-RECALL `run.py`): the shots concatenated with no separator, prefix and
document each tokenised with the tokenizer's special tokens and concatenated, every document
id scored after the prefix. The prefix is encoded once and its KV cache reused, equal to the
authors' definition reimplemented here in float64; both scores run as pipeline stages whose
prefixes the run records; shots are chosen as the authors choose them."""

from __future__ import annotations

import json

import polars as pl
import pytest
import torch
from helpers import score, scores
from minkscan.baselines.batch import RunnerBatch
from minkscan.baselines.recall import ConReCaLL, PrefixCache, ReCaLL
from minkscan.commands.prefixes import choose_shots
from minkscan.config import BaselinesConfig, ModelConfig, ScoringConfig
from minkscan.models.loading import load_model
from minkscan.scorer import DocumentScorer
from scipy.stats import rankdata
from tiny_models import TRAINING_TEXT

PREFIX = ["The harbour froze in the winter of 2024.", "A new bridge opened last spring."]
MEMBER_PREFIX = [TRAINING_TEXT[3]]
DOCUMENTS = [TRAINING_TEXT[0], TRAINING_TEXT[1][:40], "", TRAINING_TEXT[2], "Hi there."]
# The cached float32 pass against the float64 definition: likelihood ratios agree to this.
TOLERANCE = 1e-4


def authors_log_likelihood(model64, tokenizer, text: str, prefix: str | None = None) -> float:
    """The authors' `get_ll` (prefix None) and `get_conditional_ll`, in float64: the mean
    log p over the labelled positions of ``tokenizer(prefix) + tokenizer(text)`` with the
    prefix's labels masked (-100), as Hugging Face's shifted loss computes it."""
    target = tokenizer(text)["input_ids"]
    context = [] if prefix is None else tokenizer(prefix)["input_ids"]
    sequence = torch.tensor([context + target])
    labels = sequence.clone()
    labels[0, : len(context)] = -100
    log_probs = model64(input_ids=sequence).logits[0, :-1].double().log_softmax(-1)
    shifted = labels[0, 1:]
    kept = shifted != -100
    return log_probs[kept].gather(1, shifted[kept][:, None]).mean().item()


def authors_scores(loaded, texts: list[str], separator: str = "") -> dict[str, list[float]]:
    """recall = ll_nonmember / ll, con-recall = (ll_nonmember - 0.5 ll_member) / ll, with
    the shots joined as `"".join(prefix)` (or by ``separator``)."""
    model64 = loaded.model.to(torch.float64)
    try:
        tokenizer = loaded.tokenizer
        out: dict[str, list[float]] = {"recall": [], "conrecall": []}
        for text in texts:
            ll = authors_log_likelihood(model64, tokenizer, text)
            nonmember = authors_log_likelihood(model64, tokenizer, text, separator.join(PREFIX))
            member = authors_log_likelihood(model64, tokenizer, text, separator.join(MEMBER_PREFIX))
            out["recall"].append(nonmember / ll)
            out["conrecall"].append((nonmember - 0.5 * member) / ll)
        return out
    finally:
        loaded.model.to(torch.float32)


def cached_scores(loaded, texts: list[str], **baselines) -> dict[str, list[float]]:
    """The two runners' columns, as a scoring actor computes them."""
    scorer = DocumentScorer(loaded, ScoringConfig(batch_tokens=96))
    config = BaselinesConfig(recall_prefix=PREFIX, conrecall_member_prefix=MEMBER_PREFIX,
                             **baselines)  # fmt: skip
    documents = scorer.encode(texts)
    base_loss = pl.Series(scorer.score_documents(documents)["mean_logprob"], dtype=pl.Float64)
    batch = RunnerBatch(documents, base_loss)
    return {
        "recall": ReCaLL(config)(scorer, batch)["recall"].to_list(),
        "conrecall": ConReCaLL(config)(scorer, batch)["conrecall"].to_list(),
    }


def test_recall_and_conrecall_are_the_authors_definition_with_and_without_bos(tiny_model):
    """gpt2: a tokenizer without BOS (P x); llama and gemma3 add one ([BOS] P [BOS] x)."""
    texts = [DOCUMENTS[i] for i in (0, 1, 3, 4)]
    got = cached_scores(tiny_model, texts)
    expected = authors_scores(tiny_model, texts)
    for column in ("recall", "conrecall"):
        assert got[column] == pytest.approx(expected[column], abs=TOLERANCE)
        assert list(rankdata(got[column])) == list(rankdata(expected[column]))


@pytest.mark.slow
def test_recall_on_smollm2_is_the_authors_definition(smollm2):
    texts = [TRAINING_TEXT[0], TRAINING_TEXT[2], "The river rose over its banks in May."]
    got = cached_scores(smollm2, texts)
    expected = authors_scores(smollm2, texts)
    assert got["recall"] == pytest.approx(expected["recall"], abs=TOLERANCE)
    assert list(rankdata(got["recall"])) == list(rankdata(expected["recall"]))


def test_a_separator_between_shots_is_an_option(tiny_llama):
    texts = [DOCUMENTS[0], DOCUMENTS[3]]
    got = cached_scores(tiny_llama, texts, recall_separator="\n\n")
    assert got["recall"] == pytest.approx(
        authors_scores(tiny_llama, texts, separator="\n\n")["recall"], abs=TOLERANCE
    )
    assert got["recall"] != pytest.approx(cached_scores(tiny_llama, texts)["recall"], abs=1e-6)


def test_documents_without_an_unconditional_likelihood_get_none(tiny_llama):
    scorer = DocumentScorer(tiny_llama, ScoringConfig())
    documents = scorer.encode(["", "x", TRAINING_TEXT[0]])
    values = PrefixCache(scorer, PREFIX).log_likelihoods(documents)
    assert values[0] is None and values[2] is not None
    assert (values[1] is None) == (documents[1].n_scored == 0)


def test_shots_are_chosen_as_the_authors_choose_them():
    texts = [f"text {i}" for i in range(30)]
    # More than the shot count: a shuffle seeded like the authors' random.seed(42).
    chosen = choose_shots(texts, 12, 42)
    import random

    random.seed(42)
    shuffled = list(texts)
    random.shuffle(shuffled)
    assert chosen == shuffled[:12]
    assert choose_shots(texts, 12, 7) != chosen
    # Exactly the shot count (or fewer): used whole, in the file's order.
    assert choose_shots(texts[:12], 12, 42) == texts[:12]
    assert choose_shots(texts[:5], 12, 42) == texts[:5]


def test_recall_and_conrecall_are_stages_whose_prefixes_the_run_records(
    tiny_llama_dir, tmp_path, local_ray
):
    pl.DataFrame({"id": [f"d{i}" for i in range(len(DOCUMENTS))], "text": DOCUMENTS}).write_parquet(
        tmp_path / "in.parquet"
    )
    (tmp_path / "nonmembers.txt").write_text("\n\n".join(PREFIX))
    members = [*MEMBER_PREFIX, "A second member.", "A third member."]
    (tmp_path / "members.txt").write_text("\n\n".join(members))
    code = score(tiny_llama_dir, tmp_path / "in.parquet", tmp_path / "out",
                 "--recall-prefix-from", str(tmp_path / "nonmembers.txt"), "--recall-shots", "2",
                 "--conrecall-from", str(tmp_path / "members.txt"))  # fmt: skip
    assert code == 0
    frame = scores(tmp_path / "out")
    scored = frame.filter(pl.col("n_tokens") > 0)
    assert scored["recall"].null_count() == 0 and scored["conrecall"].null_count() == 0
    assert frame.filter(pl.col("n_tokens") == 0)["recall"].to_list() == [None]
    # recall = LL(x | P) / LL(x): the stage's value is the in-process one.
    scorer = DocumentScorer(
        load_model(ModelConfig(name=str(tiny_llama_dir), device="cpu")), ScoringConfig()
    )
    texts = [DOCUMENTS[int(i[1:])] for i in scored["id"]]
    conditional = PrefixCache(scorer, PREFIX).log_likelihoods(scorer.encode(texts))
    expected = [c / loss for c, loss in zip(conditional, scored["mean_logprob"], strict=True)]
    assert scored["recall"].to_list() == pytest.approx(expected, rel=1e-4)
    record = json.loads((tmp_path / "out" / "_manifest.json").read_text())
    # Two non-members for two shots: used whole, in order; three members: a seeded choice.
    assert record["config"]["baselines"]["recall_prefix"] == PREFIX
    chosen = choose_shots(members, 2, 42)
    assert record["config"]["baselines"]["conrecall_member_prefix"] == chosen
    (left_out,) = set(members) - set(chosen)
    assert left_out not in json.dumps(record)
