"""The real models' published configs at their real width, on the CPU.

One layer per family at full width, full vocabulary and real head counts (the MoE cut to 4
experts): `Engine.load` must match transformers on the same weights within the dtype's
tolerance (tests/published_configs.logit_tolerance says why that much) and add at most 1.2x
the weights' bytes to the process while loading. Loads run in a fresh process
(scripts/experiments/real_shapes.py's worker) so the peak is the load's own. The full table,
with more layers, is `python scripts/experiments/real_shapes.py` (docs/models.md, "Real
models at real scale").
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine.models.checkpoint import read_checkpoint
from engine.models.config import config_from_hf
from tests.support.published_configs import PUBLISHED, write_real_shape

transformers = pytest.importorskip("transformers")

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "experiments" / "real_shapes.py"
RSS_BOUND = 1.2


def available_bytes() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def test_published_configs_read_as_the_real_models() -> None:
    dream = config_from_hf(PUBLISHED["dream-coder-7b"])
    assert (dream.family, dream.layout, dream.shift_logits) == ("masked", "dream", True)
    assert (dream.hidden_size, dream.num_heads, dream.num_kv_heads, dream.head_dim) == (
        3584, 28, 4, 128)
    assert (dream.vocab_size, dream.mask_token_id, dream.qkv_bias) == (152064, 151666, True)
    small = config_from_hf(PUBLISHED["open-dcoder-0.5b"])
    assert (small.hidden_size, small.num_layers, small.head_dim) == (896, 24, 64)
    assert small.tie_word_embeddings
    llada = config_from_hf(PUBLISHED["llada-8b"])
    assert (llada.layout, llada.shift_logits, llada.num_layers) == ("llada", False, 32)
    assert (llada.vocab_size, llada.intermediate_size, llada.mask_token_id) == (
        126464, 12288, 126336)
    raw = PUBLISHED["diffusiongemma-26b-a4b"]
    assert config_from_hf(raw).family == "block"
    text = transformers.DiffusionGemmaConfig(**{k: v for k, v in raw.items() if k not in (
        "architectures", "model_type")}).text_config
    assert (text.hidden_size, text.vocab_size, text.num_experts, text.top_k_experts) == (
        2816, 262144, 128, 8)
    assert text.layer_types.count("full_attention") == 5


# (model, layers, experts, dtypes, bytes the test needs free: the larger of the engine's and
# the reference's copies, twice over for safety)
CASES = [
    ("open-dcoder-0.5b", 1, None, ["float32", "bfloat16"], 2_000_000_000),
    ("llada-8b", 1, None, ["bfloat16"], 6_000_000_000),
    ("diffusiongemma-26b-a4b", 1, 4, ["bfloat16"], 5_000_000_000),
]


@pytest.mark.slow  # a layer at full width, loaded twice: about 30-60 s each on 2 cores
@pytest.mark.parametrize(("name", "layers", "experts", "dtypes", "needs"), CASES,
                         ids=[c[0] for c in CASES])
def test_real_width_loads_within_memory_and_matches_transformers(
    tmp_path: Path, name: str, layers: int, experts: int | None, dtypes: list[str], needs: int
) -> None:
    if available_bytes() < needs:
        pytest.skip(f"needs {needs / 1e9:.0f} GB of free memory")
    folder = write_real_shape(tmp_path / name, name, layers, experts)
    ckpt = read_checkpoint(folder)  # the published config is accepted as it is
    assert ckpt.raw_config == json.loads((folder / "config.json").read_text())
    # 16 positions (64 canvas positions for the block family) keep the 150K-262K-wide head's
    # matmuls short on a CPU; the script's table uses 64 (256).
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--worker", "run", name, str(folder), *dtypes],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "REAL_SHAPES_TOKENS": "16"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    for row in json.loads(proc.stdout.strip().splitlines()[-1]):
        assert row["layers"] == layers
        assert row["max_diff"] <= row["tolerance"], row
        assert row["argmax"] >= 0.99, row
        assert row["peak_rss_bytes"] <= RSS_BOUND * row["weights_bytes"], row
        if "causal_diff" in row:
            assert row["causal_diff"] > row["tolerance"], row
