"""`dg-engine quantize`: the int4 checkpoint it writes loads without requantizing and computes
what quantizing while loading computes; other schemes and damaged files are refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine import Engine
from engine.cli import main
from engine.models import int4
from engine.models.config import CheckpointError
from engine.models.int4 import Int4Linear
from engine.models.quantized import write_quantized

PREFIX, SUFFIX = "def add(a, b):\n    return ", "\n"


@pytest.fixture(scope="module")
def quantized(dream_ckpt: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("q") / "dream-int4"
    assert main(["quantize", "--model", str(dream_ckpt), "--out", str(out)]) == 0
    return out


def test_the_written_checkpoint_says_what_it_holds(quantized: Path, dream_ckpt: Path) -> None:
    info = json.loads((quantized / "quantization.json").read_text())
    assert info == {"scheme": "int4", "format": "dg-engine int4 v1", "group_size": 64,
                    "source": str(dream_ckpt)}
    assert (quantized / "tokenizer.json").read_bytes() == \
        (dream_ckpt / "tokenizer.json").read_bytes()


def test_it_loads_without_requantizing_and_fills_as_quantizing_while_loading_does(
    quantized: Path, dream_ckpt: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    direct = Engine.load(str(dream_ckpt), device="cpu", dtype="int4")
    want = direct.infill(PREFIX, SUFFIX, max_tokens=8, seed=0)

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("requantized")

    monkeypatch.setattr(int4, "_quantize_block", refuse)
    loaded = Engine.load(str(quantized), device="cpu", dtype="int4")
    assert [m.kernel for m in loaded.model.modules() if isinstance(m, Int4Linear)] == \
        [m.kernel for m in direct.model.modules() if isinstance(m, Int4Linear)]
    got = loaded.infill(PREFIX, SUFFIX, max_tokens=8, seed=0)
    assert got.token_ids == want.token_ids and got.text == want.text


def test_a_quantized_checkpoint_loads_at_int4_only(quantized: Path) -> None:
    with pytest.raises(CheckpointError, match="holds int4 weights .* load it with dtype int4"):
        Engine.load(str(quantized), device="cpu", dtype="float32")


def _copy(src: Path, dst: Path) -> Path:
    dst.mkdir()
    for f in src.iterdir():
        (dst / f.name).write_bytes(f.read_bytes())
    return dst


def test_another_scheme_is_refused(quantized: Path, tmp_path: Path) -> None:
    other = _copy(quantized, tmp_path / "nf4")
    info = json.loads((other / "quantization.json").read_text())
    (other / "quantization.json").write_text(json.dumps({**info, "scheme": "nf4"}))
    with pytest.raises(CheckpointError, match="quantized with scheme 'nf4'; dg-engine loads"):
        Engine.load(str(other), device="cpu", dtype="int4")


def test_a_group_size_the_tensors_do_not_have_is_refused(quantized: Path, tmp_path: Path):
    other = _copy(quantized, tmp_path / "g32")
    info = json.loads((other / "quantization.json").read_text())
    (other / "quantization.json").write_text(json.dumps({**info, "group_size": 32}))
    with pytest.raises(CheckpointError, match=r"scales_and_zeros' has shape \[1, .* group "
                                              r"size 32 imply \[2, "):
        Engine.load(str(other), device="cpu", dtype="int4")


def test_a_damaged_file_is_refused_with_the_tensor_cut_off(quantized: Path, tmp_path: Path):
    damaged = _copy(quantized, tmp_path / "cut")
    weights = damaged / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-1000])
    with pytest.raises(CheckpointError, match="model.safetensors: truncated: tensor '"):
        Engine.load(str(damaged), device="cpu", dtype="int4")


def test_the_command_refuses_what_it_cannot_write(quantized: Path, dream_ckpt: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["quantize", "--model", str(quantized), "--out", "/nonexistent/x"]) == 2
    assert capsys.readouterr().err.strip().endswith(f"{quantized}: already quantized")
    assert main(["quantize", "--model", str(dream_ckpt), "--out", str(quantized)]) == 2
    assert capsys.readouterr().err.strip() == f"dg-engine: {quantized}: exists and is not empty"
    with pytest.raises(SystemExit) as exit_:
        main(["quantize", "--model", str(dream_ckpt), "--out", "/nonexistent/x",
              "--group-size", "0"])
    assert exit_.value.code == 2
    assert "--group-size: invalid choice: 0 (choose from 32, 64, 128, 256)" in (
        capsys.readouterr().err)
    with pytest.raises(ValueError, match=r"group size 7: the packed int4 ops take \(32, 64"):
        write_quantized(dream_ckpt, Path("/nonexistent/x"), 7)


@pytest.mark.parametrize(("change", "said"), [
    ({"group_size": 0}, "group_size: expected one of 32, 64, 128, 256, got 0"),
    ({"group_size": -64}, "group_size: expected one of 32, 64, 128, 256, got -64"),
    ({"group_size": 48}, "group_size: expected one of 32, 64, 128, 256, got 48"),
    ({"group_size": "64"}, "group_size: expected one of 32, 64, 128, 256, got '64'"),
    ({"group_size": 64.0}, "group_size: expected one of 32, 64, 128, 256, got 64.0"),
    ({"group_size": True}, "group_size: expected one of 32, 64, 128, 256, got True"),
    ({"group_size": None}, "group_size: expected one of 32, 64, 128, 256, got None"),
    ({"format": "dg-engine int4 v2"}, "format: expected 'dg-engine int4 v1' (written by "
                                      "dg-engine quantize), got 'dg-engine int4 v2'"),
    ({"scheme": None}, "weights quantized with scheme None; dg-engine loads its own 'int4'"),
    ({"source": 5}, "source: expected the source checkpoint's path, got 5"),
    ({"bits": 4}, "unknown field 'bits' (a 'dg-engine int4 v1' file holds scheme, format, "
                  "group_size, source)"),
])
def test_every_field_of_quantization_json_is_checked_by_name(
        quantized: Path, tmp_path: Path, change: dict, said: str) -> None:
    other = _copy(quantized, tmp_path / "q")
    info = json.loads((other / "quantization.json").read_text())
    (other / "quantization.json").write_text(json.dumps({**info, **change}))
    with pytest.raises(CheckpointError) as refused:
        Engine.load(str(other), device="cpu", dtype="int4")
    assert str(refused.value).startswith(f"{other / 'quantization.json'}: {said}")


def test_a_command_given_a_bad_quantization_json_says_which_field(
        quantized: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from dg_lsp.cli import main as dg_lsp

    other = _copy(quantized, tmp_path / "g0")
    info = json.loads((other / "quantization.json").read_text())
    (other / "quantization.json").write_text(json.dumps({**info, "group_size": 0}))
    source = tmp_path / "a.py"
    source.write_text("def add(a, b):\n    return \n")
    assert dg_lsp(["complete", f"{source}:2:12", "--model", str(other), "--dtype", "int4",
                   "--engine", "inproc"]) == 2
    assert capsys.readouterr().err == (
        f"dg-lsp: cannot load the model: {other / 'quantization.json'}: group_size: expected "
        "one of 32, 64, 128, 256, got 0\n")


def test_int4_layers_refuse_a_group_size_the_ops_do_not_take() -> None:
    from torch import nn

    with pytest.raises(ValueError, match=r"int4 group size 0: the packed int4 ops take 32, "):
        int4.quantize_int4(nn.Sequential(nn.Linear(64, 32)), 0)


def _interrupting_save(tensors: dict, path: str, metadata: dict) -> None:
    Path(path).write_bytes(b"half a file")
    raise KeyboardInterrupt


def test_an_interrupted_quantize_leaves_no_out_folder_and_a_rerun_writes_it(
        dream_ckpt: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from engine.models import quantized as module

    out = tmp_path / "dream-int4"
    monkeypatch.setattr(module, "save_file", _interrupting_save)
    assert main(["quantize", "--model", str(dream_ckpt), "--out", str(out)]) == 130
    assert capsys.readouterr().err == "dg-engine: interrupted\n"
    assert list(tmp_path.iterdir()) == []  # neither `out` nor the folder it was written in
    monkeypatch.undo()
    assert main(["quantize", "--model", str(dream_ckpt), "--out", str(out)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dream-int4"]
    assert json.loads((out / "quantization.json").read_text())["group_size"] == 64


def test_a_quantize_failing_midway_leaves_no_out_folder(
        dream_ckpt: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from engine.models import quantized as module

    def unreadable(src: Path, dst: Path) -> None:
        raise PermissionError(13, "Permission denied", str(src))

    # The weights are written, then the source's tokenizer cannot be read.
    out = tmp_path / "out" / "dream-int4"
    monkeypatch.setattr(module.shutil, "copyfile", unreadable)
    assert main(["quantize", "--model", str(dream_ckpt), "--out", str(out)]) == 2
    assert capsys.readouterr().err == (
        f"dg-engine: [Errno 13] Permission denied: '{dream_ckpt / 'config.json'}'\n")
    assert list(out.parent.iterdir()) == []
    monkeypatch.undo()
    # An empty `out` the user made stays theirs, and is written into when a rerun succeeds.
    out.mkdir()
    monkeypatch.setattr(module, "save_file", _interrupting_save)
    assert main(["quantize", "--model", str(dream_ckpt), "--out", str(out)]) == 130
    assert [p.name for p in out.parent.iterdir()] == ["dream-int4"] and not any(out.iterdir())
    monkeypatch.undo()
    assert main(["quantize", "--model", str(dream_ckpt), "--out", str(out)]) == 0
    assert (out / "model.safetensors").is_file()


def test_a_source_whose_tensor_cannot_be_read_writes_nothing(
        dream_ckpt: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = _copy(dream_ckpt, tmp_path / "cut")
    weights = next(source.glob("*.safetensors"))
    weights.write_bytes(weights.read_bytes()[:-1000])
    out = tmp_path / "dream-int4"
    assert main(["quantize", "--model", str(source), "--out", str(out)]) == 2
    assert "truncated: tensor '" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cut"]
