"""int4 for the block family (DiffusionGemma): the int4 expert bank against its dequantized
reference and against transformers' own experts, and `Engine.load(dtype="int4")` on a tiny
random DiffusionGemma whose every matrix makes whole groups of 64."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
from torch import nn

transformers = pytest.importorskip("transformers")
if not hasattr(transformers, "DiffusionGemmaForBlockDiffusion"):
    pytest.skip("this transformers has no DiffusionGemma", allow_module_level=True)

from engine import Engine  # noqa: E402
from engine.cli import main  # noqa: E402
from engine.decode.families import decoder_for  # noqa: E402
from engine.models import int4  # noqa: E402
from engine.models.config import CheckpointError  # noqa: E402
from engine.models.int4 import Int4Experts, Int4Linear, is_expert_bank  # noqa: E402
from tests.support.diffusion_gemma import write_diffusion_gemma  # noqa: E402

GROUP = 64


def _relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def _bank(experts: int = 4, hidden: int = 128, inner: int = 64) -> nn.Module:
    """transformers' DiffusionGemma expert bank, random N(0, 0.02²) weights."""
    config = transformers.DiffusionGemmaTextConfig(
        hidden_size=hidden, moe_intermediate_size=inner, num_experts=experts, top_k_experts=2)
    bank = transformers.models.diffusion_gemma.modeling_diffusion_gemma \
        .DiffusionGemmaTextExperts(config)
    torch.manual_seed(0)
    with torch.no_grad():
        bank.gate_up_proj.normal_(std=0.02)
        bank.down_proj.normal_(std=0.02)
    return bank


def _routing(tokens: int, experts: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    torch.manual_seed(1)
    x = torch.randn(tokens, 128)
    index = torch.stack([torch.randperm(experts)[:2] for _ in range(tokens)])
    weights = torch.rand(tokens, 2)
    return x, index, weights / weights.sum(-1, keepdim=True)


def _dequantized_bank(bank: nn.Module, reference: Int4Experts) -> nn.Module:
    """`bank` with the float weights the reference's codes stand for."""
    out = copy.deepcopy(bank)
    with torch.no_grad():
        out.gate_up_proj.copy_(torch.stack([m.dequantized() for m in reference.gate_up]))
        out.down_proj.copy_(torch.stack([m.dequantized() for m in reference.down]))
    return out


def test_the_int4_bank_computes_what_transformers_computes_with_the_dequantized_weights():
    bank = _bank()
    assert is_expert_bank(bank)
    reference = Int4Experts.from_bank(bank, GROUP, torch.float32, use_ops=False)
    packed = Int4Experts.from_bank(bank, GROUP, torch.float32)
    assert {m.kernel for m in reference.modules() if isinstance(m, Int4Linear)} == {"dequantize"}
    assert {m.kernel for m in packed.modules() if isinstance(m, Int4Linear)} == {"cpu"}
    x, index, weights = _routing(24, 4)
    with torch.no_grad():
        want = _dequantized_bank(bank, reference)(x, index, weights)
        # The same float weights and the same matmuls; only the order of the experts'
        # additions into a token's row may differ.
        torch.testing.assert_close(reference(x, index, weights), want, rtol=1e-5, atol=1e-7)
        # The packed op rounds activations, scales and zeros to bfloat16.
        assert _relative(packed(x, index, weights), want) < 1e-2
        # And int4 itself is near the float bank: two int4 matmuls in a row, each near a
        # tenth off (tests/unit/test_int4.py), compound to less than twice that.
        assert 0.05 < _relative(packed(x, index, weights), bank(x, index, weights)) < 0.25


def test_an_expert_no_token_is_routed_to_is_never_run():
    bank = _bank()
    packed = Int4Experts.from_bank(bank, GROUP, torch.float32)
    x, _, weights = _routing(6, 4)
    index = torch.tensor([[0, 2]] * 6)
    with torch.no_grad():
        got = packed(x, index, weights)
        alone = Int4Experts([packed.gate_up[0], packed.gate_up[2]],
                            [packed.down[0], packed.down[2]], packed.act_fn)
        assert torch.equal(got, alone(x, torch.tensor([[0, 1]] * 6), weights))


@pytest.fixture(scope="module")
def dg64(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_diffusion_gemma(tmp_path_factory.mktemp("dg64"), width=64)


def test_the_block_family_loads_at_int4_and_fills_a_hole(dg64: Path) -> None:
    engine = Engine.load(str(dg64), device="cpu", dtype="int4")
    model = engine.model
    banks = [m for m in model.modules() if isinstance(m, Int4Experts)]
    # Two layers, whose weights the encoder and the decoder share: quantized once, shared.
    assert len(banks) == 2
    encoder, decoder = model.model.encoder.language_model, model.model.decoder
    assert all(encoder.layers[i].experts is decoder.layers[i].experts is banks[i]
               for i in range(2))
    assert not any(is_expert_bank(m) for m in model.modules())
    text_linears = [name for name, m in model.named_modules()
                    if isinstance(m, nn.Linear) and "vision" not in name]
    # The head is the embedding's weight: it stays float with the embedding.
    assert text_linears == ["lm_head"]
    assert model.lm_head.weight is model.model.decoder.embed_tokens.weight
    assert model.lm_head.weight.dtype == torch.float32
    result = engine.infill("def add(a, b):\n    return ", "\n", max_tokens=8, seed=0)
    assert result.steps >= 1 and len(result.token_ids) == 8
    # Same engine, same seed: the same tokens.
    again = engine.infill("def add(a, b):\n    return ", "\n", max_tokens=8, seed=0)
    assert again.token_ids == result.token_ids


def test_the_block_family_refuses_int8_and_compile_with_the_reason() -> None:
    block = decoder_for("block")
    with pytest.raises(ValueError, match="the block family quantizes with 'int4'"):
        block.load_model(None, "cpu", "int8", False)
    with pytest.raises(ValueError, match="compile is for the masked and AR families"):
        block.load_model(None, "cpu", "int4", True)


def test_the_block_familys_quantized_checkpoint_loads_without_requantizing_and_fills_alike(
    dg64: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "dg64-int4"
    assert main(["quantize", "--model", str(dg64), "--out", str(out)]) == 0
    prefix, suffix = "def add(a, b):\n    return ", "\n"
    want = Engine.load(str(dg64), device="cpu", dtype="int4").infill(prefix, suffix, 8, seed=0)

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("requantized")

    monkeypatch.setattr(int4, "_quantize_block", refuse)
    loaded = Engine.load(str(out), device="cpu", dtype="int4")
    model = loaded.model
    encoder, decoder = model.model.encoder.language_model, model.model.decoder
    # Stored once, shared again: the encoder's and decoder's layers, the head and embedding.
    assert all(isinstance(encoder.layers[i].experts, Int4Experts)
               and encoder.layers[i].experts is decoder.layers[i].experts for i in range(2))
    assert model.lm_head.weight.data_ptr() == decoder.embed_tokens.weight.data_ptr()
    got = loaded.infill(prefix, suffix, 8, seed=0)
    assert got.token_ids == want.token_ids and got.text == want.text
    with pytest.raises(CheckpointError, match="holds int4 weights .* load it with dtype int4"):
        Engine.load(str(out), device="cpu", dtype="float32")
    weights = out / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-1000])
    with pytest.raises(CheckpointError, match="model.safetensors: truncated: tensor '"):
        Engine.load(str(out), device="cpu", dtype="int4")
