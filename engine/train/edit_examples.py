"""Training rows that teach a model the edits it will be asked to continue (engine.edits.synthetic).

Each example is a synthetic edit cut from a training file of the corpus (`files.txt` of
`dg-engine corpus`, never its held-out files, the benchmark packages or evaluation data): the
document after the user's edit with the edit shown as comments above the span to write, the
span as the hole. `dg-engine train --init CHECKPOINT --edits N` mixes them into the masked
objective on real code, so the model learns the edits without forgetting the code.
`--real-edits FILE` adds real edits (the hunks between consecutive released versions of
corpus packages, cut by `dg-engine version-edits`) beside the N synthetic ones, each once.
"""

from __future__ import annotations

import json
import sys
from bisect import bisect_left
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from engine.edits.synthetic import SYNTHETIC_KINDS, SyntheticEdit, model_text, synthetic_edit
from engine.text.tokenizer import Tokenizer
from engine.train.corpus import FORBIDDEN
from engine.train.examples import HOLE_BUCKETS, SpecialIds
from engine.train.real_edits import load_cases
from engine.train.state import replacing

EDITS_FILE = "edits.npz"
# rename, respell, literal, keep (the span stays), pattern, parameter
KIND_WEIGHTS = (0.2, 0.15, 0.15, 0.15, 0.15, 0.2)
MAX_MIDDLE = 47  # tokens: a word or a line (dg_lsp.next_edit.suggest LINE_TOKENS, less its EOS)


def corpus_texts(data: Path) -> list[str]:
    """The training files of a corpus folder, read from the sources it was gathered from."""
    meta = json.loads((data / "meta.json").read_text(encoding="utf-8"))
    roots = [Path(s) for s in meta["sources"]]
    texts = []
    for rel in (data / "files.txt").read_text(encoding="utf-8").split("\n"):
        if not rel or FORBIDDEN.search(rel):
            continue
        for root in roots:
            path = root / rel
            if path.is_file() and not FORBIDDEN.search(str(path)):
                texts.append(path.read_text(encoding="utf-8", errors="replace"))
                break
    return texts


class EditSet:
    """Tokenized (prefix, middle, suffix) examples, stored flat with offsets."""

    def __init__(self, parts: dict[str, np.ndarray]) -> None:
        self.parts = parts

    def __len__(self) -> int:
        return int(self.parts["offsets"].shape[0])

    @classmethod
    def build(cls, texts: list[str], tok: Tokenizer, count: int, seed: int,
              real: Sequence[SyntheticEdit] = ()) -> EditSet:
        """`count` synthetic edits cut from `texts`, then each of the `real` ones (real edits
        between released versions: engine.edits.real) whose answer fits."""
        rng = np.random.default_rng(seed)
        flat: list[int] = []
        offsets: list[tuple[int, int, int, int]] = []  # prefix, middle, suffix, end

        def add(example: SyntheticEdit) -> bool:
            prefix, middle, suffix = model_text(example)
            # The canvas sees a window: keep the ends near the span, tokenize those.
            ids = [tok.encode(prefix[-2000:]), tok.encode(middle), tok.encode(suffix[:1000])]
            if not ids[1] or len(ids[1]) > MAX_MIDDLE:
                return False
            start = len(flat)
            for part in ids:
                flat.extend(part)
            offsets.append((start, start + len(ids[0]), start + len(ids[0]) + len(ids[1]),
                            len(flat)))
            return True

        tries = 0
        while len(offsets) < count and tries < 20 * count and texts:
            tries += 1
            text = texts[int(rng.integers(0, len(texts)))]
            kind = SYNTHETIC_KINDS[int(rng.choice(len(SYNTHETIC_KINDS), p=KIND_WEIGHTS))]
            example = synthetic_edit(text, rng, kind)
            if example is not None:
                add(example)
        for example in real:
            add(example)
        return cls({"tokens": np.array(flat, dtype=np.uint16),
                    "offsets": np.array(offsets, dtype=np.int64).reshape(-1, 4)})

    def save(self, path: Path) -> None:
        """Whole or not at all: a run resumes from this file (engine.train.state)."""
        # A file object: given a path, np.savez would add ".npz" to the temporary name.
        with replacing(path) as tmp, open(tmp, "wb") as f:
            np.savez(f, **self.parts)

    @classmethod
    def load(cls, path: Path) -> EditSet:
        with np.load(path) as data:
            return cls({k: data[k] for k in data.files})

    def row(self, i: int, seq_len: int, ids: SpecialIds, rng: np.random.Generator
            ) -> tuple[np.ndarray, np.ndarray]:
        """(targets, maskable) of one canvas: prefix, the span + EOS + pad in a hole of an
        engine bucket, suffix; the hole is what is masked."""
        a, b, c, d = (int(x) for x in self.parts["offsets"][i])
        tokens = self.parts["tokens"]
        prefix, middle, suffix = (tokens[x:y].astype(np.int64) for x, y in ((a, b), (b, c), (c, d)))
        bucket = bisect_left(HOLE_BUCKETS, middle.size + 1) + int(rng.integers(0, 2))
        n = HOLE_BUCKETS[min(bucket, len(HOLE_BUCKETS) - 1)]
        s_len = min(suffix.size, (seq_len - n) // 4)
        p_len = min(prefix.size, seq_len - n - s_len)
        s_len = seq_len - n - p_len  # a short prefix leaves the suffix more room
        hole = np.full(n, ids.pad, dtype=np.int64)
        hole[:middle.size] = middle
        hole[middle.size] = ids.eos
        tail = np.full(s_len, ids.pad, dtype=np.int64)
        tail[:min(s_len, suffix.size)] = suffix[:s_len]
        targets = np.concatenate([prefix[prefix.size - p_len:], hole, tail])
        maskable = np.zeros(seq_len, dtype=bool)
        maskable[p_len:p_len + n] = True
        maskable[0] = False  # Dream's shift: position 0 has no logit predicting it
        return targets, maskable


def load_or_build(out: Path, data: Path, tok: Tokenizer, count: int, seed: int,
                  real: Path | None = None) -> EditSet:
    """The run's edit examples: built once from the corpus (and the real edits of `real`, a
    file of `dg-engine version-edits`), kept beside its state to resume."""
    path = out / EDITS_FILE
    if path.exists():
        return EditSet.load(path)
    cases = load_cases(real) if real is not None else []
    print(f"cutting {count} synthetic edits from {data / 'files.txt'}"
          + (f", with {len(cases)} real ones from {real}" if real is not None else ""),
          file=sys.stderr)
    edits = EditSet.build(corpus_texts(data) if count else [], tok, count, seed, cases)
    if len(edits) == 0:
        raise ValueError(f"{data}: no edit examples could be cut from its training files"
                         + (f" or {real}" if real is not None else ""))
    out.mkdir(parents=True, exist_ok=True)
    edits.save(path)
    return edits
