"""The chunked reduction: exact moments, numerically stable, and memory-bounded."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from minkscan.config import ScoringConfig
from minkscan.methods import single_pass_methods
from minkscan.models.forward import Tiles, TokenBatch, batch_token_stats, find_linear_head
from minkscan.models.loading import LoadedModel
from minkscan.scoring.aggregate import Documents, document_scores, lowest_k_means
from minkscan.scoring.token_stats import (
    TokenStats,
    token_stats_from_hidden,
    token_stats_from_logits,
)
from torch.utils._python_dispatch import TorchDispatchMode


def float64_stats(logits: torch.Tensor, targets: torch.Tensor) -> TokenStats:
    log_probs = torch.log_softmax(logits.to(torch.float64), dim=-1)
    probs = log_probs.exp()
    mean = (probs * log_probs).sum(-1)
    std = (probs * (log_probs - mean[:, None]) ** 2).sum(-1).sqrt()
    top1 = log_probs.max(-1).values
    return TokenStats(log_probs.gather(1, targets[:, None]).squeeze(1), mean, std, top1)


def assert_stats_close(actual: TokenStats, expected: TokenStats, tolerance: float) -> None:
    for name in ("target_logprob", "mean_logprob", "std_logprob", "top1_logprob"):
        got = getattr(actual, name).to(torch.float64)
        want = getattr(expected, name)
        assert torch.allclose(got, want, atol=tolerance, rtol=0), name
    assert torch.allclose(actual.minkpp().double(), expected.minkpp(), atol=tolerance, rtol=0)


@pytest.mark.parametrize("vocab_chunk", [128, 1000, 5000])
def test_tiled_moments_equal_the_full_softmax_whatever_the_tile_size(vocab_chunk: int) -> None:
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(37, 4999, generator=generator) * 4
    targets = torch.randint(0, 4999, (37,), generator=generator)
    stats = token_stats_from_logits(logits, targets, row_chunk=8, vocab_chunk=vocab_chunk)
    assert_stats_close(stats, float64_stats(logits, targets), 1e-5)


def test_large_logit_offsets_do_not_cancel_the_variance() -> None:
    # Logits around 3e4 with spread ~1: E[x^2] - E[x]^2 in float32 would be pure noise.
    generator = torch.Generator().manual_seed(1)
    logits = 3e4 + torch.randn(16, 3000, generator=generator)
    targets = torch.randint(0, 3000, (16,), generator=generator)
    stats = token_stats_from_logits(logits, targets, vocab_chunk=256)
    assert_stats_close(stats, float64_stats(logits, targets), 1e-3)


def test_peaked_distributions_keep_a_tiny_but_exact_sigma() -> None:
    logits = torch.zeros(4, 1000)
    logits[:, 7] = 40.0  # p(7) ~ 1 - 1e-14
    targets = torch.tensor([7, 7, 3, 3])
    stats = token_stats_from_logits(logits, targets, vocab_chunk=128)
    expected = float64_stats(logits, targets)
    assert torch.isfinite(stats.minkpp()).all()
    assert torch.allclose(stats.target_logprob.double(), expected.target_logprob, atol=1e-4)


def test_uniform_distribution_has_sigma_zero_and_a_zero_minkpp_score() -> None:
    logits = torch.full((3, 500), 2.5)
    stats = token_stats_from_logits(logits, torch.tensor([0, 1, 499]), vocab_chunk=128)
    assert torch.equal(stats.std_logprob, torch.zeros(3))
    assert torch.equal(stats.minkpp(), torch.zeros(3))
    assert torch.allclose(stats.target_logprob, torch.full((3,), -torch.log(torch.tensor(500.0))))


def test_bfloat16_hidden_states_reduce_in_float32() -> None:
    generator = torch.Generator().manual_seed(2)
    hidden = torch.randn(20, 64, generator=generator).to(torch.bfloat16)
    weight = (torch.randn(3001, 64, generator=generator) / 4).to(torch.bfloat16)
    targets = torch.randint(0, 3001, (20,), generator=generator)
    stats = token_stats_from_hidden(hidden, weight, targets, vocab_chunk=512)
    assert stats.target_logprob.dtype == torch.float32
    reference_logits = hidden.to(torch.float64) @ weight.to(torch.float64).T
    assert_stats_close(stats, float64_stats(reference_logits, targets), 5e-2)


def test_softcapped_head_matches_capping_the_full_logits() -> None:
    generator = torch.Generator().manual_seed(3)
    hidden = torch.randn(10, 16, generator=generator)
    weight = torch.randn(700, 16, generator=generator)
    targets = torch.randint(0, 700, (10,), generator=generator)
    stats = token_stats_from_hidden(hidden, weight, targets, softcap=5.0, vocab_chunk=128)
    capped = 5.0 * torch.tanh((hidden.double() @ weight.double().T) / 5.0)
    assert_stats_close(stats, float64_stats(capped, targets), 1e-5)


class LargestFloat32Tensor(TorchDispatchMode):
    """Records the element count of the largest float32 tensor any op produces."""

    def __init__(self) -> None:
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        out = func(*args, **(kwargs or {}))
        for tensor in out if isinstance(out, (tuple, list)) else [out]:
            if isinstance(tensor, torch.Tensor) and tensor.dtype == torch.float32:
                self.largest = max(self.largest, tensor.numel())
        return out


def test_fused_path_never_builds_a_batch_by_tokens_by_vocab_float32_tensor(
    tiny_llama: LoadedModel,
) -> None:
    ids = [(tuple(range(3, 3 + n)), 0) for n in (40, 33, 25, 12)]
    batch = TokenBatch.padded(ids, 0, "right", torch.device("cpu"))
    tiles = Tiles(row_chunk=16, vocab_chunk=128)
    vocab = tiny_llama.model.get_output_embeddings().weight.shape[0]
    full_size = len(ids) * 40 * vocab
    with LargestFloat32Tensor() as fused_probe:
        batch_token_stats(
            tiny_llama.model,
            batch,
            head=find_linear_head(tiny_llama.model),
            tiles=tiles,
        )
    with LargestFloat32Tensor() as logits_probe:
        batch_token_stats(tiny_llama.model, batch, head=None, tiles=tiles)
    assert logits_probe.largest >= full_size  # the probe does see the full logits when they exist
    one_document_of_logits = 40 * vocab
    assert fused_probe.largest < one_document_of_logits < full_size


def test_k_is_the_floor_of_p_percent_of_scored_tokens_and_at_least_one() -> None:
    values = torch.tensor([[5.0, 1.0, 4.0, 2.0, 3.0, 0.0, 0.0]], dtype=torch.float64)
    means = lowest_k_means(values, torch.tensor([5]), [10, 20, 40, 50, 59, 60, 100])
    # n=5: k = 1, 1, 2, 2, 2, 3, 5
    expected = [1.0, 1.0, 1.5, 1.5, 1.5, 2.0, 3.0]
    assert means[0].tolist() == pytest.approx(expected)


def test_documents_without_scored_tokens_get_nan_not_a_number_from_padding() -> None:
    means = lowest_k_means(torch.zeros(2, 3, dtype=torch.float64), torch.tensor([0, 3]), [50])
    assert torch.isnan(means[0, 0]) and means[1, 0] == 0.0


def test_every_score_is_oriented_higher_for_more_likely_text() -> None:
    # Document 0 has uniformly higher log-probs and z-scores than document 1.
    likely = torch.tensor([-0.5, -0.2, -0.4])
    unlikely = torch.tensor([-6.0, -4.0, -5.0])
    stats = TokenStats(
        target_logprob=torch.cat([likely, unlikely]),
        mean_logprob=torch.full((6,), -3.0),
        std_logprob=torch.full((6,), 2.0),
        top1_logprob=torch.full((6,), -0.1),
    )
    scoring = ScoringConfig(k_percentages=[20, 100], ablation_k_percentages=[20])
    documents = Documents(stats, np.array([3, 3]), ["same text", "same text"])
    scores = document_scores(documents, single_pass_methods(scoring), scoring)
    assert list(scores) == ["mean_logprob", "zlib", "mink_k20", "mink_k100", "minkpp_k20",
                            "minkpp_k100", "gapk_k20", "gapk_k100", "minkpp_mu_k20",
                            "minkpp_sigma_k20"]  # fmt: skip
    for name, values in scores.items():
        assert values[0] > values[1], name


@pytest.mark.slow
def test_compiled_reduction_gives_the_eager_numbers() -> None:
    generator = torch.Generator().manual_seed(4)
    logits = torch.randn(50, 3000, generator=generator) * 3
    targets = torch.randint(0, 3000, (50,), generator=generator)
    eager = token_stats_from_logits(logits, targets, row_chunk=32, vocab_chunk=1024)
    compiled = token_stats_from_logits(
        logits, targets, row_chunk=32, vocab_chunk=1024, compiled=True
    )
    assert_stats_close(compiled, float64_stats(logits, targets), 1e-5)
    assert torch.allclose(compiled.minkpp(), eager.minkpp(), atol=1e-5, rtol=0)
