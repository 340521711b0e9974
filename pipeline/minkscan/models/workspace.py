"""How much memory one scoring batch needs beyond the model's weights, and the sizes that
follow from it: the head's tiles and ``batch_tokens`` when they are left to the device.

The bound (`batch_bytes`) is what a `DocumentScorer` may hold at the peak of one batch of
T token positions in rows of width W, with b bytes per activation:

    body   T * (6 H + 4 I + 3 A) * b     hidden states, MLP and attention projections of the
                                          layer being computed (transformers frees each
                                          layer's activations before the next)
         + T * W                          the boolean attention mask of packed or padded rows
    head   N * (H * b + 16)               the kept positions' final hidden rows and their stats
         + the reduction's workspace:     torch tiles: 4 fp32 [row_chunk x vocab_chunk];
                                          cuBLAS chunks: [row_chunk x V] logits in b bytes;
                                          the Triton kernel: nothing of size V;
                                          the model's own logits: T * V * b, plus torch tiles

with H the hidden size, I the MLP width, A the attention width (heads x head size) and
N <= T the kept positions. Nothing else of a batch survives it (`minkscan.models.forward`
runs under inference mode), so between batches the scorer holds only the model.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import PreTrainedModel

from minkscan.models.forward import LinearHead, Tiles

# Tall, narrow tiles keep a CPU tile cache-resident (measured by benchmarks/bench_scoring.py).
CPU_TILES = Tiles(row_chunk=2048, vocab_chunk=1024)
CPU_BATCH_TOKENS = 8192
# On a GPU: the share of free memory the head's workspace may take, the rows it is cut to,
# and the share one whole batch may take when batch_tokens is sized from free memory.
GPU_HEAD_SHARE = 0.25
GPU_ROW_CHUNK = (256, 32768)
GPU_BATCH_SHARE = 0.7
GPU_BATCH_TOKENS = (8192, 262144)


@dataclass(frozen=True)
class Shapes:
    """The sizes of a causal LM that its activations scale with."""

    hidden: int
    intermediate: int
    attention: int
    vocab: int
    bytes_per_value: int

    @classmethod
    def of(cls, model: PreTrainedModel) -> Shapes:
        config = model.config.get_text_config()
        hidden = _first(config, "hidden_size", "n_embd")
        heads = _first(config, "num_attention_heads", "n_head")
        head_dim = getattr(config, "head_dim", None) or hidden // heads
        intermediate = _first(config, "intermediate_size", "n_inner", default=4 * hidden)
        vocab = model.get_output_embeddings().weight.shape[0]
        dtype = next(model.parameters()).dtype
        return cls(hidden, intermediate, heads * head_dim, vocab, dtype.itemsize)


def _first(config: object, *names: str, default: int | None = None) -> int:
    for name in names:
        value = getattr(config, name, None)
        if value:
            return int(value)
    if default is None:
        raise ValueError(f"model config has none of {names}")
    return default


def head_tiles(
    device: torch.device,
    shapes: Shapes,
    kernel: str,
    row_chunk: int | None = None,
    vocab_chunk: int | None = None,
) -> Tiles:
    """The head reduction's tiles: the user's where set, else sized for ``device``.

    On a CPU, small tall tiles (cache-resident). On a GPU, whole vocabulary rows (one product
    per row chunk, a few large kernels instead of thousands of small ones) and as many rows as
    `GPU_HEAD_SHARE` of the free memory holds: logits in the model's dtype for the cuBLAS
    chunks, four fp32 copies for the torch tiles.
    """
    if device.type != "cuda":
        chosen = CPU_TILES
    else:
        per_row = shapes.vocab * (shapes.bytes_per_value if kernel == "chunked" else 16)
        free, _ = torch.cuda.mem_get_info(device)
        rows = int(free * GPU_HEAD_SHARE) // per_row
        chosen = Tiles(min(max(rows, GPU_ROW_CHUNK[0]), GPU_ROW_CHUNK[1]), shapes.vocab)
    return Tiles(row_chunk or chosen.row_chunk, vocab_chunk or chosen.vocab_chunk)


def head_bytes(shapes: Shapes, head: LinearHead | None, tiles: Tiles, tokens: int) -> int:
    """Workspace of the head path for ``tokens`` positions (see the module docstring)."""
    rows = min(tiles.row_chunk, tokens)
    torch_tiles = 4 * 4 * rows * min(tiles.vocab_chunk, shapes.vocab)
    kept = tokens * (shapes.hidden * shapes.bytes_per_value + 16)
    if head is None:
        return tokens * shapes.vocab * shapes.bytes_per_value + torch_tiles + 16 * tokens
    if head.kernel == "chunked":
        return kept + rows * shapes.vocab * shapes.bytes_per_value
    if head.kernel == "triton":
        return kept
    return kept + torch_tiles


def batch_bytes(
    shapes: Shapes, head: LinearHead | None, tiles: Tiles, tokens: int, width: int
) -> int:
    """Upper bound of the memory one batch of ``tokens`` positions in rows of ``width``
    takes beyond the weights (the module docstring gives the terms)."""
    per_token = 6 * shapes.hidden + 4 * shapes.intermediate + 3 * shapes.attention
    body = tokens * per_token * shapes.bytes_per_value + tokens * width
    return body + head_bytes(shapes, head, tiles, tokens)


def auto_batch_tokens(
    device: torch.device, shapes: Shapes, head: LinearHead | None, tiles: Tiles, width: int
) -> int:
    """``batch_tokens`` sized for the device: `CPU_BATCH_TOKENS` on a CPU (throughput is flat
    beyond it there); on a GPU the largest multiple of 1,024 whose `batch_bytes` fits in
    `GPU_BATCH_SHARE` of the free memory, within `GPU_BATCH_TOKENS`."""
    if device.type != "cuda":
        return CPU_BATCH_TOKENS
    free, _ = torch.cuda.mem_get_info(device)
    low, high = GPU_BATCH_TOKENS
    tokens = low
    while (
        tokens + 1024 <= high
        and batch_bytes(shapes, head, tiles, tokens + 1024, width) <= free * GPU_BATCH_SHARE
    ):
        tokens += 1024
    return tokens
