"""Every GPU check and benchmark in one command, each part in a fresh process, each part's
results written the moment it finishes; then gpu.json and gpu.md from whatever parts exist.

Parts (``--parts``, default all; ``--smoke`` runs tiny sizes, a CPU check of the script):

* ``correctness`` -- the Triton kernel, cuBLAS chunks + Triton row pass, and torch tiles
  against a float64 reference of the same (rounded) inputs, at V = 262,144 with softcap, with
  bias, and with V not a multiple of any tile. fp32 inputs: within 1e-4 relative. bf16: within
  2^-7 of the largest |logit| (a bf16 logit carries up to 2^-9 of its magnitude in rounding;
  log p and the moments mix a few such errors);
* ``cuda_vs_cpu`` -- `DocumentScorer` on the device (dtype auto) against CPU fp32 on the same
  random smollm2-shaped model: per-document |delta| of every column;
* ``head`` -- the head alone on 16,384 rows at the llama-1b, gemma3-270m and llama-8b
  shapes: each fused path's time over the cuBLAS product alone (target <= 1.15);
* ``speed:MODEL`` (llama-1b, gemma3-270m) -- `bench_gpu` (a) bare forward, (b) reference
  loop, (c) scorer at 128, 512 and 2,048 tokens, head auto with the body eager and compiled;
* ``packing`` -- `bench_packing` padding shares and tokens/s, packing off and on;
* ``end_to_end`` -- `score_texts` on 100,000 synthetic documents of log-uniform byte lengths
  (16-1,024) with a random llama-1b over a byte-level tokenizer, every default (dtype, batch
  size, head, compile: auto), against the scorer alone on the same documents tokenised
  beforehand and a bare forward of the same model: tokens/s, their ratios, and tokens per
  GPU-hour;
* ``pipeline`` (needs Ray) -- `minkscan score` on 20,000 of those documents in Parquet shards,
  one GPU actor: tokens/s while scoring, over the in-process figure, and per GPU-hour.

    bash benchmarks/gpu_wheels.sh        # here, once: the wheels the GPU machine lacks (.whl/)
    # on the GPU machine (the device tool, carrying .whl):
    python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl &&
      PYTHONPATH=/tmp/site:pipeline python3 benchmarks/gpu_suite.py --out $OUT --parts head
    python3 benchmarks/gpu_suite.py --assemble OUT1 OUT2 ... --out benchmarks/results
    .venv/bin/python benchmarks/gpu_suite.py --out /tmp/suite --smoke   # CPU: tiny sizes

Within a 15-minute lease: ``--documents 20000 --pipeline-documents 10000 --compile-tokens 512``.

gpu.json holds device, torch, transformers, date; per model (512 tokens, head auto, body
eager) c_over_a, b_over_c, mfu_c, peak_mem_a_mib, peak_mem_c_mib; ``end_to_end`` with
in_process_over_bare, in_process_over_scorer, pipeline_over_in_process and tokens_per_gpu_hour
(1B model); then every part in full.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
PARTS = ("correctness", "cuda_vs_cpu", "head", "speed:llama-1b", "speed:gemma3-270m",
         "packing", "end_to_end", "pipeline")  # fmt: skip
FIELDS = ("target_logprob", "mean_logprob", "std_logprob", "top1_logprob")
TOLERANCE = {"float32": 1e-4, "bfloat16": 2**-7}
MODEL_KEYS = ("c_over_a", "b_over_c", "mfu_c", "peak_mem_a_mib", "peak_mem_c_mib")
HEAD_SHAPES = {  # rows x hidden -> vocabulary, as the models' heads see them
    "llama-1b": (2048, 128_256, None),
    "gemma3-270m": (640, 262_144, 30.0),
    "llama-8b": (4096, 128_256, None),
}


def device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


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


def max_error(stats, reference: dict[str, torch.Tensor], dtype: str) -> float:
    """Largest error over the four statistics: relative to each value (at least 1) for
    float32 inputs, relative to the largest |logit| for bf16 inputs."""
    errors = []
    for field in FIELDS:
        value, expected = getattr(stats, field).double().cpu(), reference[field].cpu()
        scale = expected.abs().clamp_min(1.0) if dtype == "float32" else reference["logit_scale"]
        errors.append(((value - expected).abs() / scale.cpu()).max().item())
    return max(errors)


def head_paths(dev: torch.device) -> dict[str, object]:
    """Each fused head reduction the device runs, as fn(hidden, weight, targets, bias, softcap)."""
    from minkscan.kernels.fused_head import token_stats_chunked, token_stats_triton, triton_usable
    from minkscan.scoring.token_stats import token_stats_from_hidden

    paths = {
        "torch tiles": lambda h, w, t, b, s: token_stats_from_hidden(
            h, w, t, bias=b, softcap=s, row_chunk=4096, vocab_chunk=w.shape[0]
        )
    }
    if triton_usable(dev):
        paths["triton"] = lambda h, w, t, b, s: token_stats_triton(h, w, t, bias=b, softcap=s)
        paths["chunked"] = lambda h, w, t, b, s: token_stats_chunked(
            h, w, t, row_chunk=8192, bias=b, softcap=s
        )
    return paths


def correctness(smoke: bool) -> list[dict[str, object]]:
    dev = device()
    cases = [(262_144, 640, False, 30.0), (50_257, 768, True, None), (49_152, 576, False, None)]
    if smoke:
        cases = [(3_001, 64, True, 30.0), (2_048, 64, False, None)]
    rows = 64 if smoke else 512
    results = []
    generator = torch.Generator().manual_seed(0)
    for vocab, width, with_bias, softcap in cases:
        for dtype in (torch.float32, torch.bfloat16):
            hidden = torch.randn(rows, width, generator=generator).to(dev, dtype)
            weight = (torch.randn(vocab, width, generator=generator) / width**0.5 * 3).to(
                dev, dtype
            )
            bias = torch.randn(vocab, generator=generator).to(dev, dtype) if with_bias else None
            targets = torch.randint(0, vocab, (rows,), generator=generator).to(dev)
            reference = reference_stats(hidden, weight, targets, bias, softcap)
            dtype_name = str(dtype).removeprefix("torch.")
            for path, function in head_paths(dev).items():
                error = max_error(function(hidden, weight, targets, bias, softcap), reference,
                                  dtype_name)  # fmt: skip
                results.append({"path": path, "dtype": dtype_name, "vocab": vocab,
                                "bias": with_bias, "softcap": softcap, "max_error": error,
                                "tolerance": TOLERANCE[dtype_name],
                                "ok": error <= TOLERANCE[dtype_name]})  # fmt: skip
    return results


def cuda_vs_cpu(smoke: bool) -> dict[str, dict[str, float]]:
    """Per column: max and median per-document |scores on device (dtype auto) - CPU fp32|."""
    import bench_gpu
    from minkscan.config import ScoringConfig
    from minkscan.models.loading import LoadedModel, resolve_dtype
    from minkscan.scorer import DocumentScorer
    from minkscan.text.tokenize import EncodedDocument

    dev = device()
    torch.manual_seed(0)
    model = bench_gpu.architecture("smollm2-135m", 2 if smoke else None).eval()
    generator = torch.Generator().manual_seed(1)
    documents = [
        EncodedDocument("", tuple(torch.randint(64, 49_152, (n,), generator=generator).tolist()),
                        "ok")
        for n in torch.randint(16, 64 if smoke else 512, (8 if smoke else 64,), generator=generator)
    ]  # fmt: skip
    tokenizer = bench_gpu.probe_tokenizer()
    expected = DocumentScorer(LoadedModel("cpu", model, tokenizer), ScoringConfig())
    expected = expected.score_documents(documents)
    moved = model.to(device=dev, dtype=resolve_dtype("auto", dev))
    actual = DocumentScorer(LoadedModel("device", moved, tokenizer), ScoringConfig())
    scores = actual.score_documents(documents)
    result = {}
    for column in actual.columns:
        gaps = torch.tensor([abs(a - b) for a, b in zip(scores[column], expected[column],
                                                        strict=True)])  # fmt: skip
        result[column] = {"max": gaps.max().item(), "median": gaps.median().item()}
    result["head"] = {"path": actual.head_path, "dtype": str(moved.dtype)}
    return result


def timed(function, repeats: int = 5) -> float:
    """Median seconds of ``function`` after a warm-up call."""
    function()
    times = []
    for _ in range(repeats):
        sync()
        start = time.perf_counter()
        function()
        sync()
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]


def head(smoke: bool) -> list[dict[str, object]]:
    """Each fused head path's time over the bare cuBLAS product of the same shapes."""
    results = []
    for name, (hidden_size, vocab, softcap) in HEAD_SHAPES.items():
        if smoke:
            hidden_size, vocab = hidden_size // 16, vocab // 64
        results.append(head_row(name, 256 if smoke else 16_384, hidden_size, vocab, softcap))
        print(json.dumps(results[-1]), flush=True)
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    return results


def head_row(name: str, rows: int, hidden_size: int, vocab: int, softcap: float | None):
    dev = device()
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    hidden = torch.randn(rows, hidden_size, device=dev, dtype=dtype)
    weight = torch.randn(vocab, hidden_size, device=dev, dtype=dtype) / hidden_size**0.5
    targets = torch.randint(0, vocab, (rows,), device=dev)
    product = timed(lambda: hidden @ weight.T)
    row = {"model": name, "rows": rows, "hidden": hidden_size, "vocab": vocab,
           "cublas_ms": 1e3 * product}  # fmt: skip
    for path, function in head_paths(dev).items():
        seconds = timed(lambda f=function: f(hidden, weight, targets, None, softcap))
        row[f"{path}_ms"] = 1e3 * seconds
        row[f"{path}_over_cublas"] = seconds / product
    return row


def speed(name: str, smoke: bool, compile_tokens: tuple[int, ...] | None = None):
    """`bench_gpu` at each length, the body eager, and compiled at ``compile_tokens``
    (default: every length; each compiled shape costs 20-40 s of compilation)."""
    import bench_gpu

    dev = device()
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    peak = bench_gpu.matmul_peak_flops(dev, dtype)
    lengths = (32, 64) if smoke else (128, 512, 2048)
    budget = 512 if smoke else 16_384
    model = bench_gpu.build(name, 1 if smoke else None, dev)
    results = []
    for tokens in lengths:
        for compile_body in (False, True):
            if compile_body and compile_tokens is not None and tokens not in compile_tokens:
                continue
            result = bench_gpu.bench_model(model, name, dev, peak, batch=max(1, budget // tokens),
                                           tokens=tokens, repeats=1 if smoke else 3,
                                           compile_body=compile_body)  # fmt: skip
            result |= {"compile": compile_body, "matmul_peak_tflops": peak / 1e12}
            bench_gpu.print_result(result, dev)
            results.append(result)
    return results


def packing(smoke: bool) -> list[dict[str, object]]:
    import bench_gpu
    import bench_packing
    from minkscan.models.loading import LoadedModel

    dev = device()
    model = bench_gpu.build("gemma3-270m", 1 if smoke else None, dev)
    loaded = LoadedModel("gemma3-270m (random)", model, bench_gpu.probe_tokenizer())
    return bench_packing.compare(loaded, docs=64 if smoke else 2048,
                                 block_rows=32 if smoke else 256, repeats=1 if smoke else 3,
                                 max_tokens=256 if smoke else 2048)  # fmt: skip


def random_1b(smoke: bool):
    """A random llama-1b (--smoke: one layer of smollm2-135m's shape) over a byte-level
    tokenizer, on the device in the dtype auto picks, as a `LoadedModel`."""
    import bench_gpu
    import synthetic
    from minkscan.models.loading import LoadedModel, resolve_dtype

    dev = device()
    torch.manual_seed(0)
    with dev:
        model = bench_gpu.architecture(
            "smollm2-135m" if smoke else "llama-1b", 1 if smoke else None
        )
    model = model.to(dtype=resolve_dtype("auto", dev)).eval()
    return LoadedModel("llama-1b (random)", model, synthetic.byte_tokenizer())


def corpus(smoke: bool, count: int | None = None) -> list[str]:
    import synthetic

    return synthetic.texts(count or (200 if smoke else 100_000), shortest=16, longest=1024)


def bare_tokens_per_second(loaded, tokens: int, batch: int) -> float:
    """A bare forward of the model returning full logits, on random ids (the floor)."""
    ids = torch.randint(64, 256, (batch, tokens), device=loaded.device)

    def forward() -> None:
        with torch.inference_mode():
            loaded.model(input_ids=ids).logits  # noqa: B018 - the work measured

    return batch * tokens / timed(forward, repeats=3)


def end_to_end(smoke: bool, documents: int | None = None) -> dict[str, object]:
    """`score_texts` over the corpus, against the scorer's own speed on the same documents
    tokenised beforehand (one `submit`, one read: no tokenising, no chunking) and a bare
    forward returning logits."""
    from minkscan.config import ScoringConfig
    from minkscan.scorer import DocumentScorer, expected_tokens, score_texts

    loaded = random_1b(smoke)
    texts = corpus(smoke, documents)
    score_texts(texts[:256], loaded)  # warm-up: probes, kernels
    sync()
    start = time.perf_counter()
    frame = score_texts(texts, loaded)
    sync()
    seconds = time.perf_counter() - start
    tokens = int(frame["n_tokens"].sum()) + frame.height  # positions run: scored + first
    rate = tokens / seconds
    # Told what score_texts tells its scorer, so both make the same choice about compiling.
    scorer = DocumentScorer(loaded, ScoringConfig(), expected_tokens=expected_tokens(texts))
    encoded = scorer.encode(texts)
    sync()
    start = time.perf_counter()
    scorer.submit(encoded).result()
    sync()
    scorer_rate = tokens / (time.perf_counter() - start)
    bare = bare_tokens_per_second(loaded, tokens=512, batch=4 if smoke else 64)
    return {"documents": len(texts), "tokens": tokens, "seconds": seconds,
            "tokens_per_s": rate, "scorer_tokens_per_s": scorer_rate,
            "in_process_over_scorer": rate / scorer_rate,
            "bare_tokens_per_s": bare, "in_process_over_bare": rate / bare,
            "tokens_per_gpu_hour": rate * 3600}  # fmt: skip


def pipeline(smoke: bool, documents: int | None = None) -> dict[str, object]:
    """`minkscan score` through Ray Data with one GPU actor (needs Ray)."""
    if importlib.util.find_spec("ray") is None:
        return {"skipped": "ray is not installed on this machine"}
    import pyarrow as pa
    import pyarrow.parquet as pq
    from minkscan.config import build_config
    from minkscan.distributed.runner import run_scoring
    from minkscan.scorer import score_texts

    loaded = random_1b(smoke)
    texts = corpus(smoke, 100 if smoke else documents or 20_000)
    work = Path(tempfile.mkdtemp(prefix="gpu-suite-"))
    loaded.model.save_pretrained(work / "model")
    loaded.tokenizer.save_pretrained(work / "model")
    (work / "in").mkdir()
    for shard in range(8):
        pq.write_table(pa.table({"text": texts[shard::8]}), work / "in" / f"{shard}.parquet")
    sync()
    start = time.perf_counter()
    frame = score_texts(texts, loaded)
    sync()
    in_process = (int(frame["n_tokens"].sum()) + frame.height) / (time.perf_counter() - start)
    del loaded
    torch.cuda.empty_cache() if torch.cuda.is_available() else None
    gpus = 1 if torch.cuda.is_available() else 0
    config = build_config(
        {},
        {
            "model.name": str(work / "model"),
            "data.input": [str(work / "in")],
            "data.output": str(work / "out"),
            "ray.gpus_per_actor": gpus,
        },
    )
    start = time.perf_counter()
    summary = run_scoring(config)
    wall = time.perf_counter() - start
    positions = summary.tokens + summary.documents
    scoring_rate = positions / summary.seconds
    actor_s = sum(summary.pass_seconds.values())  # the scoring actor's compute alone
    return {"documents": summary.documents, "tokens": positions, "wall_s": wall,
            "scoring_s": summary.seconds, "tokens_per_s": scoring_rate,
            "actor_compute_s": actor_s,
            "tokens_per_actor_s": positions / actor_s if actor_s else None,
            "fixed_s": wall - actor_s,  # Ray's start, actor start-up, model load, probes, tail
            "in_process_tokens_per_s": in_process,
            "pipeline_over_in_process": scoring_rate / in_process,
            "tokens_per_gpu_hour": scoring_rate * 3600,
            "tokens_per_gpu_hour_wall": positions / wall * 3600}  # fmt: skip


def run_part(part: str, args: argparse.Namespace) -> object:
    if part.startswith("speed:"):
        return speed(part.split(":", 1)[1], args.smoke, args.compile_tokens)
    if part == "end_to_end":
        return end_to_end(args.smoke, args.documents)
    if part == "pipeline":
        return pipeline(args.smoke, args.pipeline_documents)
    return globals()[part](args.smoke)


def part_file(out: Path, part: str) -> Path:
    return out / "parts" / f"{part.replace(':', '-')}.json"


def machine() -> dict[str, object]:
    import transformers

    dev = device()
    return {
        "device": torch.cuda.get_device_name(dev) if dev.type == "cuda"
        else platform.processor() or "cpu",
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "date": datetime.date.today().isoformat(),
    }  # fmt: skip


def assemble(directories: list[Path], out: Path) -> dict[str, object]:
    """gpu.json and gpu.md from every part file found under ``directories``."""
    parts: dict[str, object] = {}
    facts: dict[str, object] = {}
    for directory in directories:
        for path in sorted((directory / "parts").glob("*.json")):
            record = json.loads(path.read_text())
            facts = facts or record["machine"]
            parts[record["part"]] = record
    summary: dict[str, object] = {**facts, "parts": sorted(parts)}
    speed_rows = [r for key, p in parts.items() if key.startswith("speed:")
                  for r in p.get("result") or []]  # fmt: skip
    middle = min((r["tokens"] for r in speed_rows), default=0, key=lambda t: abs(t - 512))
    summary["models"] = {
        r["model"]: {key: r[key] for key in MODEL_KEYS}
        for r in speed_rows if r["tokens"] == middle and not r["compile"]
    }  # fmt: skip
    e2e = (parts.get("end_to_end") or {}).get("result") or {}
    pipe = (parts.get("pipeline") or {}).get("result") or {}
    summary["end_to_end"] = {
        "in_process_over_bare": e2e.get("in_process_over_bare"),
        "in_process_over_scorer": e2e.get("in_process_over_scorer"),
        "pipeline_over_in_process": pipe.get("pipeline_over_in_process"),
        "tokens_per_gpu_hour": pipe.get("tokens_per_gpu_hour") or e2e.get("tokens_per_gpu_hour"),
        "in_process": e2e,
        "pipeline": pipe,
    }
    for key, record in parts.items():
        if key not in ("end_to_end", "pipeline"):  # in summary["end_to_end"]
            summary[key] = record.get("result", record)
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    (out / "gpu.md").write_text(markdown(summary))
    return summary


def _fmt(value: object, pattern: str = "{:.3f}") -> str:
    return "-" if value is None else pattern.format(value)


def _compiled(row: dict[str, object]) -> str:
    """Whether (c) ran a compiled body: asked for and kept, asked for and dropped by the
    start-up check (less right than the eager body against float32, or not faster), or not
    asked; with the check's figures where it ran."""
    if not row["compile"]:
        return "no"
    said = "asked, ran eager" if row.get("body_compiled") is False else "yes"
    for decision in dict(row.get("body_decisions") or {}).values():
        if "compiled_error" in decision:
            said += (f" (error vs fp32 {decision['compiled_error']:.2g}, eager's "
                     f"{decision['eager_error']:.2g})")  # fmt: skip
            break
    return said


def _ratio(record: dict[str, object], top: str, bottom: str) -> float | None:
    return record[top] / record[bottom] if record.get(top) and record.get(bottom) else None


def _times(value: float | None, factor: float) -> float | None:
    return None if value is None else value * factor


def markdown(summary: dict[str, object]) -> str:
    lines = [f"# GPU suite: {summary.get('device')}, torch {summary.get('torch')}, "
             f"transformers {summary.get('transformers')}, {summary.get('date')}", "",
             f"Parts measured: {', '.join(summary['parts'])}.", ""]  # fmt: skip
    e2e = summary["end_to_end"]
    lines += ["## End to end (random llama-1b, byte-level tokens)", "",
              "| documents: in-process / pipeline | in-process / bare forward "
              "| in-process / scorer alone | pipeline / in-process "
              "| pipeline actor's compute / in-process "
              "| tokens per GPU-hour: pipeline run / its actor's compute "
              "| fixed cost s (target < 10) |",
              "|---|---|---|---|---|---|---|",
              f"| {e2e['in_process'].get('documents', '-')} / "
              f"{e2e['pipeline'].get('documents', '-')}"
              f" | {_fmt(e2e['in_process_over_bare'])} "
              f"| {_fmt(e2e.get('in_process_over_scorer'))} "
              f"| {_fmt(e2e['pipeline_over_in_process'])} "
              f"| {_fmt(_ratio(e2e['pipeline'], 'tokens_per_actor_s', 'in_process_tokens_per_s'))}"
              f" | {_fmt(e2e['tokens_per_gpu_hour'], '{:.3g}')} / "
              f"{_fmt(_times(e2e['pipeline'].get('tokens_per_actor_s'), 3600), '{:.3g}')} "
              f"| {_fmt(e2e['pipeline'].get('fixed_s'), '{:.1f}')} |",
              "", "The pipeline's run seconds include Ray's start, the actor's model load and "
              "its start-up probes; its actor's compute seconds are the scoring alone, and the "
              "fixed cost is the run's wall seconds less those. The "
              "scorer alone scores the same documents tokenised beforehand, in one call.",
              ""]  # fmt: skip
    if "head" in summary:
        paths = sorted({k[:-3] for r in summary["head"] for k in r if k.endswith("_ms")
                        and k != "cublas_ms"})  # fmt: skip
        lines += ["## Head alone, over the cuBLAS product (target <= 1.15)", "",
                  "| shape | rows | cuBLAS ms | " + " | ".join(paths) + " |",
                  "|---|---|---|" + "---|" * len(paths)]  # fmt: skip
        for r in summary["head"]:
            cells = " | ".join(_fmt(r.get(f"{p}_over_cublas"), "{:.2f}x") for p in paths)
            lines.append(f"| {r['model']} | {r['rows']} | {r['cublas_ms']:.1f} | {cells} |")
        lines.append("")
    speed_rows = [r for key in summary["parts"] if key.startswith("speed:")
                  for r in summary[key] or []]  # fmt: skip
    if speed_rows:
        lines += ["## Speed", "",
                  "| model | tokens | batch | head | compiled | tok/s (a) | tok/s (c) | (c)/(a) "
                  "| (b)/(c) | MFU (c) | peak MiB (a) / (c) |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
        for r in speed_rows:
            lines.append(
                f"| {r['model']} | {r['tokens']} | {r['batch']} | {r['head']} | {_compiled(r)} "
                f"| {r['tokens_per_s_a']:.0f} | {r['tokens_per_s_c']:.0f} | {r['c_over_a']:.3f}"
                f" | {r['b_over_c']:.1f}x | {100 * r['mfu_c']:.1f}% | "
                f"{r['peak_mem_a_mib']:.0f} / {r['peak_mem_c_mib']:.0f} |"
            )
        lines.append("")
    if "correctness" in summary:
        lines += ["## Correctness against float64", "",
                  "| path | dtype | V | bias | softcap | max error | tolerance | ok |",
                  "|---|---|---|---|---|---|---|---|"]  # fmt: skip
        for r in summary["correctness"]:
            lines.append(f"| {r['path']} | {r['dtype']} | {r['vocab']} | {r['bias']} | "
                         f"{r['softcap']} | {r['max_error']:.2e} | {r['tolerance']:.0e} | "
                         f"{r['ok']} |")  # fmt: skip
        lines.append("")
    if "cuda_vs_cpu" in summary:
        lines += ["## Device (dtype auto) vs CPU fp32, per-document |delta|", "",
                  "| column | max | median |", "|---|---|---|"]  # fmt: skip
        for column, gap in summary["cuda_vs_cpu"].items():
            if "max" in gap:
                lines.append(f"| {column} | {gap['max']:.2e} | {gap['median']:.2e} |")
        lines.append("")
    if "packing" in summary:
        import bench_packing

        lines += ["## Packing", "", *bench_packing.table(summary["packing"]), ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--parts", nargs="+", default=list(PARTS), choices=PARTS)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes (a CPU check)")
    parser.add_argument("--documents", type=int, help="end_to_end's documents (100,000)")
    parser.add_argument("--pipeline-documents", type=int, help="pipeline's documents (20,000)")
    parser.add_argument(
        "--compile-tokens",
        type=int,
        nargs="*",
        help="the lengths speed also times with the body compiled (all)",
    )
    parser.add_argument(
        "--assemble",
        type=Path,
        nargs="+",
        metavar="DIR",
        help="only write gpu.json / gpu.md from the parts under these",
    )
    parser.add_argument("--part", help=argparse.SUPPRESS)  # one part, in this process
    args = parser.parse_args()
    sys.path.insert(0, str(HERE))
    if args.assemble:
        print(markdown(assemble(args.assemble, args.out)))
        return
    if args.part:
        record: dict[str, object] = {"part": args.part, "machine": machine(),
                                     "smoke": args.smoke}  # fmt: skip
        started = time.perf_counter()
        try:
            record["result"] = run_part(args.part, args)
        except Exception as error:  # noqa: BLE001 - recorded; the suite goes on
            record["error"] = f"{type(error).__name__}: {error}"
            record["traceback"] = traceback.format_exc()
        record["seconds"] = time.perf_counter() - started
        path = part_file(args.out, args.part)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(record, indent=2, default=str) + "\n")
        print(f"part {args.part}: {'error' if 'error' in record else 'done'} in "
              f"{record['seconds']:.0f} s -> {path}", flush=True)  # fmt: skip
        return
    for part in args.parts:  # each in a fresh process: nothing one leaves behind slows the next
        command = [sys.executable, __file__, "--out", str(args.out), "--part", part,
                   *(["--smoke"] if args.smoke else []),
                   *(["--documents", str(args.documents)] if args.documents else []),
                   *(["--pipeline-documents", str(args.pipeline_documents)]
                     if args.pipeline_documents else []),
                   *(["--compile-tokens", *map(str, args.compile_tokens)]
                     if args.compile_tokens is not None else [])]  # fmt: skip
        subprocess.run(command, env=os.environ | {"PYTHONUNBUFFERED": "1"}, check=False)
    print(markdown(assemble([args.out], args.out)))


if __name__ == "__main__":
    main()
