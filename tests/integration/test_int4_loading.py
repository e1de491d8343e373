"""int4 quantized while loading: a real-layout checkpoint (Qwen2/Dream tensor names, bfloat16,
six shard files, about 240 MB) loads at int4 with the host's peak memory bounded by the
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
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # the peak (VmHWM) starts again from what is resident now
before = status("VmRSS:")
model, _ = decoder_for(ckpt.config.family).load_model(ckpt, "cpu", "int4", False)
tensors = list(model.parameters()) + list(model.buffers())
print(json.dumps({"growth": status("VmHWM:") - before,
                  "held": sum(t.numel() * t.element_size() for t in tensors)}))
"""


@pytest.fixture(scope="module")
def sharded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_dream_checkpoint(
        tmp_path_factory.mktemp("sharded"), hidden=1024, layers=8, heads=16, kv_heads=2,
        intermediate=4096, shards=6, dtype=torch.bfloat16)


def test_int4_loading_peaks_below_the_largest_shard_plus_the_quantized_model(sharded: Path):
    shards = list(sharded.glob("model-*.safetensors"))
    largest = max(f.stat().st_size for f in shards)
    sixteen_bit = sum(f.stat().st_size for f in shards)
    out = subprocess.run([sys.executable, "-c", MEASURE, str(sharded)], cwd=ROOT,
                         capture_output=True, text=True, timeout=300, check=True)
    measured = json.loads(out.stdout.strip().splitlines()[-1])
    bound = largest + measured["held"] + MARGIN
    # The bound means something: it is below the model in 16 bits.
    assert len(shards) == 6 and bound < sixteen_bit
    assert measured["growth"] <= bound, measured
