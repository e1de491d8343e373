"""Checkpoint resolution, reading, loading and refusal of bad checkpoints."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from engine.models import checkpoint
from engine.models.checkpoint import (
    checkpoint_name,
    load_model,
    our_name,
    read_checkpoint,
    resolve,
    resolve_device,
    resolve_dtype,
)
from engine.models.config import CheckpointError
from tests.support.tiny_checkpoints import (
    EXPAND,
    write_dream_checkpoint,
    write_llada_checkpoint,
    write_qwen2_ar_checkpoint,
)


def stored_tensors(folder: Path) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    for file in sorted(folder.glob("*.safetensors")):
        out.update(load_file(str(file)))
    return out


# ---------------------------------------------------------------------------------------------
# Loading each layout


def test_dream_layout_loads_every_tensor(dream_ckpt: Path) -> None:
    ckpt = read_checkpoint(dream_ckpt)
    cfg, tok = ckpt.config, ckpt.tokenizer
    assert (cfg.family, cfg.layout) == ("masked", "dream")
    assert cfg.shift_logits and not cfg.causal
    assert cfg.mask_token_id == tok.token_id("<|mask|>") == 2
    assert cfg.eos_token_id == tok.token_id("<|endoftext|>") == 0
    assert cfg.vocab_size == tok.vocab_size
    assert ckpt.generation_config["mask_token_id"] == 2
    model = load_model(ckpt, device="cpu")
    assert not model.training
    state = model.state_dict()
    stored = stored_tensors(dream_ckpt)
    assert set(state) == set(stored)
    for name, tensor in stored.items():
        assert state[name].dtype == torch.float32 and state[name].device.type == "cpu"
        assert torch.equal(state[name], tensor), name


def test_llada_layout_maps_names(llada_ckpt: Path) -> None:
    ckpt = read_checkpoint(llada_ckpt)
    cfg = ckpt.config
    assert (cfg.family, cfg.layout) == ("masked", "llada")
    assert not cfg.shift_logits and not cfg.causal
    assert cfg.mask_token_id == 2 and cfg.eos_token_id == 0 and cfg.bos_token_id == 3
    assert cfg.rms_norm_eps == 1e-5 and cfg.rope_theta == 500000.0
    model = load_model(ckpt, device="cpu")
    state, stored = model.state_dict(), stored_tensors(llada_ckpt)
    assert len(state) == len(stored)
    for name, tensor in stored.items():
        assert torch.equal(state[our_name(name, "llada")], tensor), name
    assert torch.equal(model.model.layers[1].mlp.down_proj.weight,
                       stored["model.transformer.blocks.1.ff_out.weight"])
    assert torch.equal(model.lm_head.weight, stored["model.transformer.ff_out.weight"])


def test_llada_names_map_both_ways() -> None:
    pairs = {
        "model.transformer.wte.weight": "model.embed_tokens.weight",
        "model.transformer.ff_out.weight": "lm_head.weight",
        "model.transformer.ln_f.weight": "model.norm.weight",
        "model.transformer.blocks.12.ff_out.weight": "model.layers.12.mlp.down_proj.weight",
        "model.transformer.blocks.3.k_proj.bias": "model.layers.3.self_attn.k_proj.bias",
        "model.transformer.blocks.0.attn_out.weight": "model.layers.0.self_attn.o_proj.weight",
        "model.transformer.blocks.7.ff_norm.weight":
            "model.layers.7.post_attention_layernorm.weight",
    }
    for theirs, ours in pairs.items():
        assert our_name(theirs, "llada") == ours
        assert checkpoint_name(ours, "llada") == theirs
    assert our_name("model.transformer.blocks.0.rotary.inv_freq", "llada") == (
        "model.transformer.blocks.0.rotary.inv_freq")
    assert our_name("model.transformer.wte.weight", "dream") == "model.transformer.wte.weight"


def test_ar_layout_is_causal(ar_ckpt: Path) -> None:
    ckpt = read_checkpoint(ar_ckpt)
    assert (ckpt.config.family, ckpt.config.causal, ckpt.config.shift_logits) == ("ar", True, False)
    assert ckpt.config.qkv_bias
    model = load_model(ckpt, device="cpu")
    assert torch.equal(model.model.layers[0].self_attn.q_proj.bias,
                       stored_tensors(ar_ckpt)["model.layers.0.self_attn.q_proj.bias"])


@pytest.mark.parametrize("writer", [write_dream_checkpoint, write_llada_checkpoint])
def test_tied_head_shares_the_embedding(tmp_path: Path, writer) -> None:
    model = load_model(read_checkpoint(writer(tmp_path, tie=True)), device="cpu")
    assert model.lm_head.weight is model.model.embed_tokens.weight
    assert len(stored_tensors(tmp_path)) == len(model.state_dict()) - 1


@pytest.mark.parametrize("writer", [write_dream_checkpoint, write_llada_checkpoint])
def test_sharded_equals_single_file(tmp_path: Path, writer) -> None:
    single = load_model(read_checkpoint(writer(tmp_path / "one", seed=3)), device="cpu")
    sharded_dir = writer(tmp_path / "three", seed=3, shards=3)
    assert sorted(p.name for p in sharded_dir.glob("*.safetensors")) == [
        f"model-0000{i}-of-00003.safetensors" for i in (1, 2, 3)]
    sharded = load_model(read_checkpoint(sharded_dir), device="cpu")
    a, b = single.state_dict(), sharded.state_dict()
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)


# ---------------------------------------------------------------------------------------------
# Special ids


def test_special_ids_fall_back_to_generation_config_then_tokenizer(tmp_path: Path) -> None:
    folder = write_dream_checkpoint(tmp_path, extra_config={"mask_token_id": None})
    assert read_checkpoint(folder).config.mask_token_id == 2  # from generation_config.json
    gen = json.loads((folder / "generation_config.json").read_text())
    gen["mask_token_id"] = 5
    (folder / "generation_config.json").write_text(json.dumps(gen))
    assert read_checkpoint(folder).config.mask_token_id == 5
    (folder / "generation_config.json").unlink()
    assert read_checkpoint(folder).config.mask_token_id == 2  # tokenizer_config's mask_token


def test_dreamon_expand_token_from_tokenizer(tmp_path: Path) -> None:
    ckpt = read_checkpoint(write_dream_checkpoint(tmp_path, expand_token=True))
    assert ckpt.config.expand_token_id == ckpt.tokenizer.token_id(EXPAND) is not None
    assert ckpt.config.vocab_size == ckpt.tokenizer.vocab_size


def test_llada_without_mask_id_uses_the_tokenizer_not_llada_8b(tmp_path: Path) -> None:
    folder = write_llada_checkpoint(tmp_path, extra_config={"mask_token_id": None})
    assert read_checkpoint(folder).config.mask_token_id == 2


def test_special_id_outside_vocabulary(tmp_path: Path) -> None:
    folder = write_llada_checkpoint(tmp_path, extra_config={"mask_token_id": 126336})
    with pytest.raises(CheckpointError, match=r"config\.json: mask_token_id=126336 is outside"):
        read_checkpoint(folder)


# ---------------------------------------------------------------------------------------------
# Resolution


def test_resolve_local_folder_and_bundled(tmp_path: Path, monkeypatch, dream_ckpt: Path) -> None:
    assert resolve(str(dream_ckpt)) == dream_ckpt
    monkeypatch.setattr(checkpoint, "BUNDLED_MODEL_DIR", tmp_path / "bundled" / "default")
    with pytest.raises(CheckpointError, match="bundled model is not installed"):
        resolve(None)
    shutil.copytree(dream_ckpt, tmp_path / "bundled" / "default")
    assert resolve(None) == tmp_path / "bundled" / "default"
    with pytest.raises(CheckpointError, match="no such checkpoint folder"):
        resolve(str(tmp_path / "nowhere"))
    with pytest.raises(CheckpointError, match="is a folder, not a file"):
        resolve(str(dream_ckpt / "config.json"))


def fake_hub_cache(cache: Path, hub_id: str, source: Path, revisions: list[str], main: str) -> None:
    repo = cache / ("models--" + hub_id.replace("/", "--"))
    for rev in revisions:
        shutil.copytree(source, repo / "snapshots" / rev)
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(main + "\n")


def test_resolve_hub_id_through_the_cache(tmp_path: Path, monkeypatch, dream_ckpt: Path) -> None:
    cache = tmp_path / "hub"
    fake_hub_cache(cache, "Dream-org/Tiny-Coder", dream_ckpt, ["aaa111", "bbb222"], "aaa111")
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)  # a relative "Dream-org/Tiny-Coder" folder must not exist
    path = resolve("Dream-org/Tiny-Coder")
    assert path == cache / "models--Dream-org--Tiny-Coder" / "snapshots" / "aaa111"
    assert read_checkpoint(path).config.layout == "dream"

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "elsewhere"))
    with pytest.raises(CheckpointError) as err:
        resolve("Dream-org/Tiny-Coder")
    message = str(err.value)
    assert "not in the Hugging Face cache" in message
    assert str(tmp_path / "elsewhere" / "models--Dream-org--Tiny-Coder") in message
    assert "hf download Dream-org/Tiny-Coder" in message


# ---------------------------------------------------------------------------------------------
# Device and dtype


def test_auto_dtype_upcasts_half_weights_on_cpu(tmp_path: Path) -> None:
    folder = write_dream_checkpoint(tmp_path, dtype=torch.bfloat16)
    ckpt = read_checkpoint(folder)
    stored = stored_tensors(folder)
    auto = load_model(ckpt, device="cpu")
    assert {p.dtype for p in auto.parameters()} == {torch.float32}
    assert torch.equal(auto.model.norm.weight, stored["model.norm.weight"].float())
    bf16 = load_model(ckpt, device="cpu", dtype="bfloat16")
    assert {p.dtype for p in bf16.parameters()} == {torch.bfloat16}
    assert torch.equal(bf16.model.norm.weight, stored["model.norm.weight"])


def test_device_and_dtype_names() -> None:
    expected_auto = "cuda" if torch.cuda.is_available() else "cpu"
    assert resolve_device("auto").type == expected_auto
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_dtype("auto", "cpu") == torch.float32
    assert resolve_dtype("bf16", "cpu") == torch.bfloat16
    assert resolve_dtype("float16", "cpu") == torch.float16
    with pytest.raises(ValueError, match="dtype 'int8' is not one of"):
        resolve_dtype("int8", "cpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA is not available"):
            resolve_device("cuda")


# ---------------------------------------------------------------------------------------------
# Bad checkpoints: each names the file and the tensor


def rewrite(file: Path, change) -> None:
    tensors = load_file(str(file))
    change(tensors)
    save_file(tensors, str(file))


def test_missing_tensor(tmp_path: Path) -> None:
    folder = write_dream_checkpoint(tmp_path)
    rewrite(folder / "model.safetensors", lambda t: t.pop("model.layers.1.mlp.up_proj.weight"))
    with pytest.raises(CheckpointError, match=(
            r"tensor 'model\.layers\.1\.mlp\.up_proj\.weight' \(shape \[128, 64\]\) is missing")):
        load_model(read_checkpoint(folder), device="cpu")


def test_missing_tensor_is_named_in_llada_terms(tmp_path: Path) -> None:
    folder = write_llada_checkpoint(tmp_path)
    rewrite(folder / "model.safetensors",
            lambda t: t.pop("model.transformer.blocks.1.attn_out.weight"))
    with pytest.raises(CheckpointError,
                       match=r"tensor 'model\.transformer\.blocks\.1\.attn_out\.weight'"):
        load_model(read_checkpoint(folder), device="cpu")


def test_missing_qkv_bias_of_a_qwen2_layout(tmp_path: Path) -> None:
    folder = write_qwen2_ar_checkpoint(tmp_path)
    rewrite(folder / "model.safetensors", lambda t: t.pop("model.layers.0.self_attn.v_proj.bias"))
    with pytest.raises(CheckpointError, match=r"'model\.layers\.0\.self_attn\.v_proj\.bias'"):
        load_model(read_checkpoint(folder), device="cpu")


def test_wrong_shape(tmp_path: Path) -> None:
    folder = write_dream_checkpoint(tmp_path)
    rewrite(folder / "model.safetensors",
            lambda t: t.update({"model.norm.weight": torch.ones(63)}))
    with pytest.raises(CheckpointError) as err:
        load_model(read_checkpoint(folder), device="cpu")
    assert str(err.value) == (f"{folder / 'model.safetensors'}: tensor 'model.norm.weight' has "
                              "shape [63], the config implies [64]")


def test_config_disagreeing_with_the_weights(tmp_path: Path) -> None:
    folder = write_llada_checkpoint(tmp_path, shards=2, extra_config={"mlp_hidden_size": 96})
    with pytest.raises(CheckpointError,
                       match=r"model-0000[12]-of-00002\.safetensors: tensor '.*(ff_proj|"
                             r"up_proj|ff_out)\.weight' has shape \[(128, 64|64, 128)\], "
                             r"the config implies"):
        load_model(read_checkpoint(folder), device="cpu")


def test_unexpected_tensor(tmp_path: Path) -> None:
    folder = write_dream_checkpoint(tmp_path)
    rewrite(folder / "model.safetensors",
            lambda t: t.update({"model.layers.0.self_attn.rotary_emb.inv_freq": torch.ones(8)}))
    with pytest.raises(CheckpointError, match=(
            r"model\.safetensors: unexpected tensor 'model\.layers\.0\.self_attn\.rotary_emb"
            r"\.inv_freq'")):
        load_model(read_checkpoint(folder), device="cpu")


def test_truncated_file_names_file_and_tensor(tmp_path: Path) -> None:
    folder = write_dream_checkpoint(tmp_path)
    file = folder / "model.safetensors"
    data = file.read_bytes()
    file.write_bytes(data[:-10])  # only the tensor stored last loses its tail
    with pytest.raises(CheckpointError) as err:
        load_model(read_checkpoint(folder), device="cpu")
    message = str(err.value)
    assert message.startswith(f"{file}: truncated")
    last = max(_header(data).items(), key=lambda kv: kv[1]["data_offsets"][1])[0]
    assert f"tensor '{last}'" in message


def _header(data: bytes) -> dict:
    size = int.from_bytes(data[:8], "little")
    header = json.loads(data[8: 8 + size])
    header.pop("__metadata__", None)
    return header


def test_corrupt_shard(tmp_path: Path) -> None:
    folder = write_dream_checkpoint(tmp_path, shards=2)
    shard = folder / "model-00002-of-00002.safetensors"
    shard.write_bytes(b"\x07" * 64)
    with pytest.raises(CheckpointError, match=r"model-00002-of-00002\.safetensors: not a "
                                              r"readable safetensors file"):
        load_model(read_checkpoint(folder), device="cpu")


def test_index_naming_a_missing_shard(tmp_path: Path) -> None:
    folder = write_dream_checkpoint(tmp_path, shards=2)
    (folder / "model-00001-of-00002.safetensors").unlink()
    with pytest.raises(CheckpointError, match=r"index\.json: lists model-00001-of-00002"
                                              r"\.safetensors, which is missing"):
        load_model(read_checkpoint(folder), device="cpu")


def test_pickle_only_folder_is_refused(tmp_path: Path) -> None:
    folder = write_dream_checkpoint(tmp_path)
    (folder / "model.safetensors").unlink()
    (folder / "pytorch_model.bin").write_bytes(b"never unpickled")
    with pytest.raises(CheckpointError) as err:
        load_model(read_checkpoint(folder), device="cpu")
    assert "only pickle weights (pytorch_model.bin)" in str(err.value)
    assert "unpickling a file can run arbitrary code" in str(err.value)


def test_unknown_architecture_is_refused_by_name(tmp_path: Path) -> None:
    folder = write_dream_checkpoint(tmp_path, extra_config={
        "architectures": ["MistralForCausalLM"], "model_type": "mistral"})
    with pytest.raises(CheckpointError, match="architecture 'MistralForCausalLM' is not "
                                              "implemented"):
        read_checkpoint(folder)


def test_auto_map_code_is_never_run(tmp_path: Path) -> None:
    folder = write_dream_checkpoint(tmp_path)
    sentinel = tmp_path / "remote_code_ran"
    for name in ("modeling_dream.py", "configuration_dream.py"):
        (folder / name).write_text(f"open({str(sentinel)!r}, 'w').write('ran')\n")
    assert "auto_map" in json.loads((folder / "config.json").read_text())
    load_model(read_checkpoint(folder), device="cpu")
    assert not sentinel.exists()
    # An auto_map does not make an unknown architecture acceptable.
    write_dream_checkpoint(folder, extra_config={"architectures": ["DreamNextModel"],
                                                 "model_type": "dream_next"})
    with pytest.raises(CheckpointError, match="'DreamNextModel' is not implemented"):
        read_checkpoint(folder)


def test_unsupported_llada_option(tmp_path: Path) -> None:
    folder = write_llada_checkpoint(tmp_path, extra_config={"input_emb_norm": True})
    with pytest.raises(CheckpointError, match="LLaDA option input_emb_norm=True is not supported"):
        read_checkpoint(folder)


def test_missing_tokenizer_and_config(tmp_path: Path) -> None:
    folder = write_dream_checkpoint(tmp_path)
    (folder / "tokenizer.json").unlink()
    with pytest.raises(CheckpointError, match=r"tokenizer\.json: file is missing"):
        read_checkpoint(folder)
    (folder / "config.json").unlink()
    with pytest.raises(CheckpointError, match=r"config\.json: file is missing"):
        read_checkpoint(folder)


def test_block_family_reads_but_is_not_loaded_here(tmp_path: Path, dream_ckpt: Path) -> None:
    folder = tmp_path / "gemma"
    shutil.copytree(dream_ckpt, folder)
    raw = {"architectures": ["DiffusionGemmaForBlockDiffusion"], "model_type": "diffusion_gemma",
           "canvas_length": 256}
    (folder / "config.json").write_text(json.dumps(raw))
    ckpt = read_checkpoint(folder)
    assert ckpt.config.family == "block"
    assert ckpt.config.extra["raw"]["canvas_length"] == 256
    with pytest.raises(CheckpointError, match="family 'block' is not loaded by load_model"):
        load_model(ckpt, device="cpu")


# ---------------------------------------------------------------------------------------------
# Config values and index entries from anyone: refused with their name, never a raw exception


@pytest.mark.parametrize("overrides, message", [
    ({"hidden_size": "abc"}, "hidden_size must be an integer in 1..1048576, got 'abc'"),
    ({"hidden_size": None}, "config key 'hidden_size' is missing"),
    ({"hidden_size": [384]}, "hidden_size must be an integer in 1..1048576, got [384]"),
    ({"hidden_size": 384.7}, "hidden_size must be an integer in 1..1048576, got 384.7"),
    ({"num_attention_heads": 0}, "num_attention_heads must be an integer in 1..1024, got 0"),
    ({"num_attention_heads": 3, "num_key_value_heads": 1},
     "hidden size 64 is not a multiple of num_attention_heads=3"),
    ({"mask_token_id": "two"}, "mask_token_id must be a non-negative integer, got 'two'"),
    ({"tie_word_embeddings": "false"}, "tie_word_embeddings must be true or false, got 'false'"),
    ({"max_position_embeddings": -5},
     "max_position_embeddings must be an integer in 1..16777216, got -5"),
    ({"num_hidden_layers": 100000},
     "num_hidden_layers must be an integer in 1..1000, got 100000"),
    ({"rms_norm_eps": float("nan")}, "rms_norm_eps must be a number in (0, 1], got nan"),
])
def test_bad_config_values_are_refused_by_name(tmp_path: Path, overrides, message) -> None:
    folder = write_dream_checkpoint(tmp_path)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, **overrides}))
    with pytest.raises(CheckpointError) as err:
        read_checkpoint(folder)
    assert str(err.value) == f"{folder / 'config.json'}: {message}"


def test_more_layers_than_the_weights_hold_is_refused_before_building(tmp_path: Path) -> None:
    import time

    folder = write_dream_checkpoint(tmp_path, extra_config={"num_hidden_layers": 1000})
    started = time.perf_counter()
    with pytest.raises(CheckpointError) as err:
        load_model(read_checkpoint(folder), device="cpu")
    assert str(err.value) == (f"{folder / 'config.json'}: num_hidden_layers=1000 but the "
                              "weights hold 2 layers")
    assert time.perf_counter() - started < 2


def test_a_bad_special_id_in_the_generation_config_is_refused_by_name(tmp_path: Path) -> None:
    folder = write_dream_checkpoint(tmp_path, extra_config={"eos_token_id": None})
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": "two"}))
    with pytest.raises(CheckpointError, match=r"generation_config\.json: eos_token_id must be a "
                                              r"non-negative integer, got 'two'"):
        read_checkpoint(folder)


@pytest.mark.parametrize("entry, message", [
    (7, "weight_map entry for 'model.norm.weight' must be a file name, got 7"),
    (None, "weight_map entry for 'model.norm.weight' must be a file name, got None"),
    ("../../../../etc/passwd",
     "weight_map entry for 'model.norm.weight' ('../../../../etc/passwd') points outside the "
     "checkpoint folder"),
    ("/etc/passwd",
     "weight_map entry for 'model.norm.weight' ('/etc/passwd') points outside the checkpoint "
     "folder"),
])
def test_weight_map_entries_must_name_files_in_the_folder(tmp_path: Path, entry, message) -> None:
    folder = write_dream_checkpoint(tmp_path / "ckpt", shards=2)
    index = folder / "model.safetensors.index.json"
    data = json.loads(index.read_text())
    data["weight_map"]["model.norm.weight"] = entry
    index.write_text(json.dumps(data))
    with pytest.raises(CheckpointError) as err:
        load_model(read_checkpoint(folder), device="cpu")
    assert str(err.value) == f"{index}: {message}"
