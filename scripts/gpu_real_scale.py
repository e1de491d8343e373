"""Issue 22's measurements at the real shapes on a GPU (scripts/gpu_real_scale.sh runs it).

1. Dream-Coder-7B shape, random bfloat16 weights written as a checkpoint and loaded with
   `Engine.load`: latency of one completion (24-token hole, the editor's default sampler
   settings) and throughput at 1 / 4 / 8 concurrent canvases through the resident engine's
   scheduler (engine.serve.bench.run_level), with torch.compile off and on.
2. DiffusionGemma-26B-A4B shape, random bfloat16 weights built on the GPU: one 256-token
   canvas at batch 1 in 16 denoising steps, through our block loop (engine.models.block) and
   through transformers' `generate` on the same weights, against the memory-bandwidth bound
   (every step reads the decoder's weights, experts included: 256 tokens routed top-8 of 128
   touch all of them). Then the same model at int4 (quantized in place on the GPU, group 64)
   and the same canvas through our loop: weights held, peak memory, tokens/s beside bf16's,
   and which matmul its int4 layers run (`--skip dg-int4` leaves it out).

Every result is written to OUT/real_scale.json as soon as it exists, so a run cut short by
its time limit still returns what it measured; sections that would not fit the time left
are skipped and say so.

    python scripts/gpu_real_scale.py --out DIR [--budget-s 480]      # the GPU run
    python scripts/gpu_real_scale.py --out DIR --rehearse            # truncated, on the CPU
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

H200_BANDWIDTH = 4.8e12  # bytes/s, HBM3e (NVIDIA's H200 data sheet)
HOLE = 24
CANVAS = 256
DG_STEPS = 16


class Run:
    """Results so far, written out after every change; the clock of the whole run."""

    def __init__(self, out: Path, budget_s: float) -> None:
        self.out, self.start, self.budget_s = out, time.monotonic(), budget_s
        self.results: dict[str, Any] = {}
        out.mkdir(parents=True, exist_ok=True)

    def left(self) -> float:
        return self.budget_s - (time.monotonic() - self.start)

    def record(self, key: str, value: Any) -> None:
        self.results[key] = value
        (self.out / "real_scale.json").write_text(json.dumps(self.results, indent=2))
        print(f"[{time.monotonic() - self.start:6.1f} s] {key}: {json.dumps(value)}",
              flush=True)


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def timed(device: str, fn: Any) -> tuple[Any, float]:
    sync(device)
    start = time.perf_counter()
    result = fn()
    sync(device)
    return result, time.perf_counter() - start


def dream_section(run: Run, device: str, layers: int, requests: int, clients: list[int],
                  compile_modes: list[bool], work: Path) -> None:
    from engine import Engine
    from engine.decode.families import compile_model
    from engine.serve.bench import cursor_cases, run_level
    from engine.types import SamplerSettings
    from tests.support.published_configs import write_real_shape

    folder = work / f"dream-coder-7b-L{layers}"
    _, write_s = timed(device, lambda: write_real_shape(folder, "dream-coder-7b", layers,
                                                        device=device))
    engine, load_s = timed(device, lambda: Engine.load(str(folder), device=device,
                                                       dtype="bfloat16"))
    run.record("dream.load", {"layers": layers, "write_s": round(write_s, 1),
                              "load_s": round(load_s, 1), **gpu_memory(device)})
    cases = cursor_cases(max(requests, 6))
    settings = SamplerSettings()
    for compiled in compile_modes:
        label = "compile" if compiled else "eager"
        if compiled:
            compile_model(engine.model)
        # First passes: allocations, and for compile the graphs of the first shapes.
        _, warm_s = timed(device, lambda: engine.infill(*cases[0], HOLE, settings=settings))
        latencies, steps = [], []
        for prefix, suffix in cases[1:6]:
            result, seconds = timed(device, lambda p=prefix, s=suffix: engine.infill(
                p, s, HOLE, settings=settings))
            latencies.append(seconds)
            steps.append(result.steps)
        run.record(f"dream.{label}.latency", {
            "warmup_s": round(warm_s, 1), "p50_ms": round(1000 * statistics.median(latencies), 1),
            "steps_p50": statistics.median(steps), "hole": HOLE})
        for n in clients:
            if run.left() < 30:
                run.record(f"dream.{label}.clients{n}", "skipped: out of time")
                continue
            run.record(f"dream.{label}.clients{n}",
                       run_level(engine, cases[:requests], n, 8, HOLE, settings))


def gpu_memory(device: str) -> dict[str, float]:
    if not device.startswith("cuda"):
        return {}
    return {"gpu_allocated_gb": round(torch.cuda.max_memory_allocated() / 1e9, 2)}


def reset_peak(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()


def gpu_peak(device: str) -> dict[str, float]:
    """The peak GPU memory since `reset_peak`."""
    if not device.startswith("cuda"):
        return {}
    return {"gpu_peak_gb": round(torch.cuda.max_memory_allocated() / 1e9, 2)}


def dg_section(run: Run, device: str, layers: int | None, experts: int | None,
               steps: int, int4: bool = True) -> None:
    import transformers

    from engine.models.block import denoise_block
    from engine.models.checkpoint import Checkpoint
    from engine.models.config import config_from_hf
    from engine.serve.bench import cursor_cases
    from engine.text.tokenizer import Tokenizer
    from engine.types import SamplerSettings
    from tests.support.published_configs import PUBLISHED, PUBLISHED_GENERATION, truncated_config
    from tests.support.tiny_checkpoints import tiny_tokenizer

    name = "diffusiongemma-26b-a4b"
    raw = truncated_config(name, layers, experts) if layers else PUBLISHED[name]
    config = transformers.DiffusionGemmaConfig(**{k: v for k, v in raw.items()
                                                  if k not in ("architectures", "model_type")})
    torch.manual_seed(0)
    with torch.device(device):
        model, build_s = timed(device, lambda: transformers.DiffusionGemmaForBlockDiffusion
                               ._from_config(config, dtype=torch.bfloat16).eval())
    # A random model's mean entropy never gets this low (transformers refuses 0), so every
    # canvas runs all `steps` steps, in our loop and in generate alike.
    generation = {**PUBLISHED_GENERATION[name], "max_denoising_steps": steps,
                  "confidence_threshold": 1e-9}
    model.generation_config = transformers.DiffusionGemmaGenerationConfig(**generation)
    ckpt = Checkpoint(path=Path("."), config=config_from_hf(raw), raw_config=raw,
                      generation_config=generation, tokenizer=Tokenizer(tiny_tokenizer()))
    prefix, suffix = cursor_cases(1)[0]
    prefix_ids = ckpt.tokenizer.encode(prefix)[-192:]
    suffix_ids = ckpt.tokenizer.encode(suffix)[:48]
    settings = SamplerSettings(sampler="entropy", gamma=0.1, seed=0)

    def ours() -> list[Any]:
        return list(denoise_block(model, ckpt, prefix_ids, suffix_ids, CANVAS, settings))

    def reference() -> Any:
        from engine.models.block import fim_prompt_ids

        prompt = torch.tensor([fim_prompt_ids(ckpt, prefix_ids, suffix_ids)], device=device)
        return model.generate(prompt, max_new_tokens=CANVAS)

    decoder_bytes = sum(p.numel() * p.element_size()
                        for n, p in model.named_parameters() if "vision" not in n)
    bound_step_s = decoder_bytes / H200_BANDWIDTH
    run.record("dg.build", {"layers": config.text_config.num_hidden_layers,
                            "experts": config.text_config.num_experts,
                            "build_s": round(build_s, 1),
                            "weights_gb": round(decoder_bytes / 1e9, 2), **gpu_memory(device)})
    with torch.inference_mode():
        timed(device, ours)  # warm-up: kernels, allocator
        reset_peak(device)
        drafts, ours_s = timed(device, ours)
        run.record("dg.ours", {"steps": drafts[-1].step, "seconds": round(ours_s, 3),
                               "canvas_tok_s": round(CANVAS / ours_s, 1),
                               "ms_per_step": round(1000 * ours_s / drafts[-1].step, 2),
                               **gpu_peak(device)})
        if run.left() < 2 * ours_s + 20:
            run.record("dg.transformers", "skipped: out of time")
        else:
            timed(device, reference)
            _, ref_s = timed(device, reference)
            run.record("dg.transformers", {"seconds": round(ref_s, 3),
                                           "canvas_tok_s": round(CANVAS / ref_s, 1)})
    run.record("dg.bandwidth_bound", {
        "bytes_per_step_gb": round(decoder_bytes / 1e9, 2),
        "ms_per_step": round(1000 * bound_step_s, 2),
        "canvas_tok_s": round(CANVAS / (steps * bound_step_s), 1),
        "assumes": "H200 4.8 TB/s; every step reads all decoder weights"})
    if not int4:
        return
    if run.left() < 2 * ours_s + 60:
        run.record("dg.int4", "skipped: out of time")
        return
    dg_int4(run, device, model, ours)


def dg_int4(run: Run, device: str, model: Any, ours: Any) -> None:
    """The same model at int4 (engine.models.int4, the layers `--dtype int4` quantizes, in
    place on the device), then the same canvas: the memory it holds, the run's peak, and
    tokens/s beside bf16's. Quantizing in place holds the bf16 model until it ends (about
    68 GB at the full shape: an H200 only); `--dtype int4` quantizes while loading instead."""
    from collections import Counter

    from engine.models.int4 import DEFAULT_GROUP_SIZE, Int4Linear, quantize_int4

    with torch.no_grad():
        kept, quantize_s = timed(device, lambda: quantize_int4(
            model, DEFAULT_GROUP_SIZE, torch.device(device), torch.bfloat16))
    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    held = {t.data_ptr(): t.numel() * t.element_size()
            for t in [*model.parameters(), *model.buffers()]}
    # Which matmul each int4 layer runs: "cuda" is the packed op, "dequantize" the fallback.
    kernels = Counter(m.kernel for m in model.modules() if isinstance(m, Int4Linear))
    run.record("dg.int4.quantize", {"quantize_s": round(quantize_s, 1),
                                    "weights_gb": round(sum(held.values()) / 1e9, 2),
                                    "kernels": dict(kernels), "kept_float": kept,
                                    **gpu_memory(device)})
    with torch.inference_mode():
        timed(device, ours)  # warm-up: the int4 kernels' first calls
        reset_peak(device)
        drafts, seconds = timed(device, ours)
    run.record("dg.int4.ours", {"steps": drafts[-1].step, "seconds": round(seconds, 3),
                                "canvas_tok_s": round(CANVAS / seconds, 1),
                                "ms_per_step": round(1000 * seconds / drafts[-1].step, 2),
                                **gpu_peak(device)})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--work", type=Path, default=Path("/tmp/dg-real-scale"))
    parser.add_argument("--budget-s", type=float, default=480)
    parser.add_argument("--rehearse", action="store_true",
                        help="the CPU rehearsal: 1 layer, 4 experts, 2 steps, 2 requests")
    parser.add_argument("--skip", nargs="*", default=[], choices=["dream", "dg", "dg-int4"])
    args = parser.parse_args(argv)

    run = Run(args.out, args.budget_s)
    if args.rehearse:
        device, dream_layers, dg_layers, dg_experts, steps = "cpu", 1, 1, 4, 2
        requests, clients, compile_modes = 2, [1, 2], [False]
    else:
        device, dream_layers, dg_layers, dg_experts, steps = "cuda", 28, None, None, DG_STEPS
        requests, clients, compile_modes = 16, [1, 4, 8], [False, True]
    run.record("machine", {
        "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
        "torch": torch.__version__, "rehearsal": args.rehearse})
    status = 0
    # Each section's rough need on an H200 (seconds), to skip what cannot finish in time.
    for section, need, fn in [
        ("dream", 150, lambda: dream_section(run, device, dream_layers, requests, clients,
                                             compile_modes, args.work)),
        ("dg", 90, lambda: dg_section(run, device, dg_layers, dg_experts, steps,
                                      int4="dg-int4" not in args.skip)),
    ]:
        if section in args.skip:
            continue
        if run.left() < (5 if args.rehearse else need):
            run.record(section, f"skipped: {run.left():.0f} s left")
            continue
        try:
            fn()
        except Exception as exc:  # one section's failure must not cost the other's numbers
            run.record(f"{section}.error", f"{type(exc).__name__}: {exc}")
            status = 1
        gc.collect()  # the section's models are gone with its frame
        if device == "cuda":
            torch.cuda.empty_cache()
    return status


if __name__ == "__main__":
    sys.exit(main())
