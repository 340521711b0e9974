"""GPU fast path against the hardware limit: tokens/s, peak memory and MFU, side by side.

For randomly initialised models (speed does not depend on trained weights) of two
architectures -- a 1B-class Llama (Llama-3.2-1B shapes) and gemma3-270m's -- on the same
B x T batch of random token ids:

  (a) bare       Hugging Face forward pass returning logits, nothing else (the floor);
  (b) reference  per-document loop in the style of the paper's code: one document at a time,
                 full float32 log-softmax, sigma from E[x^2] - mu^2, a sort per k;
  (c) scorer     `DocumentScorer` (packed batches by token budget, inference_mode, head
                 path chosen by the start-up probes: on CUDA the fastest of the Triton
                 kernel, cuBLAS chunks with a Triton row pass and the torch tiles; the body
                 eager, or compiled with ``--compile``).

Prints tokens/s and peak memory of each, the ratios (c)/(a) time (target <= 1.0) and
(b)/(c) time (target >= 20), and MFU of (c) against the bf16 peak of a large matmul timed in
the same run. On CUDA weights are bf16; on CPU (no GPU) the models run in float32, are cut to
``--layers`` layers by default, the matmul peak is float32, and every number is a CPU number,
labelled as such -- not evidence for the GPU targets.

    python benchmarks/bench_gpu.py                                  # CUDA: full-size models
    python benchmarks/bench_gpu.py --layers 2 --batch 2 --tokens 64  # CPU smoke run
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch
from minkscan.config import ScoringConfig
from minkscan.models.loading import LoadedModel
from minkscan.scorer import PROBE_TEXT, DocumentScorer
from minkscan.text.tokenize import EncodedDocument
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import (
    Gemma3ForCausalLM,
    Gemma3TextConfig,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedModel,
    PreTrainedTokenizerFast,
)

K_PERCENTAGES = [10, 20, 30, 40, 50, 60, 70, 80, 90, 100]


# The published shapes of each architecture timed here: (model class, config class, config).
ARCHITECTURES = {
    "llama-1b": (  # meta-llama/Llama-3.2-1B
        LlamaForCausalLM,
        LlamaConfig,
        {
            "vocab_size": 128256,
            "hidden_size": 2048,
            "intermediate_size": 8192,
            "num_hidden_layers": 16,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "max_position_embeddings": 8192,
            "tie_word_embeddings": True,
            "rope_theta": 500000.0,
        },
    ),
    "smollm2-135m": (  # HuggingFaceTB/SmolLM2-135M (the bundled model's shapes)
        LlamaForCausalLM,
        LlamaConfig,
        {
            "vocab_size": 49152,
            "hidden_size": 576,
            "intermediate_size": 1536,
            "num_hidden_layers": 30,
            "num_attention_heads": 9,
            "num_key_value_heads": 3,
            "max_position_embeddings": 8192,
            "tie_word_embeddings": True,
            "rope_theta": 100000.0,
        },
    ),
    "gemma3-270m": (  # google/gemma-3-270m
        Gemma3ForCausalLM,
        Gemma3TextConfig,
        {
            "vocab_size": 262144,
            "hidden_size": 640,
            "intermediate_size": 2048,
            "num_hidden_layers": 18,
            "num_attention_heads": 4,
            "num_key_value_heads": 1,
            "head_dim": 256,
            "max_position_embeddings": 32768,
            "sliding_window": 512,
        },
    ),
}


def architecture(name: str, layers: int | None) -> PreTrainedModel:
    """A randomly initialised model of the named architecture (optionally fewer layers)."""
    if name not in ARCHITECTURES:
        raise ValueError(f"unknown architecture {name!r}; known: {', '.join(ARCHITECTURES)}")
    model_class, config_class, shapes = ARCHITECTURES[name]
    return model_class(config_class(**shapes | ({"num_hidden_layers": layers} if layers else {})))


def probe_tokenizer() -> PreTrainedTokenizerFast:
    """A word-level tokenizer that covers the scorer's start-up probe text (ids < 64)."""
    words = sorted(set(PROBE_TEXT.split()))
    vocab = {"<pad>": 0, "<unk>": 1} | {word: i + 2 for i, word in enumerate(words)}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", unk_token="<unk>")


def reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    else:
        Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM (Linux)


def peak_mib(device: torch.device) -> float:
    """Peak GPU memory allocated, or peak RSS of the process on CPU, in MiB."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("VmHWM not found")


def timed(fn: Callable[[], object], device: torch.device, repeats: int) -> tuple[float, float]:
    """(median seconds, peak MiB) of ``fn`` after one warm-up call."""
    fn()
    reset_peak(device)
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times), peak_mib(device)


def matmul_peak_flops(device: torch.device, dtype: torch.dtype) -> float:
    """Measured FLOP/s of a large square matmul in ``dtype`` (the achievable peak)."""
    size = 8192 if device.type == "cuda" else 2048
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    seconds, _ = timed(lambda: a @ b, device, repeats=5)
    return 2 * size**3 / seconds


def flops_per_token(model: PreTrainedModel, tokens: int) -> float:
    """Forward FLOPs per token: 2 x non-embedding params (incl. head) + causal attention."""
    config = model.config
    embedding = model.get_input_embeddings().weight.numel()
    params = sum(p.numel() for p in model.parameters())  # tied head counted once
    head = model.get_output_embeddings().weight.numel()
    matmul_params = params - embedding + head
    attention_width = config.num_attention_heads * getattr(
        config, "head_dim", config.hidden_size // config.num_attention_heads
    )
    attention = 2 * config.num_hidden_layers * tokens * attention_width  # QK^T + AV, causal
    return 2 * matmul_params + attention


def reference_loop(model: PreTrainedModel, documents: list[torch.Tensor]) -> list[list[float]]:
    """(b): one document at a time, full-vocabulary float32 softmax, Min-K%++ per k."""
    results = []
    with torch.no_grad():
        for ids in documents:
            logits = model(input_ids=ids[None]).logits[0, :-1].float()
            log_probs = torch.log_softmax(logits, dim=-1)
            probs = log_probs.exp()
            target = log_probs.gather(1, ids[1:, None]).squeeze(1)
            mu = (probs * log_probs).sum(-1)
            sigma = ((probs * log_probs**2).sum(-1) - mu**2).clamp_min(0).sqrt()
            token_scores = ((target - mu) / sigma).cpu()
            ranked = token_scores.sort().values
            results.append(
                [float(ranked[: max(1, k * len(ranked) // 100)].mean()) for k in K_PERCENTAGES]
            )
    return results


def build(name: str, layers: int | None, device: torch.device) -> PreTrainedModel:
    """The named architecture, initialised on ``device`` (fast on a GPU) from seed 0, in the
    dtype timed there (bf16 on CUDA, else float32), in eval mode."""
    torch.manual_seed(0)
    with device:
        model = architecture(name, layers)
    return model.to(dtype=torch.bfloat16 if device.type == "cuda" else torch.float32).eval()


def bench_model(
    model: PreTrainedModel,
    name: str,
    device: torch.device,
    peak: float,
    *,
    batch: int,
    tokens: int,
    repeats: int,
    head: str = "auto",
    compile_body: bool = False,
) -> dict[str, float | str]:
    """Times (a), (b), (c) of ``model`` (see `build`) on one batch x tokens batch of random
    ids; returns the figures. ``compile_body``: (c) with the model body compiled."""
    vocab = model.config.vocab_size
    ids = torch.randint(64, vocab, (batch, tokens), device=device)
    mask = torch.ones_like(ids)
    documents = [ids[i] for i in range(batch)]
    encoded = [EncodedDocument(text="", input_ids=tuple(row.tolist()), status="ok") for row in ids]
    scoring = ScoringConfig(
        k_percentages=K_PERCENTAGES,
        max_tokens=tokens,
        batch_tokens=batch * tokens,
        max_batch_size=batch,
        head=head,
        compile=compile_body,
    )
    scorer = DocumentScorer(LoadedModel(name, model, probe_tokenizer()), scoring)

    def bare() -> None:
        with torch.inference_mode():
            model(input_ids=ids, attention_mask=mask).logits  # noqa: B018 - the work measured

    a_s, a_mib = timed(bare, device, repeats)
    b_s, b_mib = timed(lambda: reference_loop(model, documents), device, repeats)
    c_s, c_mib = timed(lambda: scorer.score_documents(encoded), device, repeats)
    n_tokens = batch * tokens
    return {
        "model": name,
        "layers": model.config.num_hidden_layers,
        "vocab": vocab,
        "dtype": str(model.dtype).removeprefix("torch."),
        "batch": batch,
        "tokens": tokens,
        "head": scorer.head_path,
        "body_compiled": bool(scorer.body.active),  # False: the start-up check kept it eager
        "body_decisions": scorer.body.cache.decisions("compiled_body") if scorer.body.cache else {},
        "tokens_per_s_a": n_tokens / a_s,
        "tokens_per_s_b": n_tokens / b_s,
        "tokens_per_s_c": n_tokens / c_s,
        "peak_mem_a_mib": a_mib,
        "peak_mem_b_mib": b_mib,
        "peak_mem_c_mib": c_mib,
        "c_over_a": c_s / a_s,
        "b_over_c": b_s / c_s,
        "mfu_c": flops_per_token(model, tokens) * n_tokens / c_s / peak,
    }


def print_result(result: dict[str, float | str], device: torch.device) -> None:
    print(
        f"\n## {result['model']}: {result['layers']} layers, vocab {result['vocab']}, "
        f"{result['dtype']}, batch {result['batch']} x {result['tokens']} tokens, device {device}"
    )
    print(f"{'variant':<36} {'tokens/s':>12} {'peak MiB':>10}")
    labels = {"a": "(a) bare forward + logits", "b": "(b) per-document reference"}
    labels["c"] = f"(c) scorer [head={result['head']}]"
    for key, label in labels.items():
        speed, memory = result[f"tokens_per_s_{key}"], result[f"peak_mem_{key}_mib"]
        print(f"{label:<36} {speed:>12.1f} {memory:>10.1f}")
    print(f"(c)/(a) time = {result['c_over_a']:.3f}  (target <= 1.0)")
    print(f"(b)/(c) time = {result['b_over_c']:.1f}x  (target >= 20x)")
    mfu = 100 * result["mfu_c"]
    print(f"MFU of (c)   = {mfu:.1f}% of the measured matmul peak  (target >= 40% at 1B)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--models", nargs="+", default=["llama-1b", "gemma3-270m"], choices=ARCHITECTURES
    )
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--layers",
        type=int,
        default=None,
        help="cut models to this many layers (default: full on CUDA, 2 on CPU)",
    )
    parser.add_argument(
        "--head", default="auto", choices=["auto", "fused", "chunked", "logits", "triton"]
    )
    parser.add_argument("--compile", action="store_true", help="(c) with the body compiled")
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    args = parser.parse_args()
    if args.device == "auto":
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(args.device)
    if device.type == "cpu":
        args.layers = args.layers or 2
        print(
            "NOTE: no CUDA device -- CPU numbers (float32, models cut to "
            f"{args.layers} layers, float32 matmul peak). They say nothing about the GPU "
            "targets, which need this script run on a GPU."
        )
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    peak = matmul_peak_flops(device, dtype)
    print(f"measured {dtype} matmul peak: {peak / 1e12:.2f} TFLOP/s")
    for name in args.models:
        result = bench_model(
            build(name, args.layers, device),
            name,
            device,
            peak,
            batch=args.batch,
            tokens=args.tokens,
            repeats=args.repeats,
            head=args.head,
            compile_body=args.compile,
        )
        print_result(result, device)


if __name__ == "__main__":
    main()
