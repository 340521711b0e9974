"""Shared fixtures: tiny randomly initialised causal LMs (exact math, fast) and real data paths."""

from __future__ import annotations

import os
import socket
import urllib.request
from pathlib import Path

# Triton kernels run on CPU through Triton's interpreter in tests. It is read when triton is
# first imported (transformers imports it), so it must be set before the imports below.
os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest
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

REPO = Path(__file__).resolve().parents[1]


def shared_data_dir() -> Path:
    """The shared benchmark data: $MINKSCAN_SHARED_DATA, else ../shared/data beside the repo,
    else /work/shared/data (CI may clone the repo somewhere else)."""
    candidates = [REPO.parent / "shared" / "data", Path("/work/shared/data")]
    if "MINKSCAN_SHARED_DATA" in os.environ:
        candidates.insert(0, Path(os.environ["MINKSCAN_SHARED_DATA"]))
    return next((path for path in candidates if path.is_dir()), candidates[0])


SHARED_DATA = shared_data_dir()
WIKIMIA32 = SHARED_DATA / "wikimia24" / "length32.parquet"
WIKIMIA64 = SHARED_DATA / "wikimia24" / "length64.parquet"
# The first 64 rows of length32.parquet (id, text), shipped with the package.
SAMPLE = REPO / "pipeline" / "minkscan" / "data" / "sample.parquet"

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
    elif kind == "llama":
        config = LlamaConfig(
            vocab_size=vocab,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=512,
            tie_word_embeddings=False,
            initializer_range=0.2,
            **special,
        )
        model = LlamaForCausalLM(config)
    elif kind == "gemma3":
        config = Gemma3TextConfig(
            vocab_size=vocab,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=8,
            max_position_embeddings=512,
            sliding_window=16,
            final_logit_softcapping=5.0,
            initializer_range=0.2,
            **special,
        )
        model = Gemma3ForCausalLM(config)
    else:
        raise ValueError(kind)
    model.eval()
    return LoadedModel(name=f"tiny-{kind}", model=model, tokenizer=tokenizer)


@pytest.fixture(scope="session", params=["gpt2", "llama", "gemma3"])
def tiny_model(request: pytest.FixtureRequest) -> LoadedModel:
    """Each tiny architecture in turn."""
    return build_tiny_model(request.param)


@pytest.fixture(scope="session")
def tiny_llama() -> LoadedModel:
    return build_tiny_model("llama")


@pytest.fixture(scope="session")
def smollm2() -> LoadedModel:
    """The real bundled SmolLM2-135M (float32, CPU), loaded once per test session."""
    from minkscan.config import ModelConfig
    from minkscan.models.loading import load_model

    return load_model(ModelConfig(name="smollm2-135m", device="cpu"))


@pytest.fixture(scope="session")
def tiny_llama_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny Llama saved with save_pretrained, for code that loads models by name (actors)."""
    directory = tmp_path_factory.mktemp("tiny-llama")
    loaded = build_tiny_model("llama")
    loaded.model.save_pretrained(directory)
    loaded.tokenizer.save_pretrained(directory)
    return directory


@pytest.fixture(scope="session")
def tiny_gpt2_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny GPT-2 saved to disk whose tokenizer differs from the tiny Llama's (no BOS, a
    smaller vocabulary): a reference model for Ref that must tokenise the text itself."""
    directory = tmp_path_factory.mktemp("tiny-gpt2")
    loaded = build_tiny_model("gpt2", seed=3, vocab_size=280)
    loaded.model.save_pretrained(directory)
    loaded.tokenizer.save_pretrained(directory)
    return directory


@pytest.fixture
def s3_server():
    """moto's S3 server on loopback (as s3fs's own tests run it), with a fresh bucket."""
    import boto3
    from moto.server import ThreadedMotoServer

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    # moto keeps its buckets per process, across servers: start every test from none.
    urllib.request.urlopen(urllib.request.Request(f"{endpoint}/moto-api/reset", method="POST"))
    client = boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        region_name="us-east-1",
    )
    client.create_bucket(Bucket="corpus")
    yield endpoint, client
    server.stop()


@pytest.fixture(scope="module")
def local_ray():
    """One embedded Ray for a module's pipeline runs (each would otherwise start its own): 3
    logical CPUs hold a scoring actor, the tokenizer and a read task (one CPU)."""
    import ray

    ray.init(num_cpus=3, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture(autouse=True, scope="session")
def stalled_pipelines_fail_fast():
    """An in-process run that stalls (say, actors holding every CPU) fails after 5 minutes
    of no progress instead of Ray Data's default half hour."""
    import ray

    context = ray.data.DataContext.get_current()
    previous = context.execution_no_progress_timeout_s
    context.execution_no_progress_timeout_s = 300
    yield
    context.execution_no_progress_timeout_s = previous
