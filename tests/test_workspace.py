"""Sizes that follow the device: head tiles, batch_tokens and dtype on a GPU (its free
memory faked here), CPU sizes on a CPU, and GPU actors that ask Ray for GPUs only."""

from __future__ import annotations

import pyarrow.fs as pafs
import pytest
import torch
from minkscan.config import build_config
from minkscan.distributed.pipeline import Destination, score_stages
from minkscan.distributed.spec import required_cpus, required_gpus
from minkscan.models.forward import LinearHead
from minkscan.models.loading import resolve_dtype
from minkscan.models.workspace import (
    CPU_BATCH_TOKENS,
    CPU_TILES,
    GPU_BATCH_SHARE,
    Shapes,
    auto_batch_tokens,
    batch_bytes,
    head_tiles,
)

LLAMA_1B = Shapes(hidden=2048, intermediate=8192, attention=2048, vocab=128_256, bytes_per_value=2)
CUDA = torch.device("cuda")
FREE = 8 * 2**30


@pytest.fixture
def gpu_with_8_gib_free(monkeypatch):
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (FREE, 80 * 2**30))


def chunked_head() -> LinearHead:
    return LinearHead(weight=torch.empty(0), bias=None, softcap=None, kernel="chunked")


@pytest.mark.usefixtures("gpu_with_8_gib_free")
def test_on_a_gpu_head_tiles_are_whole_vocabulary_rows_sized_from_free_memory():
    tiles = head_tiles(CUDA, LLAMA_1B, "chunked")
    assert tiles.vocab_chunk == LLAMA_1B.vocab
    assert (
        tiles.row_chunk * LLAMA_1B.vocab * 2
        <= FREE / 4
        < (tiles.row_chunk + 1) * LLAMA_1B.vocab * 2
    )
    torch_tiles = head_tiles(CUDA, LLAMA_1B, "torch")  # four fp32 copies per element
    assert torch_tiles.row_chunk * LLAMA_1B.vocab * 16 <= FREE / 4
    assert head_tiles(CUDA, LLAMA_1B, "torch", row_chunk=512).row_chunk == 512  # user wins


def test_on_a_cpu_tiles_and_batch_tokens_are_the_cpu_defaults():
    cpu = torch.device("cpu")
    assert head_tiles(cpu, LLAMA_1B, "torch") == CPU_TILES
    assert auto_batch_tokens(cpu, LLAMA_1B, None, CPU_TILES, 2048) == CPU_BATCH_TOKENS


@pytest.mark.usefixtures("gpu_with_8_gib_free")
def test_on_a_gpu_batch_tokens_is_the_most_whose_bound_fits_the_free_memory():
    head = chunked_head()
    tiles = head_tiles(CUDA, LLAMA_1B, "chunked")
    tokens = auto_batch_tokens(CUDA, LLAMA_1B, head, tiles, 2048)
    assert tokens > CPU_BATCH_TOKENS
    assert batch_bytes(LLAMA_1B, head, tiles, tokens, 2048) <= FREE * GPU_BATCH_SHARE
    assert batch_bytes(LLAMA_1B, head, tiles, tokens + 1024, 2048) > FREE * GPU_BATCH_SHARE


def test_dtype_auto_is_bfloat16_on_a_gpu_that_has_it_and_float32_elsewhere(monkeypatch):
    assert resolve_dtype("auto", "cpu") == torch.float32
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: True)
    assert resolve_dtype("auto", "cuda") == torch.bfloat16
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: False)
    assert resolve_dtype("auto", "cuda") == torch.float32
    assert resolve_dtype("bfloat16", "cpu") == torch.bfloat16  # a user's value wins


def test_a_gpu_scoring_actor_asks_ray_for_its_gpus_only():
    """Ray Data warns that num_cpus with num_gpus is experimental; a GPU actor asks for GPUs
    and Ray reserves one CPU with it, which the capacity check counts."""
    config = build_config({}, {"ray.gpus_per_actor": 1, "ray.num_actors": 2})
    stages = score_stages(config, Destination(pafs.LocalFileSystem(), "/out"))
    score = next(spec for spec in stages if spec.name == "score")
    assert score.resources() == {"num_gpus": 1}
    assert required_gpus(stages) == (2, 1)
    assert required_cpus(stages) == 1 + 0.25 + 2 * 1 + 0.25  # read, tokenizer, actors, commit
    cpu_only = score_stages(build_config({}, {}), Destination(pafs.LocalFileSystem(), "/out"))
    assert next(s for s in cpu_only if s.name == "score").resources() == {"num_cpus": 1.5}
