"""The Triton fused head + Min-K%++ reduction kernel, on CPU through Triton's interpreter.

tests/conftest.py sets TRITON_INTERPRET=1 before triton is first imported.
"""

import pytest
import torch

pytest.importorskip("triton", reason="triton not installed (pip install -e '.[test]')")


import minkscan.models.forward as forward  # noqa: E402
import minkscan.models.probes as probes  # noqa: E402
from minkscan.kernels.fused_head import token_stats_chunked, token_stats_triton  # noqa: E402
from minkscan.models.forward import Tiles, TokenBatch, batch_token_stats  # noqa: E402
from minkscan.models.probe_cache import probe_cache  # noqa: E402
from minkscan.models.probes import choose_head_path  # noqa: E402
from minkscan.scoring.token_stats import TokenStats, token_stats_from_hidden  # noqa: E402
from tiny_models import build_tiny_model  # noqa: E402

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


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_chunked_head_matches_float64_reference_with_bias_softcap_and_ragged_vocab(dtype):
    generator = torch.Generator().manual_seed(5)
    vocab = 3001  # not a multiple of the row pass's block; 37 rows in chunks of 16
    hidden = torch.randn(37, 48, generator=generator).to(dtype)
    weight = (0.5 * torch.randn(vocab, 48, generator=generator)).to(dtype)
    bias = torch.randn(vocab, generator=generator).to(dtype)
    targets = torch.randint(0, vocab, (37,), generator=generator)
    targets[:2] = torch.tensor([0, vocab - 1])
    stats = token_stats_chunked(
        hidden, weight, targets, row_chunk=16, bias=bias, softcap=30.0, block_v=512
    )
    reference = float64_reference(hidden, weight, targets, bias, softcap=30.0)
    # fp32 logits: float error only. bf16 logits are rounded as the model's own bf16 lm_head
    # output is, each by at most 2^-9 of the largest |logit|; log p = x_t - logsumexp(x) and
    # the moments move by at most twice that.
    tolerance = 1e-4 if dtype == torch.float32 else 2**-8 * logit_scale(hidden, weight, bias)
    assert max_gap(stats, reference) < tolerance


def logit_scale(hidden, weight, bias) -> float:
    """The largest |logit| of the float64 product."""
    logits = hidden.double() @ weight.double().T + bias.double()
    return logits.abs().max().item()


def test_chunked_head_matches_float64_reference_at_gemma3_vocab_of_262144_with_softcap():
    generator = torch.Generator().manual_seed(6)
    vocab = 262144
    hidden = torch.randn(5, 16, generator=generator)
    weight = 0.3 * torch.randn(vocab, 16, generator=generator)
    targets = torch.randint(0, vocab, (5,), generator=generator)
    stats = token_stats_chunked(hidden, weight, targets, row_chunk=4, softcap=30.0, block_v=8192)
    assert max_gap(stats, float64_reference(hidden, weight, targets, softcap=30.0)) < 1e-4


def test_chunked_head_keeps_precision_under_large_logit_offsets():
    generator = torch.Generator().manual_seed(7)
    hidden = torch.randn(8, 16, generator=generator)
    weight = torch.randn(300, 16, generator=generator)
    bias = torch.full((300,), 1e4)
    targets = torch.randint(0, 300, (8,), generator=generator)
    shifted = token_stats_chunked(hidden, weight, targets, row_chunk=8, bias=bias, block_v=128)
    plain = token_stats_chunked(hidden, weight, targets, row_chunk=8, block_v=128)
    assert (shifted.std_logprob - plain.std_logprob).abs().max() < 1e-2
    assert (shifted.minkpp() - plain.minkpp()).abs().max() < 1e-2


def test_kernel_rejects_mismatched_dtypes():
    with pytest.raises(ValueError, match="dtype"):
        token_stats_triton(
            torch.zeros(2, 16), torch.zeros(32, 16).bfloat16(), torch.zeros(2).long()
        )


def probe_batch() -> TokenBatch:
    segments = [(tuple(range(3, 15)), 0), (tuple(range(20, 27)), 0)]
    return TokenBatch.padded(segments, pad_id=0, padding_side="right", device=torch.device("cpu"))


TILES = Tiles(row_chunk=64, vocab_chunk=128)


def tiles_for(kernel: str) -> Tiles:
    return TILES


def test_auto_head_on_cpu_uses_the_torch_fused_path_not_triton():
    model = build_tiny_model("llama").model
    head = choose_head_path(model, "auto", probe_batch(), tiles_for)
    assert head is not None and head.kernel == "torch"


def test_triton_head_requested_without_cuda_is_a_clear_error():
    model = build_tiny_model("llama").model
    with pytest.raises(ValueError, match="CUDA"):
        choose_head_path(model, "triton", probe_batch(), tiles_for)


class Clock:
    """A clock the tests move: the head probes time their paths with it, never the wall."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def slowed(function, clock: Clock, seconds: float = 0.2):
    """``function`` taking ``seconds`` longer per call on ``clock``."""

    def slow(*args, **kwargs):
        clock.now += seconds
        return function(*args, **kwargs)

    return slow


# Each fused head path by the function `minkscan.models.forward` calls for it.
HEAD_FUNCTIONS = {
    "triton": "token_stats_triton",
    "chunked": "token_stats_chunked",
    "torch": "token_stats_from_hidden",
}


@pytest.mark.parametrize("kind", ["llama", "gemma3"])
@pytest.mark.parametrize("fastest", list(HEAD_FUNCTIONS))
def test_auto_head_keeps_the_fastest_fused_path_that_matches_the_logits(kind, fastest, monkeypatch):
    monkeypatch.setattr(probes, "triton_usable", lambda device: True)
    clock = Clock()
    for kernel, name in HEAD_FUNCTIONS.items():
        if kernel != fastest:
            monkeypatch.setattr(forward, name, slowed(getattr(forward, name), clock))
    model = build_tiny_model(kind).model
    batch = probe_batch()
    head = choose_head_path(model, "auto", batch, tiles_for, timer=clock)
    assert head is not None and head.kernel == fastest
    kernel = batch_token_stats(model, batch, head=head, tiles=TILES)
    logits = batch_token_stats(model, batch, head=None, tiles=TILES)
    assert max_gap(kernel, logits) < 1e-4


def test_the_fastest_head_is_remembered_and_not_timed_again_while_agreement_is_rechecked(
    monkeypatch, tmp_path
):
    monkeypatch.setattr(probes, "triton_usable", lambda device: True)
    clock = Clock()
    for kernel, name in HEAD_FUNCTIONS.items():
        if kernel != "chunked":
            monkeypatch.setattr(forward, name, slowed(getattr(forward, name), clock))
    model = build_tiny_model("llama").model
    cache = probe_cache(model, tmp_path)
    first = choose_head_path(model, "auto", probe_batch(), tiles_for, timer=clock, cache=cache)
    assert first is not None and first.kernel == "chunked"
    assert cache.get("fastest_head") == "chunked"

    timed = []
    monkeypatch.setattr(probes, "faster_head", lambda *args, **kwargs: timed.append(1))
    again = choose_head_path(model, "auto", probe_batch(), tiles_for, timer=clock, cache=cache)
    assert again is not None and again.kernel == "chunked" and not timed
    # A remembered path that now disagrees with the logits is not used.
    monkeypatch.setattr(forward, "token_stats_chunked", off_by_one(token_stats_chunked))
    monkeypatch.setattr(probes, "faster_head", lambda heads, *args, **kwargs: heads[0])
    with pytest.warns(RuntimeWarning, match="cuBLAS chunks with the Triton row pass\\) disagrees"):
        third = choose_head_path(model, "auto", probe_batch(), tiles_for, timer=clock, cache=cache)
    assert third is not None and third.kernel != "chunked"


def off_by_one(function):
    """``function`` whose target log-probabilities are all 1 too high."""

    def wrong(*args, **kwargs):
        stats = function(*args, **kwargs)
        return TokenStats(
            stats.target_logprob + 1.0, stats.mean_logprob, stats.std_logprob, stats.top1_logprob
        )

    return wrong


def test_auto_head_warns_and_drops_a_fused_path_that_disagrees_with_the_logits(monkeypatch):
    monkeypatch.setattr(probes, "triton_usable", lambda device: True)
    monkeypatch.setattr(forward, "token_stats_triton", off_by_one(token_stats_triton))
    clock = Clock()
    monkeypatch.setattr(forward, "token_stats_from_hidden", slowed(token_stats_from_hidden, clock))
    model = build_tiny_model("llama").model
    with pytest.warns(RuntimeWarning, match=r"Triton kernel\) disagrees .* falling back to cuBLAS"):
        head = choose_head_path(model, "auto", probe_batch(), tiles_for, timer=clock)
    assert head is not None and head.kernel == "chunked"


def test_auto_head_falls_back_to_the_model_logits_when_no_fused_path_agrees(monkeypatch):
    monkeypatch.setattr(probes, "triton_usable", lambda device: True)
    for name in HEAD_FUNCTIONS.values():
        monkeypatch.setattr(forward, name, off_by_one(getattr(forward, name)))
    model = build_tiny_model("llama").model
    with pytest.warns(RuntimeWarning, match="falling back to the model's logits"):
        assert choose_head_path(model, "auto", probe_batch(), tiles_for) is None
