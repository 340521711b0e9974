"""ReCaLL and Con-ReCall: a document's likelihood after a prefix of known texts, the prefix
encoded once and its KV cache reused, equal to the naive float64 concatenation of prefix and
document; both scores run as pipeline stages whose prefixes the run records."""

from __future__ import annotations

import json

import polars as pl
import pytest
import torch
from helpers import score, scores
from minkscan.baselines.recall import PREFIX_JOIN, PrefixCache
from minkscan.config import ModelConfig, ScoringConfig
from minkscan.models.loading import load_model
from minkscan.scorer import DocumentScorer
from tiny_models import TRAINING_TEXT

PREFIX = ["The harbour froze in the winter of 2024.", "A new bridge opened last spring."]
DOCUMENTS = [TRAINING_TEXT[0], TRAINING_TEXT[1][:40], "", TRAINING_TEXT[2], "Hi."]


def naive_log_likelihood(model64, prefix: list[int], document: list[int], n_scored: int) -> float:
    """Mean log p of the document's last ``n_scored`` tokens after prefix + document, the
    whole sequence run at once in float64."""
    sequence = torch.tensor([prefix + document])
    logprob = model64(input_ids=sequence).logits[0].double().log_softmax(-1)
    end = sequence.shape[1]
    targets = sequence[0, end - n_scored :]
    return logprob[end - n_scored - 1 : end - 1].gather(1, targets[:, None]).mean().item()


@pytest.mark.parametrize("prepend_bos", [True, False])
def test_a_cached_prefix_gives_the_naive_concatenations_likelihood(tiny_llama, prepend_bos):
    scorer = DocumentScorer(tiny_llama, ScoringConfig(prepend_bos=prepend_bos, batch_tokens=96))
    documents = scorer.encode(DOCUMENTS)
    got = PrefixCache(scorer, PREFIX).log_likelihoods(documents)

    tokenizer = tiny_llama.tokenizer
    bos = [tokenizer.bos_token_id] if prepend_bos else []
    prefix = bos + tokenizer(PREFIX_JOIN.join(PREFIX), add_special_tokens=False)["input_ids"]
    model64 = tiny_llama.model.to(torch.float64)
    try:
        for document, value in zip(documents, got, strict=True):
            if document.n_scored == 0:
                assert value is None
                continue
            ids = list(document.input_ids)
            own = ids[1:] if prepend_bos else ids  # the prefix brings the BOS
            expected = naive_log_likelihood(model64, prefix, own, document.n_scored)
            assert value == pytest.approx(expected, abs=1e-4)
    finally:
        tiny_llama.model.to(torch.float32)


def test_recall_and_conrecall_are_stages_whose_prefixes_the_run_records(
    tiny_llama_dir, tmp_path, local_ray
):
    pl.DataFrame({"id": [f"d{i}" for i in range(len(DOCUMENTS))], "text": DOCUMENTS}).write_parquet(
        tmp_path / "in.parquet"
    )
    (tmp_path / "nonmembers.txt").write_text("\n\n".join([*PREFIX, "unused third text"]))
    (tmp_path / "members.txt").write_text(TRAINING_TEXT[3])
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
    expected = [c / loss for c, loss in zip(conditional, scored["loss"], strict=True)]
    assert scored["recall"].to_list() == pytest.approx(expected, rel=1e-4)
    record = json.loads((tmp_path / "out" / "_manifest.json").read_text())
    assert PREFIX[0] in json.dumps(record) and "unused third text" not in json.dumps(record)
