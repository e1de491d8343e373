"""The training pipeline on a toy corpus: corpus → tokenizer → train → checkpoint → infill."""

from __future__ import annotations

import json
import sysconfig
from pathlib import Path

import numpy as np
import pytest

from engine import Engine
from engine.text.tokenizer import FILE_SEP, Tokenizer
from engine.train.corpus import build_corpus, deduplicate, split_of
from engine.train.examples import ExampleMaker
from engine.train.trainer import TrainConfig, Trainer, newline_table, special_ids

TOY_SOURCE = Path(sysconfig.get_paths()["stdlib"]) / "json"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("corpus")
    build_corpus(out, [TOY_SOURCE], vocab_size=400)
    return out


def toy_config(corpus: Path, out: Path, objective: str) -> TrainConfig:
    return TrainConfig(data=str(corpus), out=str(out), objective=objective, minutes=60,
                       max_steps=80, hidden=32, layers=2, heads=4, kv_heads=2, ffn=64,
                       seq_len=96, batch=8, lr=3e-3, warmup_steps=10, device="cpu",
                       threads=1, save_every_minutes=60)


def test_corpus_files_and_meta(corpus: Path) -> None:
    meta = json.loads((corpus / "meta.json").read_text())
    train = np.fromfile(corpus / "train.bin", dtype=np.uint16)
    assert meta["train_tokens"] == train.size
    tok = Tokenizer.from_file(corpus / "tokenizer.json")
    # Files are joined by the separator token, one per training file.
    assert int((train == tok.token_id(FILE_SEP)).sum()) == meta["train_files"]
    listed = (corpus / "files.txt").read_text().split()
    assert all(split_of(rel) == "train" for rel in listed)
    # Indentation after a newline is one token, so lines start on token boundaries.
    pieces = [tok.token_text(i) for i in tok.encode("x\n        y")]
    assert pieces == ["x", "\n        ", "y"]


def test_deduplicate_drops_exact_and_near_copies() -> None:
    body = "".join(f"def f{i}(x):\n    return x + {i}\n" for i in range(40))
    near = body.replace("return x + 7", "return x + 8")
    kept = deduplicate([("a.py", body), ("b.py", body + "\n"), ("c.py", near),
                        ("d.py", "print('other')\n")])
    assert [rel for rel, _ in kept] == ["a.py", "d.py"]


def test_masked_examples_hide_only_the_hole(corpus: Path) -> None:
    tok = Tokenizer.from_file(corpus / "tokenizer.json")
    ids = special_ids(tok)
    maker = ExampleMaker(np.fromfile(corpus / "train.bin", dtype=np.uint16), newline_table(tok),
                         ids, seq_len=96, uniform_fraction=0.0)
    targets, masked = maker.masked_batch(np.random.default_rng(0), 16)
    assert targets.shape == masked.shape == (16, 96)
    for row, hidden in zip(targets, masked, strict=True):
        eos = np.flatnonzero(row == ids.eos)
        assert eos.size >= 1 and hidden.any()
        hole = np.flatnonzero(hidden)
        # Everything hidden lies inside one hole that ends in EOS and pad.
        pads = np.flatnonzero(row == ids.pad)
        if pads.size:
            assert pads.min() > eos.min()
        assert hole.max() <= (pads.max() if pads.size else eos.min())


@pytest.mark.parametrize("objective", ["masked", "ar"])
def test_training_lowers_loss_and_checkpoint_infills(corpus: Path, tmp_path: Path,
                                                      objective: str) -> None:
    trainer = Trainer(toy_config(corpus, tmp_path / "ckpt", objective))
    before = trainer.heldout_loss(batches=2)
    info = trainer.train()
    assert info["steps"] == 80
    assert info["heldout_loss"] < before - 0.5
    cfg = json.loads((tmp_path / "ckpt" / "config.json").read_text())
    assert cfg["model_type"] == ("Dream" if objective == "masked" else "qwen2")

    engine = Engine.load(str(tmp_path / "ckpt"), device="cpu")
    assert engine.config.family == objective
    result = engine.infill("import json\n\ndef load(path):\n    ", "\n", max_tokens=8, seed=0)
    assert 1 <= result.steps <= 8 and result.tokens <= 8
    assert result.finish_reason in ("stop", "length")


def test_training_resumes_from_saved_state(corpus: Path, tmp_path: Path) -> None:
    cfg = toy_config(corpus, tmp_path / "ckpt", "masked")
    cfg.max_steps = 20
    Trainer(cfg).train()
    cfg.max_steps = 30
    resumed = Trainer(cfg)
    assert resumed.step == 20
    assert resumed.train()["steps"] == 30


def test_multi_hole_rows_train_and_leave_the_held_out_loss_one_hole(corpus: Path,
                                                                    tmp_path: Path) -> None:
    """`--multi-hole-share`: that share of the infill rows has 2-3 holes (several EOS); the
    held-out loss stays on one-hole rows, comparable with runs without it."""
    cfg = toy_config(corpus, tmp_path / "ckpt", "masked")
    cfg.multi_hole_share, cfg.max_steps = 1.0, 3
    trainer = Trainer(cfg)
    targets, _ = trainer.maker.masked_batch(np.random.default_rng(0), 16)
    assert max(int((row == trainer.ids.eos).sum()) for row in targets) >= 2
    assert trainer.val_maker.multi_hole_share == 0.0
    assert trainer.train()["config"]["multi_hole_share"] == 1.0
    cfg.multi_hole_share = 1.5
    with pytest.raises(ValueError, match="--multi-hole-share: expected a finite number in 0..1"):
        cfg.check()


def test_the_benchmark_package_is_never_in_a_corpus(tmp_path: Path) -> None:
    from engine.train.corpus import iter_source_files

    for rel in ("more_itertools/more.py", "more_itertools.py", "pkg/more_itertools/recipes.py",
                "boltons/iterutils.py", "keep/more_itertools_fork.py", "keep/plain.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("x = 1\n")
    assert [rel for _, rel in iter_source_files([tmp_path])] == [
        "keep/more_itertools_fork.py", "keep/plain.py"]


def test_fine_tuning_on_edits_hides_only_the_span_and_reloads(corpus: Path, tmp_path: Path
                                                              ) -> None:
    """`dg-engine train --init CHECKPOINT --edits N`: synthetic edits cut from the corpus's
    training files, mixed into the rows; the fine-tuned checkpoint loads like any other."""
    from engine.train.edit_examples import EDITS_FILE, EditSet

    first = toy_config(corpus, tmp_path / "base", "masked")
    first.max_steps = 5
    Trainer(first).train()
    cfg = toy_config(corpus, tmp_path / "tuned", "masked")
    cfg.init, cfg.edits, cfg.edit_share, cfg.max_steps = str(tmp_path / "base"), 40, 1.0, 3
    cfg.seq_len = 256  # the engine's canvas: room for the comments above a line's span
    cfg.hidden = 64  # a flag the initial checkpoint's shape overrides
    trainer = Trainer(cfg)
    edits = EditSet.load(tmp_path / "tuned" / EDITS_FILE)
    assert len(edits) == 40
    tok, ids = trainer.tok, trainer.ids
    targets, hidden = trainer.maker.masked_batch(np.random.default_rng(0), 8)
    for row, mask in zip(targets, hidden, strict=True):
        text = tok.decode(row[:np.flatnonzero(mask).min()].tolist())
        assert "# was: " in text and "# now: " in text  # the edit is shown above the span
    a, b, c, _ = edits.parts["offsets"][0]
    middle = edits.parts["tokens"][b:c].tolist()
    row, maskable = edits.row(0, 256, ids, np.random.default_rng(0))
    hole = np.flatnonzero(maskable)
    assert hole.tolist() == list(range(hole.min(), hole.max() + 1))  # one span, all of it
    assert row[hole.min():hole.min() + len(middle)].tolist() == middle
    assert row[hole.min() + len(middle)] == ids.eos
    assert set(row[hole.min() + len(middle) + 1:hole.max() + 1].tolist()) <= {ids.pad}
    info = trainer.train()
    assert info["steps"] == 3
    # what it was trained from travels with it: the shape it has, the training before
    assert info["config"]["hidden"] == 32 and info["init_training"]["steps"] == 5
    engine = Engine.load(str(tmp_path / "tuned"), device="cpu")
    assert engine.config.hidden_size == 32

    # `dg-engine merge`: the tuned weights moved part of the way back to the base's
    from engine.cli import main as dg_engine
    from engine.train.merge import _tensors

    base, tuned = _tensors(tmp_path / "base"), _tensors(tmp_path / "tuned")
    for weight in (0.0, 1.0, 0.25):
        out = tmp_path / f"merged-{weight}"
        assert dg_engine(["merge", "--base", str(tmp_path / "base"), "--tuned",
                          str(tmp_path / "tuned"), "--weight", str(weight), "--out",
                          str(out)]) == 0
        merged = _tensors(out)
        assert merged.keys() == tuned.keys()
        for name, tensor in merged.items():
            want = base[name].float() + weight * (tuned[name].float() - base[name].float())
            # exact at the ends; in between, the saved dtype's rounding of the float32 sum
            tol = 0 if weight in (0.0, 1.0) else 2e-3 * float(want.abs().max()) + 1e-6
            assert float((tensor.float() - want).abs().max()) <= tol, name
        record = json.loads((out / "config.json").read_text())["dg_lsp_training"]["merged"]
        assert (record["weight"], record["tuned"]["steps"], record["base"]["steps"]) == (
            weight, 3, 5)
        assert Engine.load(str(out), device="cpu").config.hidden_size == 32
    other = toy_config(corpus, tmp_path / "other", "masked")
    other.max_steps, other.hidden = 1, 64
    Trainer(other).train()
    assert dg_engine(["merge", "--base", str(tmp_path / "other"), "--tuned",
                      str(tmp_path / "tuned"), "--weight", "0.5", "--out",
                      str(tmp_path / "bad")]) == 2  # not fine-tuned from it: refused
    assert not (tmp_path / "bad").exists()


def test_training_mixes_the_real_edits_of_a_file_beside_the_synthetic_ones(corpus: Path,
                                                                            tmp_path: Path
                                                                            ) -> None:
    """`dg-engine train --edits N --real-edits FILE`: the real edits `dg-engine version-edits`
    wrote join the N synthetic ones (those the seed always gave), each once, laid out as the
    server asks."""
    from engine.edits.real import real_edits
    from engine.edits.synthetic import model_text
    from engine.train.edit_examples import EDITS_FILE, EditSet, corpus_texts
    from engine.train.real_edits import case_row, save_rows

    old = ("def total_price(items):\n"
           "    count = 0\n"
           "    for item in items:\n"
           "        count += item.price\n"
           "    return count\n")
    cases = real_edits(old, old.replace("count", "total"))
    assert len(cases) == 2
    real = tmp_path / "real.jsonl"
    save_rows(real, [case_row("toy", "1.0", "1.1", "toy/a.py", case) for case in cases])
    cfg = toy_config(corpus, tmp_path / "run", "masked")
    cfg.edits, cfg.edit_share, cfg.max_steps, cfg.seq_len = 6, 1.0, 2, 256
    cfg.real_edits = str(real)
    trainer = Trainer(cfg)
    tok, ids = trainer.tok, trainer.ids
    edits = EditSet.load(tmp_path / "run" / EDITS_FILE)
    assert len(edits) == 8
    synthetic = EditSet.build(corpus_texts(corpus), tok, 6, cfg.seed)
    size = synthetic.parts["tokens"].size
    assert np.array_equal(edits.parts["tokens"][:size], synthetic.parts["tokens"])
    for i, case in enumerate(cases, start=6):
        _, b, c, _ = edits.parts["offsets"][i]
        assert tok.decode(edits.parts["tokens"][b:c].tolist()) == model_text(case)[1]
        row, maskable = edits.row(i, 256, ids, np.random.default_rng(0))
        shown = tok.decode(row[:np.flatnonzero(maskable).min()].tolist())
        assert "# count -> total\n" in shown and shown.endswith("# count ->")
    assert trainer.train()["steps"] == 2
