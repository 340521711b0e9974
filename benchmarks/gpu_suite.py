"""Every GPU check and benchmark of issue 15 in one command, written to gpu.json and gpu.md.

Needs no Ray: torch, transformers, triton and the minkscan package (pydantic and polars
wheels travel with the working tree where the machine lacks them). Parts:

1. correctness -- the Triton kernel and the torch fused path against a float64 reference of
   the same (rounded) inputs, at V = 262,144, with bias and softcap, and with V not a
   multiple of the tile. fp32 inputs: within 1e-4 relative. bf16 inputs: within 2^-7 of the
   largest |logit| -- a bf16 product or logit carries up to 2^-8 of its magnitude in rounding
   (8-bit mantissa), log p(target) inherits its logit's error directly and the log-partition
   and moments mix such errors, so two bf16 steps of the logit scale bound them;
2. cuda_vs_cpu -- `DocumentScorer` on CUDA in bf16 against CPU fp32 on the same random-weight
   model of smollm2-135m's architecture: per-document |delta| of every column;
3. speed -- `bench_gpu.bench_model` for llama-1b and gemma3-270m at 128, 512 and 2,048
   tokens ((a) bare forward, (b) per-document reference, (c) scorer; MFU against the bf16
   matmul peak measured in the same run); (c) with head auto, and forced to the torch fused
   path and to the Triton kernel, to check that auto kept the faster;
4. packing -- `bench_packing` padding shares and tokens/s, packing off and on.

    bash benchmarks/gpu_wheels.sh        # here, once: the wheels the GPU machine lacks (.whl/)
    # on the GPU machine (the device tool, carrying .whl):
    python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl &&
      PYTHONPATH=/tmp/site:pipeline python3 benchmarks/gpu_suite.py --out $OUT
    .venv/bin/python benchmarks/gpu_suite.py --out /tmp/suite --smoke   # CPU: tiny sizes

gpu.json holds device, torch, transformers, date and, per model (512 tokens, head auto),
c_over_a, b_over_c, mfu_c, peak_mem_a_mib, peak_mem_c_mib, then every measurement in full.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
from pathlib import Path

import bench_gpu
import bench_packing
import torch
import transformers
from minkscan.config import ScoringConfig
from minkscan.kernels.fused_head import token_stats_triton, triton_usable
from minkscan.models.loading import LoadedModel
from minkscan.scorer import DocumentScorer
from minkscan.scoring.token_stats import TokenStats, token_stats_from_hidden
from minkscan.text.tokenize import EncodedDocument

FIELDS = ("target_logprob", "mean_logprob", "std_logprob", "top1_logprob")
TOLERANCE = {"float32": 1e-4, "bfloat16": 2**-7}
MODEL_KEYS = ("c_over_a", "b_over_c", "mfu_c", "peak_mem_a_mib", "peak_mem_c_mib")


def reference_stats(hidden, weight, targets, bias, softcap) -> dict[str, torch.Tensor]:
    """Float64 per-row statistics of softcap(hidden @ weight.T + bias)."""
    logits = hidden.double() @ weight.double().T
    if bias is not None:
        logits = logits + bias.double()
    if softcap is not None:
        logits = softcap * torch.tanh(logits / softcap)
    logp = torch.log_softmax(logits, dim=-1)
    p = logp.exp()
    mean = (p * logp).sum(-1)
    return {
        "logit_scale": logits.abs().max(),
        "target_logprob": logp.gather(1, targets[:, None]).squeeze(1),
        "mean_logprob": mean,
        "std_logprob": (p * (logp - mean[:, None]) ** 2).sum(-1).sqrt(),
        "top1_logprob": logp.amax(-1),
    }


def max_error(stats: TokenStats, reference: dict[str, torch.Tensor], dtype: str) -> float:
    """Largest error over the four statistics: relative to each value (at least 1) for
    float32 inputs, relative to the largest |logit| for bf16 inputs (see the docstring)."""
    errors = []
    for field in FIELDS:
        value, expected = getattr(stats, field).double().cpu(), reference[field].cpu()
        scale = expected.abs().clamp_min(1.0) if dtype == "float32" else reference["logit_scale"]
        errors.append(((value - expected).abs() / scale.cpu()).max().item())
    return max(errors)


def correctness(device: torch.device, smoke: bool) -> list[dict[str, object]]:
    cases = [  # vocabulary, hidden size, bias, softcap
        (262_144, 640, False, 30.0),
        (50_257, 768, True, None),  # not a multiple of any tile
        (49_152, 576, False, None),
    ]
    if smoke:
        cases = [(3_001, 64, True, 30.0), (2_048, 64, False, None)]
    rows = 64 if smoke else 512
    results = []
    generator = torch.Generator().manual_seed(0)
    for vocab, width, with_bias, softcap in cases:
        for dtype in (torch.float32, torch.bfloat16):
            hidden = torch.randn(rows, width, generator=generator).to(device, dtype)
            weight = (torch.randn(vocab, width, generator=generator) / width**0.5 * 3).to(
                device, dtype
            )
            bias = torch.randn(vocab, generator=generator).to(device, dtype) if with_bias else None
            targets = torch.randint(0, vocab, (rows,), generator=generator).to(device)
            reference = reference_stats(hidden, weight, targets, bias, softcap)
            paths = {"torch fused": token_stats_from_hidden}
            if triton_usable(device):
                paths["triton"] = token_stats_triton
            for path, function in paths.items():
                stats = function(hidden, weight, targets, bias=bias, softcap=softcap)
                dtype_name = str(dtype).removeprefix("torch.")
                error = max_error(stats, reference, dtype_name)
                results.append(
                    {
                        "path": path,
                        "dtype": dtype_name,
                        "vocab": vocab,
                        "bias": with_bias,
                        "softcap": softcap,
                        "max_error": error,
                        "tolerance": TOLERANCE[dtype_name],
                        "ok": error <= TOLERANCE[dtype_name],
                    }
                )
    return results


def cuda_vs_cpu(device: torch.device, smoke: bool) -> dict[str, dict[str, float]]:
    """Per column: max and median per-document |scores on device in bf16 - CPU fp32|."""
    torch.manual_seed(0)
    model = bench_gpu.architecture("smollm2-135m", 2 if smoke else None).eval()
    generator = torch.Generator().manual_seed(1)
    documents = [
        EncodedDocument(
            "", tuple(torch.randint(64, 49_152, (n,), generator=generator).tolist()), "ok"
        )
        for n in torch.randint(16, 64 if smoke else 512, (8 if smoke else 64,), generator=generator)
    ]
    tokenizer = bench_gpu.probe_tokenizer()
    cpu = DocumentScorer(LoadedModel("cpu", model, tokenizer), ScoringConfig())
    expected = cpu.score_documents(documents)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    moved = model.to(device=device, dtype=dtype)
    actual = DocumentScorer(LoadedModel("device", moved, tokenizer), ScoringConfig())
    scores = actual.score_documents(documents)
    result = {}
    for column in actual.columns:
        gaps = torch.tensor(
            [abs(a - b) for a, b in zip(scores[column], expected[column], strict=True)]
        )
        result[column] = {"max": gaps.max().item(), "median": gaps.median().item()}
    result["head"] = {"path": actual.head_path}
    return result


def speed(device: torch.device, smoke: bool) -> list[dict[str, object]]:
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    peak = bench_gpu.matmul_peak_flops(device, dtype)
    lengths = (32, 64) if smoke else (128, 512, 2048)
    budget = 512 if smoke else 16_384
    heads = ["auto"] + (["fused", "triton"] if triton_usable(device) else [])
    results = []
    for name in ("llama-1b", "gemma3-270m"):
        model = bench_gpu.build(name, 1 if smoke else None, device)
        for tokens in lengths:
            for head in heads:
                result = bench_gpu.bench_model(
                    model,
                    name,
                    device,
                    peak,
                    batch=max(1, budget // tokens),
                    tokens=tokens,
                    repeats=1 if smoke else 3,
                    head=head,
                )
                result["head_requested"] = head
                result["matmul_peak_tflops"] = peak / 1e12
                bench_gpu.print_result(result, device)
                results.append(result)
        del model
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return results


def packing(device: torch.device, smoke: bool) -> list[dict[str, object]]:
    model = bench_gpu.build("gemma3-270m", 1 if smoke else None, device)
    loaded = LoadedModel("gemma3-270m (random)", model, bench_gpu.probe_tokenizer())
    return bench_packing.compare(
        loaded,
        docs=64 if smoke else 2048,
        block_rows=32 if smoke else 256,
        repeats=1 if smoke else 3,
        max_tokens=256 if smoke else 2048,
    )


def markdown(summary: dict[str, object]) -> str:
    lines = [
        f"# GPU suite: {summary['device']}, torch {summary['torch']}, transformers "
        f"{summary['transformers']}, {summary['date']}",
        "",
        f"## Per model ({'64' if summary['smoke'] else '512'} tokens, head auto)",
        "",
        "| model | (c)/(a) time | (b)/(c) time | MFU (c) | peak MiB (a) | peak MiB (c) |",
        "|---|---|---|---|---|---|",
    ]
    for name, row in summary["models"].items():
        lines.append(
            f"| {name} | {row['c_over_a']:.3f} | {row['b_over_c']:.1f}x | "
            f"{100 * row['mfu_c']:.1f}% | {row['peak_mem_a_mib']:.0f} | "
            f"{row['peak_mem_c_mib']:.0f} |"
        )
    lines += [
        "",
        "## Speed",
        "",
        "| model | tokens | batch | head | tok/s (a) | tok/s (b) | "
        "tok/s (c) | (c)/(a) | (b)/(c) | MFU (c) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in summary["speed"]:
        lines.append(
            f"| {r['model']} | {r['tokens']} | {r['batch']} | {r['head']} | "
            f"{r['tokens_per_s_a']:.0f} | {r['tokens_per_s_b']:.0f} | {r['tokens_per_s_c']:.0f} | "
            f"{r['c_over_a']:.3f} | {r['b_over_c']:.1f}x | {100 * r['mfu_c']:.1f}% |"
        )
    lines += [
        "",
        "## Correctness against float64",
        "",
        "| path | dtype | V | bias | softcap | max error | tolerance | ok |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in summary["correctness"]:
        lines.append(
            f"| {r['path']} | {r['dtype']} | {r['vocab']} | {r['bias']} | {r['softcap']} | "
            f"{r['max_error']:.2e} | {r['tolerance']:.0e} | {r['ok']} |"
        )
    lines += [
        "",
        "## Device bf16 vs CPU fp32, per-document |delta|",
        "",
        "| column | max | median |",
        "|---|---|---|",
    ]
    for column, gap in summary["cuda_vs_cpu"].items():
        if "max" in gap:
            lines.append(f"| {column} | {gap['max']:.2e} | {gap['median']:.2e} |")
    lines += ["", "## Packing", "", *bench_packing.table(summary["packing"])]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes (a CPU check)")
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    args.out.mkdir(parents=True, exist_ok=True)
    summary: dict[str, object] = {
        "device": torch.cuda.get_device_name(device)
        if device.type == "cuda"
        else platform.processor() or "cpu",
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "date": datetime.date.today().isoformat(),
        "smoke": args.smoke,
    }
    summary["correctness"] = correctness(device, args.smoke)
    summary["cuda_vs_cpu"] = cuda_vs_cpu(device, args.smoke)
    summary["speed"] = speed(device, args.smoke)
    middle = 64 if args.smoke else 512
    summary["models"] = {
        r["model"]: {key: r[key] for key in MODEL_KEYS}
        for r in summary["speed"]
        if r["tokens"] == middle and r["head_requested"] == "auto"
    }
    summary["packing"] = packing(device, args.smoke)
    (args.out / "gpu.json").write_text(json.dumps(summary, indent=2) + "\n")
    (args.out / "gpu.md").write_text(markdown(summary))
    print(markdown(summary))


if __name__ == "__main__":
    main()
