"""An asked-for suggestion is always answered; one hidden unasked says why.

The gate's calibrator is replaced by one made by hand, so each confidence below is exact:
p = sigmoid(-1 + 4 (lowest - 0.5)) for a one-line suggestion.
"""

from __future__ import annotations

import math

import pytest

from dg_lsp.cli.complete import explanation
from dg_lsp.completion.pipeline import Completion, CompletionRequest, Hidden, Pipeline
from dg_lsp.document import gate
from dg_lsp.settings import Settings
from dg_lsp.syntax.languages import language_for
from engine.types import Draft, Score, last_draft
from tests.support.scripted import Scripted

SOURCE = "def f(x):\n    return \n"
HAND_MADE = gate.Calibrator(mean=(0.5, 0, 0, 0, 0, 0, 0), std=(0.25, 1, 1, 1, 1, 1, 1),
                            weight=(1.0, 0, 0, 0, 0, -2.0, 2.0), bias=-1.0)
UNSURE = 1 / (1 + math.exp(1.0))  # lowest 0.5: sigmoid(-1) = 0.269
SURE = 0.5  # lowest 0.75: sigmoid(0)


@pytest.fixture(autouse=True)
def hand_made(monkeypatch):
    monkeypatch.setattr(gate, "calibrator", lambda: HAND_MADE)


def decide(text: str, lowest: float | None, asked: bool, min_confidence: float = 0.3):
    pipeline = Pipeline(Scripted((text, lowest)), Settings(min_confidence=min_confidence))
    request = CompletionRequest(SOURCE, SOURCE.index("\n", 10), language_for("python"))
    ctx, drafts = pipeline.start(request)
    return pipeline.decide(request, ctx, last_draft(drafts), asked)


def test_unasked_a_suggestion_the_model_is_unsure_of_is_hidden_with_its_reason():
    assert decide("x + 1", 0.5, asked=False) == Hidden("unsure (0.27)", UNSURE)


def test_asked_the_same_suggestion_is_shown_marked_below_the_gate():
    shown = decide("x + 1", 0.5, asked=True)
    assert shown == Completion("x + 1", 21, 21, "rest_of_line", 3, UNSURE, below_gate=True)


def test_a_sure_suggestion_is_shown_either_way_and_not_marked():
    for asked in (False, True):
        assert decide("x + 1", 0.75, asked) == Completion("x + 1", 21, 21, "rest_of_line", 3,
                                                          SURE, below_gate=False)


def test_nothing_usable_is_not_shown_even_when_asked():
    assert decide("", 0.9, asked=True) == Hidden("nothing usable")


def test_a_draft_without_a_score_is_shown_unmarked():
    assert decide("x + 1", None, asked=False) == Completion("x + 1", 21, 21, "rest_of_line", 3)


def test_the_explanation_names_each_part_of_the_decision():
    pipeline = Pipeline(Scripted(("x + 1", 0.5)), Settings(min_confidence=0.3))
    request = CompletionRequest(SOURCE, SOURCE.index("\n", 10), language_for("python"))
    ctx, drafts = pipeline.start(request)
    last = last_draft(drafts)
    assert explanation(ctx, last, pipeline.decide(request, ctx, last), 0.3).split("\n") == [
        "context: 21 characters before the cursor, 1 after it, 0 from other files",
        "hole: rest_of_line",
        "candidates: none (nothing the file or the repository holds fits here)",
        "model wrote: 'x + 1' (3 passes, stop)",
        "score: least confident token 0.50, mean 0.50 over 3 tokens",
        "gate: hidden, unsure (0.27) < 0.3",
    ]
    shown = Completion("x + 1", 21, 21, "rest_of_line", 3, SURE)
    assert explanation(ctx, last, shown, 0.3).split("\n")[-1] == (
        "gate: shown, confidence 0.50 >= 0.3")
    start = "def f(x):\n    \n"  # a new line: half the threshold
    request = CompletionRequest(start, start.index("\n", 10), language_for("python"))
    ctx, drafts = pipeline.start(request)
    shown = Completion("x + 1", 14, 14, "rest_of_line", 3, 0.2)
    assert explanation(ctx, last, shown, 0.3).split("\n")[-1] == (
        "gate: shown, confidence 0.20 >= 0.15 (a line start's: 0.5 of 0.3)")
    cancelled = Draft(step=1, token_ids=[], committed=0, text="", done=True,
                      finish_reason="cancelled", score=Score(1.0, 1.0, 0, 1))
    assert explanation(ctx, cancelled, Hidden("cancelled"), 0.3).split("\n")[-1] == (
        "gate: hidden, cancelled")
