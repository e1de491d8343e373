"""Training rows with several holes (engine.train.examples.multi_split): whole lines cut out,
the code between them kept, only the holes masked, and nothing changed where it is not asked."""

from __future__ import annotations

import numpy as np
import pytest

from engine.train.examples import ExampleMaker, SpecialIds

NL = 6  # the one token that starts a line in the stream below
IDS = SpecialIds(eos=0, pad=1, mask=2, fim_prefix=3, fim_suffix=4, fim_middle=5)


def line_stream(lines: int = 200) -> tuple[np.ndarray, np.ndarray]:
    """Lines of 2, 3 and 4 distinct tokens after their NL: every token says where it came
    from. (tokens, the newline table)."""
    stream, nxt = [], 10
    for j in range(lines):
        stream.append(NL)
        for _ in range(j % 3 + 2):
            stream.append(nxt)
            nxt += 1
    newline = np.zeros(nxt, dtype=bool)
    newline[NL] = True
    return np.array(stream, dtype=np.uint16), newline


def maker(seq_len: int = 64, share: float = 1.0) -> ExampleMaker:
    tokens, newline = line_stream()
    return ExampleMaker(tokens, newline, IDS, seq_len, uniform_fraction=0.0,
                        multi_hole_share=share)


def in_stream(tokens: np.ndarray, seq: np.ndarray) -> bool:
    """Whether `seq` is a slice of `tokens` (every token but NL occurs once there)."""
    at = int(np.flatnonzero(seq != NL)[0])
    start = int(np.flatnonzero(tokens == seq[at])[0]) - at
    return start >= 0 and tokens[start:start + seq.size].tolist() == seq.tolist()


def test_a_seeded_row_has_its_holes_kept_code_and_masks_exactly() -> None:
    texts, middles, sizes = maker().multi_split(np.random.default_rng(0))
    # Two holes, one line and two lines, with one line of kept code between them.
    assert [m.tolist() for m in middles] == [[6, 415, 416], [6, 420, 421, 422, 423, 6, 424, 425]]
    assert sizes == [8, 16]
    assert [t.tolist() for t in texts] == [
        [6, 397, 398, 6, 399, 400, 401, 6, 402, 403, 404, 405, 6, 406, 407, 6, 408, 409, 410,
         6, 411, 412, 413, 414],
        [6, 417, 418, 419],
        [6, 426, 427, 428, 6, 429, 430, 431, 432, 6, 433, 434],
    ]

    targets, masked = maker().masked_batch(np.random.default_rng(0), 1)
    pad, eos = IDS.pad, IDS.eos
    assert targets[0].tolist() == [
        149, 6, 150, 151, 152, 153, 6, 154, 155,  # prefix: 0-8
        6, 156, 157, 158, 6, 159, 160, 161, 162, eos, *[pad] * 6,  # hole 1: 9-24
        6, 163, 164, 6, 165, 166, 167, 6, 168, 169, 170, 171, 6, 172, 173,  # kept: 25-39
        6, 174, 175, 176, eos, *[pad] * 11,  # hole 2: 40-55
        6, 177, 178, 179, 180, 6, 181, 182]  # suffix: 56-63
    # Hidden: positions of the two holes only (this row's noise level hides 18 of 32).
    assert np.flatnonzero(masked[0]).tolist() == [
        9, 10, 11, 12, 16, 22, 23, 42, 44, 45, 46, 47, 49, 50, 51, 52, 53, 55]


@pytest.mark.parametrize("seq_len", [64, 256])
def test_every_row_is_the_stream_with_whole_lines_cut_out(seq_len: int) -> None:
    m = maker(seq_len)
    holes_seen = []
    for seed in range(60):
        texts, middles, sizes = m.multi_split(np.random.default_rng(seed))
        holes_seen.append(len(middles))
        assert 1 <= len(middles) <= 3 and len(texts) == len(middles) + 1
        assert sum(t.size for t in texts) + sum(sizes) == seq_len
        assert texts[0].size >= 8 and texts[-1].size >= 8
        # Put back in place, the holes' lines and the code around them are the stream.
        pieces = [x for pair in zip(texts, middles, strict=False) for x in pair]
        assert in_stream(m.tokens, np.concatenate([*pieces, texts[-1]]))
        for middle, n, after in zip(middles, sizes, texts[1:], strict=True):
            # Whole lines, with room for the EOS; the next line (kept code or the suffix)
            # starts right after.
            assert middle[0] == NL and after[0] == NL and middle.size < n
    assert holes_seen.count(1) < len(holes_seen) // 3
    assert 3 in holes_seen if seq_len == 256 else True


def test_a_row_hides_only_its_holes_each_its_line_eos_and_pad() -> None:
    m = maker(128)
    for seed in range(30):
        texts, middles, sizes = m.multi_split(np.random.default_rng(seed))
        row, maskable = m.multi_row(np.random.default_rng(seed))
        want_row, want_mask = [texts[0].tolist()], [[False] * texts[0].size]
        for middle, n, text in zip(middles, sizes, texts[1:], strict=True):
            want_row += [[*middle.tolist(), IDS.eos, *[IDS.pad] * (n - middle.size - 1)],
                         text.tolist()]
            want_mask += [[True] * n, [False] * text.size]
        assert row.tolist() == sum(want_row, [])
        assert maskable.tolist() == sum(want_mask, [])


def test_without_the_share_rows_are_cut_as_before() -> None:
    tokens, newline = line_stream()
    plain = ExampleMaker(tokens, newline, IDS, 64, uniform_fraction=0.0)
    rows, hidden = plain.masked_batch(np.random.default_rng(5), 8)
    again = maker(share=0.0).masked_batch(np.random.default_rng(5), 8)
    assert rows.tolist() == again[0].tolist() and hidden.tolist() == again[1].tolist()
    assert [int((row == IDS.eos).sum()) for row in rows] == [1] * 8
