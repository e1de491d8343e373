"""The folders and files a training run reads and keeps, shared by `dg-engine train`,
`dg-engine distill` and `dg-engine merge`.

- The corpus (`--data`) and the output folder (`--out`) are checked before any work: a run
  that can only fail at its end (an `--out` that is a file, not writable, or the checkpoint it
  starts from) must fail at its start, with the path named.
- State files are written whole or not at all (`replacing`): an interrupted save leaves the
  previous file, so the run can always resume.
- State files are loaded as tensors and plain values only (`load_state`): a state file is
  data, and a crafted pickle in a shared runs folder must not run code. A file that cannot be
  read is named, with what to delete to start afresh.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

# What `dg-engine corpus` writes that a run reads.
CORPUS_FILES = ("tokenizer.json", "train.bin", "val.bin")


def check_corpus(data: Path, tokenizer_from: str | None = None) -> None:
    """ValueError naming `data` unless it is a `dg-engine corpus` folder; the message says how
    to build one (with `--tokenizer-from` when the run starts from a checkpoint)."""
    build = f"`dg-engine corpus --out {data}" + (
        f" --tokenizer-from {tokenizer_from}`" if tokenizer_from else "`")
    if not data.is_dir():
        raise ValueError(f"--data {data}: no such folder; build the corpus first with {build}")
    missing = [name for name in CORPUS_FILES if not (data / name).is_file()]
    if missing:
        raise ValueError(f"--data {data}: no {' or '.join(missing)} in it, so not a corpus "
                         f"folder; build one with {build}")


def check_output_folder(out: Path, inputs: Iterable[Path] = ()) -> None:
    """ValueError naming `out` unless a run can write its results there: not a file, not one
    of the checkpoint folders `inputs` it reads (it would replace them), and writable (the
    folder is created, and a file made and removed in it)."""
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out}: is a file, not a folder; name a folder for the results")
    for source in inputs:
        if out.resolve() == source.resolve():
            raise ValueError(f"--out {out}: is the checkpoint the run reads ({source}) and would "
                             "be replaced; name another folder")
    probe = out / ".dg-engine-write-test"
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe.touch()
        probe.unlink()
    except OSError as exc:
        raise ValueError(f"--out {out}: cannot write there ({exc.strerror or exc})") from None


@contextmanager
def replacing(path: Path) -> Iterator[Path]:
    """A temporary path beside `path` to write instead of it; when the block ends without an
    error the file is flushed to disk (fsync) and renamed over `path` (os.replace, atomic on
    one file system), else it is removed. Either way `path` is the old file or the new one,
    never half of one: a save cut short by a crash, Ctrl-C or a full disk loses nothing.

    The temporary name ends in `.tmp`, so globs for weights (`*.safetensors`) never see it."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        yield tmp
        with open(tmp, "rb+") as written:
            os.fsync(written.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_folder(path.parent)  # the rename itself survives a power cut


def write_text(path: Path, text: str) -> None:
    """`path.write_text(text)`, whole or not at all (`replacing`)."""
    with replacing(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def _fsync_folder(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # a platform that cannot open a folder (Windows): the rename is enough
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def save_state(state: dict[str, Any], path: Path) -> None:
    """torch.save `state` to `path`, whole or not at all."""
    with replacing(path) as tmp:
        torch.save(state, tmp)


def state_error(path: Path, why: str) -> ValueError:
    """The error for a state file a run cannot resume from: the file, why, and what to do."""
    return ValueError(f"{path}: {why}; delete this file to start afresh (or give another --out)")


def load_state(path: Path, keys: Iterable[str] = (), map_location: Any = "cpu"
               ) -> dict[str, Any] | None:
    """The state saved in `path` (None when there is none), loaded as weights only: tensors,
    numbers, strings and containers of them. A file holding other objects is refused, never
    unpickled: unpickling runs whatever code the file names. `keys` must all be in it."""
    if not path.exists():
        return None
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as exc:  # noqa: BLE001 - torch raises any kind for a damaged file
        if "Weights only load failed" in str(exc):
            raise state_error(path, "refused: it holds Python objects, not only tensors and "
                              "numbers, and loading it could run code") from None
        reason = str(exc).strip().split("\n", 1)[0][:200] or type(exc).__name__
        raise state_error(path, f"cannot be read, damaged or cut short ({reason})") from None
    missing = [k for k in keys if not isinstance(state, dict) or k not in state]
    if missing:
        raise state_error(path, f"not a state this command saved (no {', '.join(missing)})")
    return state
