"""`dg-engine plan`: memory figures from a config alone, checked to the byte."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.cli import main
from engine.models.plan import plan
from tests.support.published_configs import PUBLISHED, SMALL_DREAM

DREAM = SMALL_DREAM  # its figures are worked out by hand below
H, I, L, V, HD, KVH = 64, 128, 2, 300, 16, 2
# Per layer: q (H x H + H), k and v (H x KVH*HD + KVH*HD each), o (H x H), gate/up/down
# (3 x H x I), two norms (H each). Plus the embedding, the final norm and the untied head.
LAYER_MATRICES = H * H + 2 * H * KVH * HD + H * H + 3 * H * I
LAYER_VECTORS = H + 2 * KVH * HD + 2 * H
PARAMS = L * (LAYER_MATRICES + LAYER_VECTORS) + V * H + H + V * H


def test_bf16_figures_are_exact() -> None:
    p = plan(DREAM, "bf16", "cuda", "tiny")
    assert (p.family, p.dtype, p.parameters) == ("masked", "bfloat16", PARAMS)
    assert p.weights == 2 * PARAMS
    # Keys and values of 256 tokens, every layer, 2 bytes each.
    assert p.kv == {1: 256 * L * 2 * KVH * HD * 2, 8: 8 * 256 * L * 2 * KVH * HD * 2}
    assert p.logits == {1: 256 * V * 4, 8: 8 * 256 * V * 4}
    assert p.self_conditioning == {}
    assert p.total(8) == p.weights + p.kv[8] + p.logits[8]


def test_int8_quantizes_the_matrices_but_not_the_embedding() -> None:
    p = plan(DREAM, "int8", "cuda", "tiny")
    rows = L * (H + 2 * KVH * HD + H + 2 * I + H) + V  # output rows of every matrix and head
    matrices = L * LAYER_MATRICES + V * H
    assert p.weights == matrices + 4 * rows + 2 * (L * LAYER_VECTORS + V * H + H)
    # On the CPU, int8 layers compute in float32: the unquantized tensors are float32 there.
    cpu = plan(DREAM, "int8", "cpu", "tiny")
    assert cpu.weights == matrices + 4 * rows + 4 * (L * LAYER_VECTORS + V * H + H)
    assert cpu.kv[1] == 2 * p.kv[1]


def test_int8_on_the_cpu_keeps_a_16_bit_embedding_and_quantizes_a_tied_head_apart() -> None:
    # engine.models.int8.load_int8: the embedding as stored where it is 16-bit; a tied head
    # gets an int8 copy (a byte a weight and a float32 scale a row).
    untied = plan(DREAM, "int8", "cpu", "tiny")
    bf16 = plan({**DREAM, "torch_dtype": "bfloat16"}, "int8", "cpu", "tiny")
    assert bf16.weights == untied.weights - 2 * V * H
    tied = plan({**DREAM, "torch_dtype": "bfloat16", "tie_word_embeddings": True}, "int8",
                "cpu", "tiny")
    assert tied.parameters == bf16.parameters - V * H
    assert tied.weights == bf16.weights  # the same bytes: an int8 head, a 16-bit embedding


def test_int4_counts_half_a_byte_a_weight_and_a_scale_and_zero_a_group() -> None:
    p = plan(DREAM, "int4", "cuda", "tiny")
    # Every matrix but the embedding has 64 or 128 input features: whole groups of 64.
    matrices = L * LAYER_MATRICES + V * H
    assert p.weights == matrices // 2 + 2 * 2 * (matrices // 64) + 2 * (L * LAYER_VECTORS
                                                                         + V * H + H)
    cpu = plan(DREAM, "int4", "cpu", "tiny")  # float32 around the int4 layers on the CPU
    assert cpu.weights == p.weights + 2 * (L * LAYER_VECTORS + V * H + H)


def test_diffusiongemma_fits_a_24_gb_card_at_int4() -> None:
    pytest.importorskip("transformers")
    p = plan(PUBLISHED["diffusiongemma-26b-a4b"], "int4")
    assert p.weights <= 16 * 10**9 and p.fits(1, 24 * 10**9)


def test_a_bad_dtype_is_named() -> None:
    with pytest.raises(ValueError, match="dtype 'int3' is not one of"):
        plan(DREAM, "int3")


def test_fits_keeps_a_tenth_of_the_memory_for_the_runtime() -> None:
    p = plan(DREAM, "fp32", "cpu", "tiny")
    assert p.fits(1, int(p.total(1) / 0.9) + 1)
    assert not p.fits(1, p.total(1))


def test_published_models_parameter_counts() -> None:
    # The models' published sizes: Qwen2.5-Coder-0.5B 0.49B, Qwen2.5-Coder-7B 7.62B,
    # LLaDA-8B 8.02B.
    assert plan(PUBLISHED["open-dcoder-0.5b"]).parameters == 494_032_768
    assert plan(PUBLISHED["dream-coder-7b"]).parameters == 7_615_616_512
    assert plan(PUBLISHED["llada-8b"]).parameters == 8_015_581_184


def test_diffusiongemma_counts_self_conditioning_and_both_attention_kinds() -> None:
    pytest.importorskip("transformers")
    p = plan(PUBLISHED["diffusiongemma-26b-a4b"], "bf16")
    assert p.family == "block"
    assert round(p.parameters / 1e9, 1) == 25.8  # the model card's 25.8B total, vision included
    vocab = 262144
    assert p.self_conditioning == {1: 256 * vocab * 2, 8: 8 * 256 * vocab * 2}
    # 25 sliding layers (8 KV heads x 256) and 5 full ones (2 global KV heads x 512).
    per_token = (25 * 8 * 256 + 5 * 2 * 512) * 2 * 2
    assert p.kv == {1: 256 * per_token, 8: 8 * 256 * per_token}
    assert not p.fits(1, 24 * 10**9) and p.fits(8, 80 * 10**9)


def test_command_prints_figures_for_a_folder_or_a_config_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "config.json").write_text(json.dumps(DREAM))
    assert main(["plan", "--model", str(tmp_path), "--dtype", "bf16", "--memory-gb", "24",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["weights"] == 2 * PARAMS and out["fits"]["24 GB"] == {"1": True, "8": True}
    assert main(["plan", "--model", str(tmp_path / "config.json"), "--device", "cpu"]) == 0
    text = capsys.readouterr().out
    assert "masked family, bfloat16" in text and "this machine's RAM" in text
    assert main(["plan", "--model", str(tmp_path / "missing")]) == 2


def test_command_plans_int4(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "config.json").write_text(json.dumps(DREAM))
    assert main(["plan", "--model", str(tmp_path), "--dtype", "int4", "--memory-gb", "24",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["dtype"] == "int4"
    assert out["weights"] == plan(DREAM, "int4", "cuda", "tiny").weights


def test_command_on_this_cpu_prints_a_lines_expected_latency_and_its_basis(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "config.json").write_text(json.dumps(DREAM))
    assert main(["plan", "--model", str(tmp_path), "--device", "cpu", "--dtype", "int8"]) == 0
    text = capsys.readouterr().out
    assert "a warm 16-token line at 2 tokens a pass, 1 thread: about " in text
    assert "an estimate: one int8 layer at this shape timed here" in text
    assert main(["plan", "--model", str(tmp_path), "--device", "cpu", "--no-latency"]) == 0
    assert "line" not in capsys.readouterr().out
    assert main(["plan", "--model", str(tmp_path), "--memory-gb", "24", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["line"] is None  # not this machine: no timing


def test_a_lines_estimate_is_its_passes_layers_and_head_from_the_timed_layer(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    import engine.models.latency as latency
    from engine.models.config import config_from_hf

    # A layer over r rows takes r ms: the passes' layer rows times the layers, and the head
    # rows times the head's weights over a layer's.
    monkeypatch.setattr(latency, "_time_rows", lambda block, cfg, rows, dtype: rows / 1000)
    line = latency.estimate_line(config_from_hf(DREAM), "int8")
    assert line is not None and line.layer_ms == {12: 12, 16: 16, 48: 48, 64: 64}
    head_share = H * V / LAYER_MATRICES
    layers = (64 + 48 + 6 * 12) * L
    heads = (16 + 12 + 6 * 12) * head_share
    assert line.ms == round(layers + heads)
    assert latency.estimate_line(config_from_hf(DREAM), "int4") is None
    ar = {**DREAM, "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2"}
    ar.pop("mask_token_id")
    assert latency.estimate_line(config_from_hf(ar), "int8") is None
