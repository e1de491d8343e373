"""`dg-engine train` and `dg-engine distill` never lose a run, never run a stranger's code and
never hang (issue #52, cases 1, 4, 5, 6, 7 and 10).

Commands run in this process on a thread (or, where the old behaviour burned the CPU forever,
in a subprocess), each with a timeout: a regression to a hang fails the test instead of
hanging the suite.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import subprocess
import sys
import sysconfig
import threading
from pathlib import Path

import numpy as np
import pytest
import torch

from engine.cli import main as engine_main
from engine.train.corpus import build_corpus
from engine.train.distill import STATE_FILE as DISTILL_STATE
from engine.train.trainer import STATE_FILE as TRAIN_STATE
from engine.train.trainer import BatchStream, TrainConfig, Trainer
from tests.support.tiny_checkpoints import write_dream_checkpoint

ROOT = Path(__file__).resolve().parents[2]
TOY_SOURCE = Path(sysconfig.get_paths()["stdlib"]) / "json"


@pytest.fixture(scope="module")
def teacher(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_dream_checkpoint(tmp_path_factory.mktemp("teacher"), tie=True)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory, teacher: Path) -> Path:
    """Tokenized with the teacher's vocabulary: both train (from scratch or `--init teacher`)
    and distill read it."""
    out = tmp_path_factory.mktemp("corpus")
    build_corpus(out, [TOY_SOURCE], tokenizer_from=teacher)
    return out


def train_args(data: Path, out: Path, *extra: str) -> list[str]:
    return ["train", "--data", str(data), "--out", str(out), "--max-steps", "2",
            "--hidden", "32", "--layers", "2", "--heads", "4", "--kv-heads", "2", "--ffn", "64",
            "--seq-len", "96", "--batch", "4", "--warmup-steps", "2", "--device", "cpu",
            "--threads", "1", "--save-every-minutes", "60", *extra]


def distill_args(teacher: Path, data: Path, out: Path, *extra: str) -> list[str]:
    return ["distill", "--checkpoint", str(teacher), "--data", str(data), "--out", str(out),
            "--max-steps", "2", "--holes", "2", "--val-holes", "1", "--window", "2",
            "--batch", "2", "--warmup-steps", "1", "--check-minutes", "60", "--device", "cpu",
            "--threads", "1", *extra]


def dg_engine(args: list[str], capsys: pytest.CaptureFixture[str], timeout: float = 120
              ) -> tuple[int, str]:
    """(exit status, stderr) of `dg-engine ARGS`, run here on a thread; a command still
    running after `timeout` seconds fails the test."""
    result: list[int | BaseException] = []

    def call() -> None:
        try:
            result.append(engine_main(args))
        except SystemExit as exc:  # argparse refusing an argument
            result.append(int(exc.code or 0))
        except BaseException as exc:  # noqa: BLE001 - reported by the test below
            result.append(exc)

    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    thread.join(timeout)
    assert result, f"dg-engine {' '.join(args[:1])} did not end within {timeout} s"
    if isinstance(result[0], BaseException):
        raise result[0]
    return result[0], capsys.readouterr().err


def dg_engine_process(args: list[str], timeout: float = 90) -> tuple[int, str]:
    """(exit status, stderr) of `dg-engine ARGS` in a subprocess killed after `timeout`:
    for commands that used to never end while burning the CPU."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    try:
        done = subprocess.run([sys.executable, "-m", "engine.cli", *args], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"dg-engine {' '.join(args)} did not end within {timeout} s")
    return done.returncode, done.stderr


def digest(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.iterdir()) if p.is_file()}


class RunsCode:
    """Unpickled, it makes the folder `marker`: what a crafted state file's os.system does."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return (os.mkdir, (str(self.marker),))


# -- case 1: state files are loaded as weights only --------------------------------------


@pytest.mark.parametrize("command", ["distill", "train"])
def test_a_crafted_state_file_is_refused_by_name_and_runs_nothing(
        command: str, teacher: Path, corpus: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    out, marker = tmp_path / "out", tmp_path / "marker"
    out.mkdir()
    state = out / (DISTILL_STATE if command == "distill" else TRAIN_STATE)
    torch.save({"model": RunsCode(marker), "opt": {}, "step": 1, "elapsed": 1.0,
                "tokens_seen": 1, "rng": {}}, state)
    args = (distill_args(teacher, corpus, out) if command == "distill"
            else train_args(corpus, out))
    code, err = dg_engine(args, capsys)
    assert not marker.exists()  # its code never ran
    assert code == 2
    assert str(state) in err and "could run code" in err and "delete this file" in err


# -- case 4: an interrupted save leaves the previous state ---------------------------------


class Interrupted(Exception):
    pass


def test_an_interrupted_save_keeps_the_previous_state_and_the_run_resumes(
        corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = TrainConfig(data=str(corpus), out=str(tmp_path / "run"), minutes=60, max_steps=2,
                      hidden=32, layers=2, heads=4, kv_heads=2, ffn=64, seq_len=96, batch=4,
                      warmup_steps=2, device="cpu", threads=1, save_every_minutes=60)
    trainer = Trainer(cfg)
    trainer.train()
    saved = (tmp_path / "run" / TRAIN_STATE).read_bytes()
    real_save = torch.save

    def cut_short(obj: object, f: object, *args: object, **kwargs: object) -> None:
        """Writes half of what torch.save would, then stops: a kill or a full disk."""
        whole = io.BytesIO()
        real_save(obj, whole)
        half = whole.getvalue()[:len(whole.getvalue()) // 2]
        if hasattr(f, "write"):
            f.write(half)  # type: ignore[union-attr]
        else:
            Path(f).write_bytes(half)  # type: ignore[arg-type]
        raise Interrupted

    trainer.step = 7
    monkeypatch.setattr(torch, "save", cut_short)
    with pytest.raises(Interrupted):
        trainer._save_state()
    monkeypatch.undo()
    assert (tmp_path / "run" / TRAIN_STATE).read_bytes() == saved
    assert not list((tmp_path / "run").glob("*.tmp"))
    assert Trainer(cfg).step == 2


# -- case 5: the output folder is checked before any work ----------------------------------


def test_train_refuses_to_write_over_the_checkpoint_it_fine_tunes(
        teacher: Path, corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ckpt = tmp_path / "ckpt"
    shutil.copytree(teacher, ckpt)
    before = digest(ckpt)
    code, err = dg_engine(train_args(corpus, ckpt, "--init", str(ckpt)), capsys)
    assert code == 2
    assert f"--out {ckpt}" in err and "would be replaced" in err
    assert digest(ckpt) == before  # the checkpoint is not replaced, nothing added
    assert "step " not in err


@pytest.mark.parametrize("command", ["train", "distill"])
def test_an_out_that_is_a_file_is_refused_before_any_work(
        command: str, teacher: Path, corpus: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "weights.bin"
    out.write_text("keep me")
    args = (distill_args(teacher, corpus, out) if command == "distill"
            else train_args(corpus, out))
    code, err = dg_engine(args, capsys)
    assert code == 2
    assert f"--out {out}: is a file" in err
    assert out.read_text() == "keep me"
    assert "step " not in err and "teacher " not in err  # no training, no teacher decoding


def test_an_out_that_cannot_be_written_is_refused_before_any_work(
        corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "a-file").write_text("")
    out = tmp_path / "a-file" / "run"  # a folder inside a file: never writable, even by root
    code, err = dg_engine(train_args(corpus, out), capsys)
    assert code == 2
    assert f"--out {out}: cannot write there" in err
    assert "step " not in err


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_read_only_out_is_refused_before_any_work(
        corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "read-only"
    out.mkdir(mode=0o500)
    try:
        code, err = dg_engine(train_args(corpus, out), capsys)
    finally:
        out.chmod(0o700)
    assert code == 2 and f"--out {out}: cannot write there" in err


# -- case 6: runs that always end ------------------------------------------------------------


class Broken:
    """An example maker whose batches fail, as numpy's "low >= high" did for --seq-len 0."""

    def masked_batch(self, rng: np.random.Generator, batch: int) -> None:
        raise ValueError("low >= high")


def test_an_error_on_the_batch_thread_reaches_the_trainer() -> None:
    stream = BatchStream(Broken(), "masked", batch=4, seed=0)  # type: ignore[arg-type]
    raised: list[BaseException] = []

    def consume() -> None:
        for _ in range(2):  # and again: a second call fails too, it does not wait
            try:
                stream.next()
            except ValueError as exc:
                raised.append(exc)

    thread = threading.Thread(target=consume, daemon=True)
    thread.start()
    thread.join(30)
    assert [str(e) for e in raised] == ["low >= high"] * 2


def test_train_with_seq_len_0_ends_with_a_message(corpus: Path, tmp_path: Path) -> None:
    args = train_args(corpus, tmp_path / "run")
    args[args.index("--seq-len") + 1] = "0"
    code, err = dg_engine_process(args)
    assert code == 2
    assert "--seq-len: expected an integer in 32..8192, got 0" in err
    assert not (tmp_path / "run").exists()


def test_a_distill_budget_that_never_runs_out_is_refused(
        teacher: Path, corpus: Path, tmp_path: Path) -> None:
    args = distill_args(teacher, corpus, tmp_path / "out", "--minutes", "-1")
    args[args.index("--max-steps") + 1] = "0"
    code, err = dg_engine_process(args)
    assert code == 2
    assert "--minutes: expected a finite number in 0.01..1000000.0, got -1.0" in err
    assert not (tmp_path / "out").exists()


# -- cases 6 and 7: every number is bounded, with a message naming the option ---------------


@pytest.mark.parametrize(("command", "option", "value", "expected"), [
    ("distill", "--minutes", "0", "a finite number in 0.01..1000000.0"),
    ("distill", "--max-steps", "0", "an integer in 1..1000000000 or null"),
    ("distill", "--batch", "0", "an integer in 1..65536"),
    ("distill", "--window", "0", "an integer in 1..1024"),
    ("distill", "--holes", "0", "an integer in 1..100000000"),
    ("train", "--batch", "0", "an integer in 1..65536"),
    ("train", "--minutes", "0", "a finite number in 0.01..1000000.0"),
    ("train", "--warmup-steps", "0", "an integer in 1..1000000000"),
])
def test_an_option_out_of_its_range_is_refused_by_name_before_any_work(
        command: str, option: str, value: str, expected: str, teacher: Path, corpus: Path,
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    args = (distill_args(teacher, corpus, out) if command == "distill"
            else train_args(corpus, out))
    if option in args:
        args[args.index(option) + 1] = value
    else:
        args += [option, value]
    code, err = dg_engine(args, capsys)
    assert code == 2
    assert f"{option}: expected {expected}, got" in err
    assert not out.exists()  # refused before any work


def test_a_model_shape_that_cannot_be_built_is_refused(corpus: Path, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    args = train_args(corpus, tmp_path / "out")
    args[args.index("--heads") + 1] = "3"
    code, err = dg_engine(args, capsys)
    assert code == 2 and "--hidden 32 must be --heads 3 times an even head size" in err


# -- case 10: messages that name the file and what to do ------------------------------------


@pytest.mark.parametrize("command", ["train", "distill"])
def test_a_missing_data_folder_is_named_with_how_to_build_it(
        command: str, teacher: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
        ) -> None:
    data, out = tmp_path / "no-corpus", tmp_path / "out"
    args = distill_args(teacher, data, out) if command == "distill" else train_args(data, out)
    code, err = dg_engine(args, capsys)
    assert code == 2
    assert f"--data {data}: no such folder" in err and "`dg-engine corpus --out" in err
    if command == "distill":  # the corpus must use the checkpoint's vocabulary
        assert f"--tokenizer-from {teacher}" in err
    assert not out.exists()


@pytest.mark.parametrize(("command", "name"), [("train", TRAIN_STATE),
                                               ("distill", DISTILL_STATE),
                                               ("distill", "trajectories.pt")])
def test_a_truncated_state_file_is_named_with_what_to_delete(
        command: str, name: str, teacher: Path, corpus: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    out.mkdir()
    whole = io.BytesIO()
    torch.save({"model": {"w": torch.zeros(4096)}, "step": 3}, whole)
    (out / name).write_bytes(whole.getvalue()[:len(whole.getvalue()) // 2])
    args = (distill_args(teacher, corpus, out) if command == "distill"
            else train_args(corpus, out))
    code, err = dg_engine(args, capsys)
    assert code == 2
    assert f"{out / name}: cannot be read, damaged or cut short" in err
    assert "delete this file to start afresh" in err


# -- the same patterns elsewhere: checkpoints written whole, merge's --out ------------------


def test_an_interrupted_weights_save_keeps_the_previous_checkpoint(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from engine.train import trainer

    out = tmp_path / "ckpt"
    out.mkdir()
    old = {"w": torch.ones(64)}
    trainer.write_weights(old, out, shard_mb=15)
    saved = (out / "model.safetensors").read_bytes()

    def cut_short(tensors: dict, filename: object, metadata: object = None) -> None:
        Path(str(filename)).write_bytes(b"half a file")
        raise Interrupted

    monkeypatch.setattr(trainer, "save_file", cut_short)
    with pytest.raises(Interrupted):
        trainer.write_weights({"w": torch.zeros(64)}, out, shard_mb=15)
    assert (out / "model.safetensors").read_bytes() == saved
    assert sorted(p.name for p in out.iterdir()) == ["model.safetensors"]


def test_merge_refuses_to_write_over_a_checkpoint_it_reads(
        teacher: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tuned = tmp_path / "tuned"
    shutil.copytree(teacher, tuned)
    before = digest(tuned)
    code, err = dg_engine(["merge", "--base", str(teacher), "--tuned", str(tuned),
                           "--weight", "0.5", "--out", str(tuned)], capsys)
    assert code == 2 and f"--out {tuned}: is the checkpoint the run reads" in err
    assert digest(tuned) == before


def test_a_merge_cut_short_leaves_no_half_written_file_and_no_checkpoint(
        teacher: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C while a shard is being written, over an earlier merge's folder: no half-written
    shard and no config.json are left, so the folder is not taken for a checkpoint; a rerun
    writes it whole."""
    import engine.train.merge as merging

    tuned = tmp_path / "tuned"
    shutil.copytree(teacher, tuned)
    out = tmp_path / "merged"
    merging.merge(str(teacher), str(tuned), 0.5, out)

    def interrupted(tensors: object, path: object, metadata: object = None) -> None:
        Path(path).write_bytes(b"half a shard")
        raise KeyboardInterrupt

    monkeypatch.setattr(merging, "save_file", interrupted)
    with pytest.raises(KeyboardInterrupt):
        merging.merge(str(teacher), str(tuned), 0.25, out)
    assert "config.json" not in {p.name for p in out.iterdir()}
    assert all(p.read_bytes() != b"half a shard" for p in out.iterdir())
    monkeypatch.undo()
    merging.merge(str(teacher), str(tuned), 0.5, out)
    assert (out / "config.json").is_file() and not list(out.glob("*.tmp"))
