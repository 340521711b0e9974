"""Tiny randomly initialised causal LMs for tests: exact math in milliseconds, in the three
architectures the scorer must handle (GPT-2: tied head, no BOS; Llama: untied, BOS; Gemma-3:
tied, BOS, final logit soft-capping)."""

from __future__ import annotations

import torch
from minkscan.models.loading import LoadedModel
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import (
    Gemma3ForCausalLM,
    Gemma3TextConfig,
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerFast,
)

TRAINING_TEXT = [
    "The quick brown fox jumps over the lazy dog.",
    "A membership inference attack asks whether a text was in the training data.",
    "Min-K%++ normalises each token log-probability by the mean and spread of the distribution.",
    "Ray Data streams Parquet shards through pools of model actors on a cluster.",
    "In 2024 several events happened that no model trained earlier could have seen.",
    "Numbers like 12345 and symbols like %, $ and # appear in real documents too.",
]


def tiny_tokenizer(add_bos: bool, vocab_size: int = 300) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer of ~``vocab_size`` tokens trained on a few sentences.

    With ``add_bos`` it prepends <bos> by default (Llama/Gemma style); without, it adds
    nothing (GPT-2 style).
    """
    backend = Tokenizer(models.BPE(unk_token=None))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<pad>", "<bos>", "<eos>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    backend.train_from_iterator(TRAINING_TEXT, trainer)
    backend.decoder = decoders.ByteLevel()
    if add_bos:
        backend.post_processor = processors.TemplateProcessing(
            single="<bos> $A", special_tokens=[("<bos>", backend.token_to_id("<bos>"))]
        )
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>"
    )


def build_tiny_model(kind: str, seed: int = 0, vocab_size: int = 300) -> LoadedModel:
    """A 2-layer random model of the given architecture with a padded vocabulary.

    kinds: 'gpt2' (tied head, no BOS), 'llama' (untied, BOS), 'gemma3' (tied, BOS,
    final logit soft-capping).
    """
    tokenizer = tiny_tokenizer(add_bos=kind != "gpt2", vocab_size=vocab_size)
    vocab = len(tokenizer) + 37  # model vocabulary larger than the tokenizer's
    special = {
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
    }
    torch.manual_seed(seed)
    if kind == "gpt2":
        config = GPT2Config(
            vocab_size=vocab,
            n_positions=512,
            n_embd=32,
            n_layer=2,
            n_head=2,
            initializer_range=0.2,
            **special,
        )
        model = GPT2LMHeadModel(config)
    elif kind in ("llama", "gemma3"):
        shared = {"vocab_size": vocab, "hidden_size": 32, "intermediate_size": 64,
                  "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                  "max_position_embeddings": 512, "initializer_range": 0.2, **special}  # fmt: skip
        if kind == "llama":
            model = LlamaForCausalLM(LlamaConfig(tie_word_embeddings=False, **shared))
        else:
            model = Gemma3ForCausalLM(Gemma3TextConfig(
                head_dim=8, sliding_window=16, final_logit_softcapping=5.0, **shared
            ))  # fmt: skip
    else:
        raise ValueError(kind)
    model.eval()
    return LoadedModel(name=f"tiny-{kind}", model=model, tokenizer=tokenizer)
