"""Synthetic inputs for benchmarks whose subject is not the model: a byte-level tokenizer,
random-weight models of named sizes over it, and texts of a chosen length mix.

A byte-level tokenizer makes one token per byte of ASCII text, so document lengths in tokens
are set exactly by the text, and any vocabulary size >= 256 fits it.
"""

from __future__ import annotations

import random

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

WORDS = "the quick brown fox jumps over a lazy dog near river bank at dawn".split()


def byte_tokenizer() -> PreTrainedTokenizerFast:
    """256 tokens, one per byte; ``a`` doubles as EOS and padding."""
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    backend = Tokenizer(models.BPE(vocab={ch: i for i, ch in enumerate(sorted(alphabet))},
                                   merges=[]))  # fmt: skip
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="a", pad_token="a")


def tiny_llama(hidden: int = 64, layers: int = 1, vocab: int = 256, seed: int = 0):
    """A random Llama small enough that the host side of scoring dominates its cost."""
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden,
        num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
        max_position_embeddings=4096,
    )  # fmt: skip
    return LlamaForCausalLM(config).eval()


def texts(count: int, *, shortest: int, longest: int, seed: int = 0) -> list[str]:
    """``count`` texts of random words, log-uniformly between ``shortest`` and ``longest``
    bytes (so tokens, under `byte_tokenizer`): many short documents, a long tail."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        length = int(shortest * (longest / shortest) ** rng.random())
        words: list[str] = []
        size = 0
        while size < length:
            word = rng.choice(WORDS)
            words.append(word)
            size += len(word) + 1
        out.append(" ".join(words)[:length])
    return out
