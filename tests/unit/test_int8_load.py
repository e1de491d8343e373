"""`load_int8` (a layer at a time) gives the model the int8 default gives after loading whole."""

from __future__ import annotations

import torch

from engine.models import BUNDLED_MODELS
from engine.models.checkpoint import load_model, read_checkpoint
from engine.models.int8 import load_int8, quantize_int8
from tests.support.tiny_checkpoints import write_dream_checkpoint, write_qwen2_ar_checkpoint


def _whole(ckpt):
    return quantize_int8(load_model(ckpt, "cpu", "float32").fuse_projections())


def _same_logits(ckpt, ids: torch.Tensor) -> None:
    with torch.inference_mode():
        expected, _ = _whole(ckpt)(ids)
        got, _ = load_int8(ckpt)[0](ids)
    assert torch.equal(expected, got)


def test_bundled_models_bit_identical():
    for name in ("default", "ar-baseline"):
        ckpt = read_checkpoint(BUNDLED_MODELS / name)
        ids = torch.randint(0, ckpt.config.vocab_size, (2, 48), generator=torch.Generator()
                            .manual_seed(0))
        _same_logits(ckpt, ids)


def test_tied_untied_and_sharded(tmp_path):
    for i, (writer, tie) in enumerate([(write_dream_checkpoint, True),
                                       (write_dream_checkpoint, False),
                                       (write_qwen2_ar_checkpoint, True)]):
        folder = writer(tmp_path / str(i), tie=tie, shards=2, dtype=torch.bfloat16)
        ckpt = read_checkpoint(folder)
        _same_logits(ckpt, torch.randint(0, ckpt.config.vocab_size, (1, 20)))
        model, quantized = load_int8(ckpt)
        assert quantized
        assert not any(isinstance(m, torch.nn.Linear) for m in model.modules())


def test_a_16_bit_embedding_stays_16_bit_and_a_float32_one_float32(tmp_path):
    # Widened as it is read, a bfloat16 embedding gives the float32 copy's very values (the
    # logits above are bit-identical) in half the memory; the head is int8 either way.
    for dtype in (torch.bfloat16, torch.float32):
        folder = write_dream_checkpoint(tmp_path / str(dtype), tie=True, dtype=dtype)
        model, _ = load_int8(read_checkpoint(folder))
        assert model.model.embed_tokens.weight.dtype == dtype
        assert model.model.embed_tokens(torch.tensor([[1, 2]])).dtype == torch.float32
