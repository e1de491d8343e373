"""`dg-engine corpus`: gather, deduplicate, split and tokenize the training code.

The default recipe uses only code every install has: the running Python's standard library
(without its tests) and the Python sources of the installed dependencies. Evaluation data is
never read. Output folder:

    files.txt      training files, one path per line
    heldout.txt    held-out files (never trained on; `dg-lsp eval --cases-from DIR/heldout`)
    heldout/       copies of the held-out files
    tokenizer.json the BPE vocabulary trained on the training files
    train.bin      uint16 token ids, files joined by <|file_sep|>
    val.bin        the same for a few validation files (loss only)
    meta.json      counts, sources, vocabulary size
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import shutil
import sys
import sysconfig
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer as HFTokenizer

from engine.bounds import CORPUS_MB_RANGE, VOCAB_SIZE_RANGE, bounded_argument
from engine.text.tokenizer import FILE_SEP, save_tokenizer, train_bpe

# Folders that hold tests, fixtures or vendored copies rather than the code users write.
SKIP_PARTS = {
    "test", "tests", "testing", "idle_test", "__pycache__", "site-packages", "_vendor",
    "vendor", "benchmarks", "examples", "docs", "fixtures", "testdata",
}
# Anything that might hold evaluation data is refused outright, and so are the third-party
# packages `dg-lsp bench` measures on (dg_lsp/measure/eval/heldout.py), the second held-out
# package the distillation is judged on (scripts/experiments/distill_eval.py) and the third the
# confidence gate is set on (scripts/experiments/gate_packages.py): no model here may train on
# them.
BENCHMARK_PACKAGES = ("more_itertools", "boltons", "toolz")
FORBIDDEN = re.compile(r"human[-_]?eval|shared/eval|(?:^|/)(?:"
                       + "|".join(BENCHMARK_PACKAGES) + r")(?:/|\.py$|-[\d.]+\.dist-info)",
                       re.IGNORECASE)
MAX_FILE_BYTES = 400_000
HELDOUT_EVERY = 40  # one file in 40 (by a hash of its relative path) is held out
VAL_EVERY = 97


def default_sources() -> list[Path]:
    """The standard library and the site-packages of the running interpreter."""
    paths = sysconfig.get_paths()
    return [Path(paths["stdlib"]), Path(paths["purelib"])]


def iter_source_files(roots: Iterable[Path], pattern: str = "*.py") -> Iterator[tuple[Path, str]]:
    """(path, path relative to its root) for every candidate file, in a stable order."""
    for root in roots:
        for path in sorted(root.rglob(pattern)):
            rel = path.relative_to(root)
            # site-packages is itself a source root; skip it only when nested in another root.
            parts = set(rel.parts[:-1])
            if parts & SKIP_PARTS or rel.name.startswith("test_") or FORBIDDEN.search(str(path)):
                continue
            if path.is_file() and path.stat().st_size <= MAX_FILE_BYTES:
                yield path, str(rel)


def read_code(path: Path) -> str | None:
    try:
        text = path.read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError):
        return None
    # Minified or generated files teach nothing about code people write.
    if not text.strip() or max(map(len, text.splitlines() or [""])) > 400:
        return None
    return text.replace("\r\n", "\n")


def minhash(text: str, seeds: int = 16) -> tuple[int, ...]:
    """Min-hash signature over the file's distinct stripped lines (near-duplicate detection)."""
    lines = {ln.strip() for ln in text.splitlines() if len(ln.strip()) > 3}
    if not lines:
        return (0,) * seeds
    hashes = np.array([int.from_bytes(hashlib.blake2b(ln.encode(), digest_size=8).digest(),
                                      "little") for ln in lines], dtype=np.uint64)
    rng = np.random.default_rng(0)
    a = rng.integers(1, 2**61, size=seeds, dtype=np.uint64) | np.uint64(1)
    b = rng.integers(0, 2**61, size=seeds, dtype=np.uint64)
    with np.errstate(over="ignore"):
        mixed = hashes[None, :] * a[:, None] + b[:, None]
    return tuple(int(x) for x in mixed.min(axis=1))


def deduplicate(files: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Drop exact duplicates and near-duplicates (4 of 4 min-hashes in any band of 4 equal)."""
    seen_exact: set[bytes] = set()
    bands: set[tuple[int, tuple[int, ...]]] = set()
    kept = []
    for rel, text in files:
        digest = hashlib.sha1(re.sub(r"\s+", " ", text).encode()).digest()
        if digest in seen_exact:
            continue
        seen_exact.add(digest)
        sig = minhash(text)
        keys = [(i, sig[i:i + 4]) for i in range(0, len(sig), 4)]
        if any(k in bands for k in keys):
            continue
        bands.update(keys)
        kept.append((rel, text))
    return kept


def split_of(rel: str) -> str:
    h = int(hashlib.sha1(rel.encode()).hexdigest(), 16)
    if h % HELDOUT_EVERY == 0:
        return "heldout"
    return "val" if h % VAL_EVERY == 1 else "train"


def _path_hash(file: tuple[str, str]) -> bytes:
    return hashlib.sha1(file[0].encode()).digest()


def _sample(files: list[tuple[str, str]], limit: int | None) -> Iterator[str]:
    """Texts for the BPE trainer: all of them, or a hash-ordered sample up to `limit` bytes."""
    total = 0
    for _, text in sorted(files, key=_path_hash):
        if limit is not None and total >= limit:
            return
        total += len(text)
        yield text


def tokenize_files(tok, texts: list[str]) -> np.ndarray:
    sep = tok.token_to_id(FILE_SEP)
    out: list[np.ndarray] = []
    for i in range(0, len(texts), 256):
        for enc in tok.encode_batch(texts[i:i + 256], add_special_tokens=False):
            out.append(np.asarray(enc.ids, dtype=np.uint16))
            out.append(np.asarray([sep], dtype=np.uint16))
    return np.concatenate(out) if out else np.zeros(0, dtype=np.uint16)


def gather_splits(
    sources: list[Path], pattern: str = "*.py"
) -> tuple[list[tuple[str, str]], dict[str, list[tuple[str, str]]]]:
    """Every readable file (rel, text), and the deduplicated files by split."""
    raw = []
    seen_rel: set[str] = set()
    for path, rel in iter_source_files(sources, pattern):
        text = read_code(path)
        if text is not None and rel not in seen_rel:
            seen_rel.add(rel)
            raw.append((rel, text))
    splits: dict[str, list[tuple[str, str]]] = {"train": [], "val": [], "heldout": []}
    for rel, text in deduplicate(raw):
        splits[split_of(rel)].append((rel, text))
    return raw, splits


def write_heldout(out: Path, files: list[tuple[str, str]]) -> None:
    """`heldout/` (copies, the eval's `--cases-from`) and `heldout.txt` (their paths)."""
    heldout_dir = out / "heldout"
    shutil.rmtree(heldout_dir, ignore_errors=True)
    for rel, text in files:
        dest = heldout_dir / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(text, encoding="utf-8")
    (out / "heldout.txt").write_text("".join(rel + "\n" for rel, _ in files))


def build_corpus(
    out: Path,
    sources: list[Path],
    vocab_size: int = 8192,
    max_train_bytes: int | None = None,
    pattern: str = "*.py",
    tokenizer_sample_bytes: int | None = None,
    tokenizer_from: Path | None = None,
) -> dict:
    """Gather, deduplicate, split, train the tokenizer and tokenize; returns meta.json's dict.

    `tokenizer_from`: a checkpoint folder whose tokenizer.json is used instead of training
    one, so the corpus's ids are that model's (what fine-tuning and distilling it need)."""
    out.mkdir(parents=True, exist_ok=True)
    raw, splits = gather_splits(sources, pattern)
    deduplicated = sum(len(files) for files in splits.values())
    if max_train_bytes is not None:
        kept, total = [], 0
        # A stable hash order keeps a capped corpus a fair sample of every package.
        for rel, text in sorted(splits["train"], key=_path_hash):
            if total + len(text) > max_train_bytes:
                continue
            kept.append((rel, text))
            total += len(text)
        splits["train"] = kept

    write_heldout(out, splits["heldout"])
    (out / "files.txt").write_text("".join(rel + "\n" for rel, _ in splits["train"]))

    if tokenizer_from is not None:
        tok = HFTokenizer.from_file(str(tokenizer_from / "tokenizer.json"))
    else:
        tok = train_bpe(_sample(splits["train"], tokenizer_sample_bytes), vocab_size)
    save_tokenizer(tok, out)
    train = tokenize_files(tok, [t for _, t in splits["train"]])
    val = tokenize_files(tok, [t for _, t in splits["val"]])
    train.tofile(out / "train.bin")
    val.tofile(out / "val.bin")
    train_bytes = sum(len(t) for _, t in splits["train"])
    meta = {
        "sources": [str(s) for s in sources],
        "files_seen": len(raw),
        "files_after_dedup": deduplicated,
        "train_files": len(splits["train"]),
        "val_files": len(splits["val"]),
        "heldout_files": len(splits["heldout"]),
        "train_bytes": train_bytes,
        "train_tokens": int(train.size),
        "val_tokens": int(val.size),
        "bytes_per_token": round(train_bytes / max(1, train.size), 3),
        "vocab_size": tok.get_vocab_size(),
        "tokenizer_from": str(tokenizer_from) if tokenizer_from is not None else None,
    }
    (out / "meta.json").write_text(json.dumps(meta, indent=2))
    return meta


def run(args: argparse.Namespace) -> int:
    sources = [Path(s) for s in args.source] or default_sources()
    for s in sources:
        if not s.is_dir():
            print(f"dg-engine corpus: source folder {s} does not exist", file=sys.stderr)
            return 2
    if args.heldout_only:
        _, splits = gather_splits(sources, args.glob)
        write_heldout(Path(args.out), splits["heldout"])
        print(f"{len(splits['heldout'])} held-out files in {Path(args.out) / 'heldout'}")
        return 0
    meta = build_corpus(Path(args.out), sources, args.vocab_size,
                        int(args.max_mb * 1e6) if args.max_mb else None, args.glob,
                        int(args.tokenizer_mb * 1e6) if args.tokenizer_mb else None,
                        Path(args.tokenizer_from) if args.tokenizer_from else None)
    print(json.dumps(meta, indent=2))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("corpus", help="gather, deduplicate and tokenize training code")
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--source", action="append", default=[],
                   help="source folder (repeatable); default: stdlib + site-packages")
    p.add_argument("--glob", default="*.py", help="file pattern inside each source")
    p.add_argument("--vocab-size", type=bounded_argument(VOCAB_SIZE_RANGE), default=8192,
                   help="tokens of the trained vocabulary (default: %(default)s)")
    p.add_argument("--max-mb", type=bounded_argument(CORPUS_MB_RANGE), default=None,
                   help="cap on training text, in MB")
    p.add_argument("--tokenizer-mb", type=bounded_argument(CORPUS_MB_RANGE), default=None,
                   help="train the vocabulary on a sample of this many MB (default: all)")
    p.add_argument("--tokenizer-from", metavar="CHECKPOINT",
                   help="tokenize with this checkpoint's tokenizer.json instead of training one "
                        "(a corpus to fine-tune or distill that model on)")
    p.add_argument("--heldout-only", action="store_true",
                   help="only write the held-out files (heldout/, heldout.txt): eval cases")
    p.set_defaults(func=run)
