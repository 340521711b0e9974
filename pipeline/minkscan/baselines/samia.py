"""SaMIA, sampling-based membership inference (Kaneko et al. 2024), as its authors'
`sampling.py` and `eval_samia.py` compute it (nlp-titech/samia):

    prompt    = the first int(words * 0.5) whitespace-separated words of the document
    samples   = n continuations sampled from the target model (temperature 1, top-k 50,
                top-p 1, up to 1,024 tokens of prompt and continuation), n = 10
    samia     = mean over samples of ROUGE-1 recall(sample's suffix, document's suffix)
                [ x zlib length of the sample's suffix, with samia_zlib ]

where a text's suffix is its words (split on single spaces, empty ones dropped) after the
first round(words * 0.5), the sample read as the decoded prompt and continuation. ROUGE-1
recall is the count of shared words (with multiplicity) over the reference suffix's words,
case-sensitive, as their `rouge_n`. A member's continuations repeat its text more: higher
means "more likely a member", as every column.

Deviations: the authors cut the suffix at half the dataset's nominal length (WikiMIA's
32, 64...); minkscan at half of each document's own word count, which is that for such
data and defined for any other. A prompt is cut to max_length - 1 tokens, where theirs
would stop with an error.

Generation runs on the target model's actors, the samples of a document in one batch with
a KV cache (`generate`), sampled from a random stream seeded by ``baselines.samia_seed`` and
the text alone. The companion column counts the tokens generated.
"""

from __future__ import annotations

import zlib
from collections import Counter
from collections.abc import Sequence

import polars as pl
import torch

from minkscan.baselines.batch import RunnerBatch
from minkscan.config import BaselinesConfig
from minkscan.methods import method_named
from minkscan.scorer import DocumentScorer

# The authors' sampling settings.
TEMPERATURE, TOP_K, TOP_P = 1.0, 50, 1.0


def prompt_of(text: str, ratio: float) -> str:
    """The first ``int(words * ratio)`` words of ``text`` (split on whitespace)."""
    words = text.split()
    return " ".join(words[: int(len(words) * ratio)])


def suffix_of(text: str, cut: int) -> list[str]:
    """The words of ``text`` (split on single spaces, empty ones dropped) after ``cut``."""
    return [word for word in text.split(" ") if word != ""][cut:]


def rouge1_recall(candidate: Sequence[str], reference: Sequence[str]) -> float:
    """Words shared by the two (with multiplicity) over the reference's words; 0 if either
    is empty."""
    if not candidate or not reference:
        return 0.0
    return sum((Counter(candidate) & Counter(reference)).values()) / len(reference)


def sample_score(sample: str, reference: Sequence[str], cut: int, weighted: bool) -> float:
    """One sample's recall against the document's suffix, times its suffix's zlib length
    when ``weighted``."""
    suffix = suffix_of(sample, cut)
    recall = rouge1_recall(suffix, reference)
    return recall * len(zlib.compress(" ".join(suffix).encode("utf-8"))) if weighted else recall


def document_seed(seed: int, text: str) -> int:
    """The sampling seed of one document: from the seed and the text alone."""
    return (seed * 2**32 + zlib.crc32(text.encode("utf-8"))) % 2**63


class SaMIA:
    """The `samia` runner: generation on the target model's actors."""

    def __init__(self, baselines: BaselinesConfig) -> None:
        self.baselines = baselines

    @torch.inference_mode()
    def continuations(self, scorer: DocumentScorer, text: str) -> tuple[list[str], int] | None:
        """The document's sampled prompt-plus-continuation texts and the tokens generated
        (None: the prompt is empty)."""
        settings = self.baselines
        tokenizer, model = scorer.loaded.tokenizer, scorer.loaded.model
        prompt = prompt_of(text, settings.samia_prefix_ratio)
        # Cut to leave one token to generate (the authors' generate fails on a prompt of
        # max_length tokens).
        ids = tokenizer(prompt, truncation=True, max_length=settings.samia_max_length - 1)
        if not prompt or not ids["input_ids"]:
            return None
        device = scorer.loaded.device
        inputs = torch.tensor([ids["input_ids"]], device=device)
        pad = next(i for i in (tokenizer.pad_token_id, tokenizer.eos_token_id, 0) if i is not None)
        devices = [device] if device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(document_seed(settings.samia_seed, text))
            out = model.generate(
                inputs, attention_mask=torch.ones_like(inputs), do_sample=True,
                temperature=TEMPERATURE, top_k=TOP_K, top_p=TOP_P,
                max_length=settings.samia_max_length,
                num_return_sequences=settings.samia_samples, pad_token_id=pad,
            )  # fmt: skip
        generated = out[:, inputs.shape[1] :]
        eos = tokenizer.eos_token_id
        produced = 0
        for row in generated.tolist():
            ends = [i for i, token in enumerate(row) if token == eos] if eos is not None else []
            produced += ends[0] + 1 if ends else len(row)
        return tokenizer.batch_decode(out, skip_special_tokens=True), produced

    def __call__(self, scorer: DocumentScorer, batch: RunnerBatch) -> pl.DataFrame:
        settings = self.baselines
        scores: list[float | None] = []
        tokens: list[int | None] = []
        for document in batch.documents:
            sampled = self.continuations(scorer, document.text) if document.n_scored else None
            if sampled is None:
                scores.append(None)
                tokens.append(None)
                continue
            samples, produced = sampled
            words = len(suffix_of(document.text, 0))
            cut = round(words * settings.samia_prefix_ratio)
            reference = suffix_of(document.text, cut)
            values = [sample_score(s, reference, cut, settings.samia_zlib) for s in samples]
            scores.append(sum(values) / len(values))
            tokens.append(produced)
        score, generated = method_named("samia").output_columns
        return pl.DataFrame(
            {score: scores, generated: tokens}, schema={score: pl.Float64, generated: pl.Int64}
        )
