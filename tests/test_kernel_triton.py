"""The Triton fused head + Min-K%++ reduction kernel, on CPU through Triton's interpreter.

tests/conftest.py sets TRITON_INTERPRET=1 before triton is first imported.
"""

import pytest
import torch

pytest.importorskip("triton", reason="triton not installed (pip install -e '.[test]')")

import time  # noqa: E402

import minkscan.models.forward as forward  # noqa: E402
import minkscan.models.probes as probes  # noqa: E402
from conftest import build_tiny_model  # noqa: E402
from minkscan.kernels.fused_head import token_stats_triton  # noqa: E402
from minkscan.models.forward import TokenBatch, batch_token_stats  # noqa: E402
from minkscan.models.probes import choose_head_path  # noqa: E402
from minkscan.scoring.token_stats import TokenStats, token_stats_from_hidden  # noqa: E402

BLOCKS = {"block_n": 16, "block_v": 128, "block_h": 16}


def max_gap(stats: TokenStats, reference: TokenStats) -> float:
    fields = ("target_logprob", "mean_logprob", "std_logprob", "top1_logprob")  # Gap-K% too
    return max(
        (getattr(stats, f).double() - getattr(reference, f).double()).abs().max().item()
        for f in fields
    )


def float64_reference(hidden, weight, targets, bias=None, softcap=None) -> TokenStats:
    return token_stats_from_hidden(
        hidden.double(),
        weight.double(),
        targets,
        bias=None if bias is None else bias.double(),
        softcap=softcap,
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_kernel_matches_float64_reference_with_bias_softcap_and_ragged_vocab(dtype):
    generator = torch.Generator().manual_seed(0)
    vocab = 1000  # not a multiple of block_v; 37 rows is not a multiple of block_n
    hidden = torch.randn(37, 48, generator=generator).to(dtype)
    weight = (0.5 * torch.randn(vocab, 48, generator=generator)).to(dtype)
    bias = torch.randn(vocab, generator=generator).to(dtype)
    targets = torch.randint(0, vocab, (37,), generator=generator)
    targets[:2] = torch.tensor([0, vocab - 1])  # first and last id of the vocabulary
    stats = token_stats_triton(hidden, weight, targets, bias=bias, softcap=30.0, **BLOCKS)
    reference = float64_reference(hidden, weight, targets, bias, softcap=30.0)
    assert max_gap(stats, reference) < 1e-4


def test_kernel_matches_float64_reference_at_gemma3_vocab_of_262144_in_bf16():
    generator = torch.Generator().manual_seed(1)
    vocab = 262144
    hidden = torch.randn(5, 16, generator=generator).bfloat16()
    weight = (0.3 * torch.randn(vocab, 16, generator=generator)).bfloat16()
    targets = torch.randint(0, vocab, (5,), generator=generator)
    stats = token_stats_triton(hidden, weight, targets, block_n=16, block_v=65536, block_h=16)
    assert max_gap(stats, float64_reference(hidden, weight, targets)) < 1e-4


def test_kernel_keeps_precision_under_large_logit_offsets():
    generator = torch.Generator().manual_seed(2)
    hidden = torch.randn(8, 16, generator=generator)
    weight = torch.randn(300, 16, generator=generator)
    bias = torch.full((300,), 1e4)  # every logit shifted by 1e4: stats must not change
    targets = torch.randint(0, 300, (8,), generator=generator)
    shifted = token_stats_triton(hidden, weight, targets, bias=bias, **BLOCKS)
    plain = token_stats_triton(hidden, weight, targets, **BLOCKS)
    assert (shifted.std_logprob - plain.std_logprob).abs().max() < 1e-2
    assert (shifted.minkpp() - plain.minkpp()).abs().max() < 1e-2


def test_kernel_rejects_mismatched_dtypes():
    with pytest.raises(ValueError, match="dtype"):
        token_stats_triton(
            torch.zeros(2, 16), torch.zeros(32, 16).bfloat16(), torch.zeros(2).long()
        )


def probe_batch() -> TokenBatch:
    sequences = [tuple(range(3, 15)), tuple(range(20, 27))]
    return TokenBatch.padded(sequences, pad_id=0, padding_side="right", device=torch.device("cpu"))


CHUNKS = {"row_chunk": 64, "vocab_chunk": 128}


def test_auto_head_on_cpu_uses_the_torch_fused_path_not_triton():
    model = build_tiny_model("llama").model
    head = choose_head_path(model, "auto", probe_batch(), **CHUNKS)
    assert head is not None and head.kernel == "torch"


def test_triton_head_requested_without_cuda_is_a_clear_error():
    model = build_tiny_model("llama").model
    with pytest.raises(ValueError, match="CUDA"):
        choose_head_path(model, "triton", probe_batch(), **CHUNKS)


def slowed(function, seconds: float = 0.2):
    """``function`` taking ``seconds`` longer per call."""

    def slow(*args, **kwargs):
        time.sleep(seconds)
        return function(*args, **kwargs)

    return slow


@pytest.mark.parametrize("kind", ["llama", "gemma3"])
def test_auto_head_picks_triton_when_it_matches_the_logits_path_and_is_faster(kind, monkeypatch):
    monkeypatch.setattr(probes, "triton_usable", lambda device: True)
    monkeypatch.setattr(forward, "token_stats_from_hidden", slowed(token_stats_from_hidden))
    model = build_tiny_model(kind).model
    batch = probe_batch()
    head = choose_head_path(model, "auto", batch, **CHUNKS)
    assert head is not None and head.kernel == "triton"
    with torch.inference_mode():
        kernel = batch_token_stats(model, batch, head=head, **CHUNKS)
        logits = batch_token_stats(model, batch, head=None, **CHUNKS)
    assert max_gap(kernel, logits) < 1e-4


def test_auto_head_keeps_the_torch_fused_path_when_triton_matches_but_is_slower(monkeypatch):
    monkeypatch.setattr(probes, "triton_usable", lambda device: True)
    monkeypatch.setattr(forward, "token_stats_triton", slowed(token_stats_triton))
    model = build_tiny_model("llama").model
    head = choose_head_path(model, "auto", probe_batch(), **CHUNKS)
    assert head is not None and head.kernel == "torch"


def test_auto_head_warns_and_falls_back_to_torch_fused_when_triton_disagrees(monkeypatch):
    def wrong_kernel(hidden, weight, targets, **options):
        stats = token_stats_from_hidden(hidden, weight, targets)
        return TokenStats(
            stats.target_logprob + 1.0, stats.mean_logprob, stats.std_logprob, stats.top1_logprob
        )

    monkeypatch.setattr(probes, "triton_usable", lambda device: True)
    monkeypatch.setattr(forward, "token_stats_triton", wrong_kernel)
    model = build_tiny_model("llama").model
    with pytest.warns(RuntimeWarning, match="falling back to the torch fused path"):
        head = choose_head_path(model, "auto", probe_batch(), **CHUNKS)
    assert head is not None and head.kernel == "torch"
