"""Training examples cut from the token stream, shaped like the holes an editor asks to fill.

An infill example is a window of code with one span taken out: prefix, the span followed by
EOS and pad up to a hole size the model does not know in advance, then the suffix. The masked
objective hides a random fraction of the hole; the AR baseline sees the same split as a PSM
fill-in-the-middle sequence. Spans follow the editor's hole kinds (rest of line, next line,
a few lines, random spans) and line boundaries are token boundaries by construction of the
tokenizer (a newline and its indentation are one pre-token).

A multi-hole example (`multi_hole_share` of the infill rows) has 2 or 3 holes of whole lines
with unmasked code between them: prefix, hole, kept, hole, ..., suffix, each hole sized from
the same buckets. It is the canvas a HolesRequest decodes jointly (engine.decode.holes), where
a one-hole model meets masks in the code after its hole that it never saw in training.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass
from itertools import pairwise
from typing import Protocol

import numpy as np

# Hole sizes the engine uses; a model trained on these learns to end early inside them.
HOLE_BUCKETS = (8, 16, 24, 32, 48, 64, 96, 128)
MAX_SPAN = 120
KINDS = ("rest_of_line", "next_line", "lines", "span")
KIND_WEIGHTS = (0.35, 0.2, 0.25, 0.2)
# Multi-hole rows: lines per hole (mostly one statement, as the editor's stubs and the
# multi-hole eval cut them), lines of kept code between holes (never none: two holes that
# touch are one hole), and the room left for the prefix and the suffix at least.
HOLES_PER_ROW = (2, 3)
HOLE_LINES, HOLE_LINE_WEIGHTS = (1, 2, 3), (0.7, 0.2, 0.1)
KEPT_LINES = (1, 6)  # inclusive
MAX_MULTI_SPAN = 47  # a hole's tokens at most, so its bucket is at most 64
MIN_CONTEXT = 8


@dataclass
class SpecialIds:
    eos: int
    pad: int
    mask: int
    fim_prefix: int
    fim_suffix: int
    fim_middle: int


class EditRows(Protocol):
    """What the maker reads of the edit examples it mixes in (engine.train.edit_examples.EditSet
    is one); a protocol, so this module needs nothing from that one, which builds on it."""

    def __len__(self) -> int: ...

    def row(self, i: int, seq_len: int, ids: SpecialIds, rng: np.random.Generator
            ) -> tuple[np.ndarray, np.ndarray]: ...


class ExampleMaker:
    """Cuts batches from a uint16 token stream; `newline` marks tokens that start a line."""

    def __init__(self, tokens: np.ndarray, newline: np.ndarray, ids: SpecialIds,
                 seq_len: int, uniform_fraction: float = 0.2, edits: EditRows | None = None,
                 edit_share: float = 0.0, multi_hole_share: float = 0.0) -> None:
        if tokens.size < 3 * seq_len + 1:
            raise ValueError(f"corpus of {tokens.size} tokens is too small for seq_len {seq_len}")
        self.tokens = tokens.astype(np.int64)
        self.nl_pos = np.flatnonzero(newline[self.tokens])
        self.ids = ids
        self.seq_len = seq_len
        self.uniform_fraction = uniform_fraction
        # Synthetic edits (engine.train.edit_examples): this share of the masked rows.
        self.edits = edits
        self.edit_share = edit_share if edits is not None and len(edits) else 0.0
        # This share of the infill rows (not edits, not uniform) has 2-3 holes (multi_split).
        self.multi_hole_share = multi_hole_share

    def _next_newline(self, pos: int, skip: int = 0) -> int:
        k = int(np.searchsorted(self.nl_pos, pos)) + skip
        return int(self.nl_pos[k]) if k < self.nl_pos.size else pos

    def split(self, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
        """(prefix, middle, suffix, hole size) with len(prefix) + hole + len(suffix) == seq_len."""
        L = self.seq_len
        start = int(rng.integers(0, self.tokens.size - 3 * L))
        cursor = start + int(rng.integers(1, L * 3 // 4))
        kind = KINDS[rng.choice(len(KINDS), p=KIND_WEIGHTS)]
        if kind == "rest_of_line":
            i = cursor
            j = self._next_newline(i)
        elif kind == "next_line":
            i = self._next_newline(cursor) + 1
            j = self._next_newline(i)
        elif kind == "lines":
            i = self._next_newline(cursor) + 1
            j = self._next_newline(i, skip=int(rng.integers(1, 12)))
        else:
            i = cursor
            j = i + int(rng.integers(1, 64))
        max_hole = min(HOLE_BUCKETS[-1], L // 2)
        j = min(max(j, i), i + min(MAX_SPAN, max_hole - 1))
        span = j - i
        n = self._bucket(span, rng, max_hole)
        p_len = min(i - start, L - n - 8)
        s_len = L - p_len - n
        return self.tokens[i - p_len:i], self.tokens[i:j], self.tokens[j:j + s_len], n

    def _bucket(self, span: int, rng: np.random.Generator, max_hole: int) -> int:
        """The hole size for a span: the smallest bucket that fits it and its EOS, or
        sometimes the next one up (the model does not know the size in advance)."""
        b = bisect_left(HOLE_BUCKETS, span + 1) + int(rng.integers(0, 2))
        b = min(b, len(HOLE_BUCKETS) - 1)
        return min(max(HOLE_BUCKETS[b], span + 1), max_hole)

    def multi_split(self, rng: np.random.Generator
                    ) -> tuple[list[np.ndarray], list[np.ndarray], list[int]] | None:
        """(texts, middles, hole sizes) of a row with 2-3 holes of whole lines: texts are the
        prefix, the kept code between holes and the suffix (one more than the holes), and
        the texts' lengths plus the sizes make seq_len. A hole starts at a line's first token
        (the newline and its indentation, which the engine heals into the hole) and ends
        before the next line's; a hole whose lines are longer than MAX_MULTI_SPAN keeps
        their start. Holes that would leave the prefix or the suffix under MIN_CONTEXT
        tokens are left out, down to one; None where the window has no line to cut."""
        L = self.seq_len
        start = int(rng.integers(0, self.tokens.size - 3 * L))
        k = int(np.searchsorted(self.nl_pos, start + int(rng.integers(MIN_CONTEXT, L // 2))))
        want = int(rng.choice(HOLES_PER_ROW))
        cuts: list[tuple[int, int, int]] = []  # (start, end, size) in the stream
        room = L - 2 * MIN_CONTEXT
        while len(cuts) < want:
            lines = int(rng.choice(HOLE_LINES, p=HOLE_LINE_WEIGHTS))
            if k + lines >= self.nl_pos.size or self.nl_pos[k] - start > L:
                break
            i = int(self.nl_pos[k])
            j = min(int(self.nl_pos[k + lines]), i + MAX_MULTI_SPAN)
            n = self._bucket(j - i, rng, min(HOLE_BUCKETS[-1], L // 2))
            kept = i - cuts[-1][1] if cuts else 0
            if kept + n > room:
                break
            cuts.append((i, j, n))
            room -= kept + n
            k += lines + int(rng.integers(KEPT_LINES[0], KEPT_LINES[1] + 1))
        if not cuts:
            return None
        first, last = cuts[0][0], cuts[-1][1]
        body = last - first + sum(n - (j - i) for i, j, n in cuts)  # kept code and holes
        p_len = min(first - start, L - body - MIN_CONTEXT)
        texts = [self.tokens[first - p_len:first]]
        texts += [self.tokens[a[1]:b[0]] for a, b in pairwise(cuts)]
        texts.append(self.tokens[last:last + L - p_len - body])
        return texts, [self.tokens[i:j] for i, j, _ in cuts], [n for _, _, n in cuts]

    def _hole(self, middle: np.ndarray, n: int) -> np.ndarray:
        hole = np.full(n, self.ids.pad, dtype=np.int64)
        hole[:middle.size] = middle
        hole[middle.size] = self.ids.eos
        return hole

    def multi_row(self, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """(targets, maskable) of one multi_split row: only the holes are maskable; a window
        with no line to cut gives a one-hole row (split)."""
        cut = self.multi_split(rng)
        if cut is None:
            prefix, middle, suffix, n = self.split(rng)
            cut = [prefix, suffix], [middle], [n]
        texts, middles, sizes = cut
        parts, maskable = [texts[0]], [np.zeros(texts[0].size, dtype=bool)]
        for middle, n, text in zip(middles, sizes, texts[1:], strict=True):
            parts += [self._hole(middle, n), text]
            maskable += [np.ones(n, dtype=bool), np.zeros(text.size, dtype=bool)]
        return np.concatenate(parts), np.concatenate(maskable)

    def masked_batch(self, rng: np.random.Generator, batch: int) -> tuple[np.ndarray, np.ndarray]:
        """(targets, masked), each [batch, seq_len]; the model sees masked positions as MASK."""
        L, ids = self.seq_len, self.ids
        targets = np.empty((batch, L), dtype=np.int64)
        maskable = np.zeros((batch, L), dtype=bool)
        for r in range(batch):
            if self.edits is not None and rng.random() < self.edit_share:
                i = int(rng.integers(0, len(self.edits)))
                targets[r], maskable[r] = self.edits.row(i, L, ids, rng)
                continue
            if rng.random() < self.uniform_fraction:
                start = int(rng.integers(0, self.tokens.size - L))
                targets[r] = self.tokens[start:start + L]
                maskable[r, 1:] = True
                continue
            # Drawn only when asked for, so that rows without it are cut as they always were.
            if self.multi_hole_share and rng.random() < self.multi_hole_share:
                targets[r], maskable[r] = self.multi_row(rng)
                continue
            prefix, middle, suffix, n = self.split(rng)
            targets[r] = np.concatenate([prefix, self._hole(middle, n), suffix])
            maskable[r, prefix.size:prefix.size + n] = True
        # Noise level t ~ U(0, 1] per row; every row hides at least one maskable position.
        t = rng.random((batch, 1))
        masked = maskable & (rng.random((batch, L)) < t)
        for r in np.flatnonzero(~masked.any(axis=1)):
            masked[r, rng.choice(np.flatnonzero(maskable[r]))] = True
        return targets, masked

    def ar_batch(self, rng: np.random.Generator, batch: int,
                 fim_rate: float = 0.9) -> tuple[np.ndarray, np.ndarray]:
        """(tokens, loss_mask) of shape [batch, seq_len] for next-token prediction (PSM FIM)."""
        L, ids = self.seq_len, self.ids
        tokens = np.full((batch, L), ids.pad, dtype=np.int64)
        for r in range(batch):
            if rng.random() >= fim_rate:
                start = int(rng.integers(0, self.tokens.size - L))
                tokens[r] = self.tokens[start:start + L]
                continue
            prefix, middle, suffix, _ = self.split(rng)
            room = L - 4 - middle.size
            suffix = suffix[:max(0, room - prefix.size)]
            prefix = prefix[prefix.size - min(prefix.size, room - suffix.size):]
            seq = np.concatenate([[ids.fim_prefix], prefix, [ids.fim_suffix], suffix,
                                  [ids.fim_middle], middle, [ids.eos]])
            tokens[r, :seq.size] = seq
        return tokens, tokens != ids.pad
