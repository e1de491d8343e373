"""`suffixFraction` decides how the canvas splits its context between prefix and suffix.

Through the language server in this process (settings applied as didChangeConfiguration
applies them, a document opened, a completion asked at an LSP position), into the engine,
down to the canvas the model reads. The document
is dense (three characters, three tokens a line), so the character windows dg_lsp cuts hold
more than the canvas has room for, and the token cut is the one that decides.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from lsprotocol import types

from dg_lsp.lsp.completion import complete
from dg_lsp.lsp.server import create_server
from engine.text.canvas import Canvas

URI = "file:///tmp/dense.py"
HOLE = 8
CANVAS = 64
LINES_BEFORE, LINES_AFTER = 80, 80
TEXT = "x = [\n" + "1,\n" * LINES_BEFORE + "\n" + "2,\n" * LINES_AFTER + "]\n"


@pytest.fixture(scope="module")
def engine(dream_ckpt: Path):
    from engine import Engine

    return Engine.load(str(dream_ckpt), device="cpu", dtype="float32")


def canvas_seen(engine, suffix_fraction: float | None) -> Canvas:
    """The canvas the model reads for a completion on the blank line between the runs."""
    seen: list[Canvas] = []
    decoder = engine.decoder
    original = decoder.canvas

    def spy(*args, **kwargs) -> Canvas:
        seen.append(original(*args, **kwargs))
        return seen[-1]

    server = create_server(engine)
    options = {"canvasLength": CANVAS, "extraContext": False,
               "holeSize": {"restOfLine": HOLE, "brackets": HOLE, "comment": HOLE,
                            "block": HOLE}}
    if suffix_fraction is not None:
        options["suffixFraction"] = suffix_fraction
    server.apply_settings(options)
    server.did_open(types.DidOpenTextDocumentParams(types.TextDocumentItem(
        uri=URI, language_id="python", version=1, text=TEXT)))
    decoder.canvas = spy
    try:
        asyncio.run(complete(server, URI, types.Position(LINES_BEFORE + 1, 0)))
    finally:
        del decoder.canvas
        server.executor.shutdown()
    assert len(seen) == 1
    return seen[0]


def sides(engine, canvas: Canvas) -> tuple[str, str]:
    prefix_ids, suffix_ids = canvas.context_ids
    return engine.tokenizer.decode(prefix_ids), engine.tokenizer.decode(suffix_ids)


# suffixFraction -> (prefix tokens, suffix tokens, prefix text, suffix text) of the canvas.
# A line is three tokens ("\n", "1", ","); the context budget is 64 - 8 = 56 tokens (this
# checkpoint takes no BOS). Each side keeps whole lines where it can; what one side leaves
# goes to the other. Before the split reached the token cut, all four were the first.
EXPECTED = {
    None: (42, 13, "\n1," * 14, "\n2," * 4 + "\n"),  # int(56 * 0.75) = 42
    0.25: (42, 13, "\n1," * 14, "\n2," * 4 + "\n"),
    0.6: (21, 34, "\n1," * 7, "\n2," * 11 + "\n"),  # int(56 * 0.4) = 22: 7 whole lines
    0.1: (50, 6, "1," + "\n1," * 16, "\n2," * 2),  # int(56 * 0.9) = 50
}


@pytest.mark.parametrize("suffix_fraction", list(EXPECTED))
def test_suffix_fraction_changes_the_canvas_the_model_reads(engine, suffix_fraction):
    canvas = canvas_seen(engine, suffix_fraction)
    prefix, suffix = sides(engine, canvas)
    assert canvas.hole_len == HOLE and len(canvas.ids) <= CANVAS
    n_prefix, n_suffix, want_prefix, want_suffix = EXPECTED[suffix_fraction]
    assert (canvas.hole_start, len(canvas.ids) - canvas.hole_end) == (n_prefix, n_suffix)
    assert (prefix, suffix) == (want_prefix, want_suffix)
