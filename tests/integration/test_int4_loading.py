"""int4 quantized while loading: real-layout checkpoints in bfloat16 and several shard files (a
Dream one, Qwen2 tensor names, about 240 MB; a DiffusionGemma one written by transformers,
experts included, about 250 MB) load at int4 with the host's peak memory bounded by the
largest shard plus the quantized model plus a stated margin, below the model's 16-bit size.

Measured in a process of its own: its peak resident memory (VmHWM, reset just before the load;
not getrusage, whose peak survives exec and so starts at the forking test process's) against
its resident memory just before the load."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.support.paths import ROOT
from tests.support.tiny_checkpoints import write_dream_checkpoint

# What loading may hold beyond the largest shard and the quantized model: one read block
# (engine.models.checkpoint.QUANTIZE_READ_BYTES), the float32 temporaries of quantizing one
# block of engine.models.int4.QUANTIZE_BLOCK weights, and one matrix's quantized parts while
# they are concatenated.
MARGIN = 64 << 20

MEASURE = """
import json, sys
from engine.decode.families import decoder_for
from engine.models.checkpoint import read_checkpoint

def status(key):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(key))

ckpt = read_checkpoint(sys.argv[1])
if ckpt.config.family == "block":  # imported before the baseline: transformers is large
    from engine.models.block import _transformers
    _transformers()
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # the peak (VmHWM) starts again from what is resident now
before = status("VmRSS:")
model, _ = decoder_for(ckpt.config.family).load_model(ckpt, "cpu", "int4", False)
tensors = list(model.parameters()) + list(model.buffers())
print(json.dumps({"growth": status("VmHWM:") - before,
                  "held": sum(t.numel() * t.element_size() for t in tensors)}))
"""


def _load_peak(folder: Path) -> tuple[int, int, int]:
    """(peak growth, bound, the weights' 16-bit size) of loading `folder` at int4."""
    shards = list(folder.glob("model-*.safetensors"))
    out = subprocess.run([sys.executable, "-c", MEASURE, str(folder)], cwd=ROOT,
                         capture_output=True, text=True, timeout=300, check=True)
    measured = json.loads(out.stdout.strip().splitlines()[-1])
    largest = max(f.stat().st_size for f in shards)
    assert len(shards) >= 5
    return (measured["growth"], largest + measured["held"] + MARGIN,
            sum(f.stat().st_size for f in shards))


def test_the_masked_family_quantizes_while_loading(tmp_path: Path) -> None:
    folder = write_dream_checkpoint(tmp_path, hidden=1024, layers=8, heads=16, kv_heads=2,
                                    intermediate=4096, shards=6, dtype=torch.bfloat16)
    growth, bound, sixteen_bit = _load_peak(folder)
    assert bound < sixteen_bit  # the bound means something
    assert growth <= bound


def test_the_block_family_quantizes_while_loading(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    from tests.support.diffusion_gemma import write_diffusion_gemma

    folder = write_diffusion_gemma(tmp_path, width=1792, dtype=torch.bfloat16,
                                   shard_size="64MB")
    growth, bound, sixteen_bit = _load_peak(folder)
    assert bound < sixteen_bit
    assert growth <= bound
