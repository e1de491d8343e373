"""The texts the file and the repository already hold at the cursor's place
(dg_lsp.repository.candidates): which matcher finds what, in which order, within which bounds."""

from __future__ import annotations

from pathlib import Path

from dg_lsp.repository.candidates import (
    FILE,
    LINE,
    PREVIOUS,
    REPOSITORY,
    TOKENS,
    Candidate,
    candidates,
)
from dg_lsp.repository.index import RepositoryIndex
from dg_lsp.repository.retrieve import RepositoryContext


def at(source: str) -> tuple[str, int]:
    return source.replace("|", ""), source.index("|")


def found(source: str, repository: RepositoryContext | None = None, limit: int = 24
          ) -> list[tuple[str, tuple[str, ...], str, int, int]]:
    text, offset = at(source)
    return [(c.text, c.sources, c.where, c.match, c.count)
            for c in candidates(text, offset, repository, limit)]


def test_an_alike_line_gives_its_rest_and_the_longest_token_match_ranks_first():
    source = ("def pairs(iterable):\n    it = iter(iterable)\n\n"
              "def firsts(iterable):\n    it = |\n    return next(it)\n\n"
              "x = 1\nit = iter(x)\n")
    assert found(source) == [
        # `(iterable):` + `it =` match 6 tokens: the pairs line; the last line only `it =`
        ("iter(iterable)", (LINE, TOKENS), FILE, 6, 1),
        ("iter(x)", (LINE, TOKENS), FILE, 2, 1),
    ]


def test_the_rest_of_the_cursor_line_must_end_the_candidate_too():
    # `b, c` follows `a)` as the cursor follows `d)`: 3 tokens; `a` begins the file: 2
    assert found("g(a)\ng(b, c)\nh(d)\ng(|)\n") == [
        ("b, c", (LINE, TOKENS), FILE, 3, 1), ("a", (LINE, TOKENS), FILE, 2, 1)]


def test_a_token_match_continues_a_line_that_began_otherwise():
    source = "total = sum(values, start=0)\nresult = 2 * sum(|\n"
    assert found(source) == [("values, start=0)", (TOKENS,), FILE, 2, 1)]


def test_at_a_line_start_what_followed_the_same_previous_line():
    source = ("for item in items:\n    seen.add(item)\n    yield item\n\n"
              "for item in items:\n    |\n")
    assert found(source) == [
        ("seen.add(item)", (PREVIOUS, TOKENS), FILE, 5, 1)]


def test_the_cursors_own_line_is_never_read():
    # the line holds `x = 5` after the cursor: no candidate of it, only the other line's
    assert found("x = 1\nx = |5\n") == []
    assert found("x = 1\nx = |\n") == [("1", (LINE, TOKENS), FILE, 2, 1)]


def test_places_holding_the_same_text_add_up():
    source = "a = f(1)\nb = f(2)\nc = f(1)\nd = f(|\n"
    held = {text: count for text, _, _, _, count in found(source)}
    assert held == {"1)": 2, "2)": 1}


def test_at_most_limit_the_nearest_first_among_equals():
    source = "".join(f"v = k{i}\n" for i in range(10)) + "\nv = |\n"
    texts = [text for text, *_ in found(source, limit=3)]
    assert texts == ["k9", "k8", "k7"]


def test_the_files_candidates_come_before_other_files(tmp_path: Path):
    (tmp_path / "other.py").write_text("x = load('other')\nx = load('other')\n")
    index = RepositoryIndex(tmp_path)
    index.build()
    repository = RepositoryContext(index, "main.py")
    assert found("x = load('mine')\nx = |\n", repository) == [
        ("load('mine')", (LINE, TOKENS), FILE, 2, 1),
        ("load('other')", (LINE, TOKENS), REPOSITORY, 4, 2)]
    assert found("x = |\n", RepositoryContext(index, "main.py", choices=False)) == []


def test_a_candidate_is_never_blank_nor_longer_than_a_compared_line():
    held = candidates("y = \ny = " + "z" * 300 + "\ny = ", 4 + 305 + 4)
    assert held == ()
    assert isinstance(candidates("y = 1\ny = ", 10)[0], Candidate)
