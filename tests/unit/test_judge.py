"""Where the file's other lines hold a text at the cursor's place (Context.repeats), the model
chooses one of them or none, and writes the hole freely only when it chooses none
(dg_lsp.completion.pipeline)."""

from __future__ import annotations

from dg_lsp.completion.pipeline import CompletionRequest, Pipeline
from dg_lsp.settings import Settings
from dg_lsp.syntax.languages import language_for
from engine.types import Draft, Score, last_draft
from tests.support.scripted import Scripted

SOURCE = ("def pairs(iterable):\n    it = iter(iterable)\n    return zip(it, it)\n\n"
          "def firsts(iterable):\n    it = \n    return next(it)\n")
CURSOR = SOURCE.index("it = \n") + len("it = ")
FREE, CHOSEN = Score(0.2, 0.5, 4, 5), Score(0.6, 0.6, 1, 2)


def written(*answers: tuple[str, Score, str]) -> Scripted:
    """A backend that answers each request with the next (text, score, finish reason), in a
    draft before the last (an engine's step) and the last."""
    return Scripted(*([Draft(step=1, token_ids=[], committed=0, text="", score=score),
                       Draft(step=score.passes, token_ids=[], committed=1, text=text, done=True,
                             finish_reason=reason, score=score)]
                      for text, score, reason in answers))


def complete(backend, offset: int = CURSOR, source: str = SOURCE):
    request = CompletionRequest(source, offset, language_for("python"))
    pipeline = Pipeline(backend, Settings(min_confidence=0.0))
    ctx, drafts = pipeline.start(request)
    last = last_draft(drafts)
    return pipeline.finish(request, ctx, last), last


def test_the_model_chooses_a_text_the_file_has_and_writes_nothing_else():
    backend = written(("iter(iterable)", CHOSEN, "stop"))
    completion, last = complete(backend)
    (asked,) = backend.requests
    assert asked.choices == ("iter(iterable)",)
    assert (completion.text, completion.steps, last.score) == ("iter(iterable)", 2, CHOSEN)


def test_choosing_none_the_model_writes_the_hole_freely():
    backend = written(("", CHOSEN, "stop"), ("next(it)", FREE, "unit"))
    completion, last = complete(backend)
    first, second = backend.requests
    assert (first.choices, second.choices) == (("iter(iterable)",), None)
    assert (second.prefix, second.suffix, second.until) == (first.prefix, first.suffix,
                                                           first.until)
    assert (completion.text, completion.steps, last.score) == ("next(it)", 7, FREE)


def test_where_no_line_holds_a_text_one_request_written_freely():
    source = SOURCE.replace("    it = iter(iterable)\n", "    xs = iter(iterable)\n")
    backend = written(("next(it)", FREE, "unit"))
    completion, _ = complete(backend, source.index("it = \n") + 5, source)
    assert completion.text == "next(it)"
    assert [r.choices for r in backend.requests] == [None]


def test_a_cancelled_choice_ends_the_request():
    backend = written(("", CHOSEN, "cancelled"))
    assert complete(backend)[0] is None and len(backend.requests) == 1


def test_a_request_closed_while_the_model_writes_closes_the_engines_stream():
    backend = written(("", CHOSEN, "stop"), ("next(it)", FREE, "unit"))
    pipeline = Pipeline(backend, Settings(min_confidence=0.0))
    _, drafts = pipeline.start(CompletionRequest(SOURCE, CURSOR, language_for("python")))
    # the choice's step, then the free hole's first step (after the choice's 2 passes)
    assert [next(drafts).step for _ in range(2)] == [1, 3]
    assert [r.choices for r in backend.closed] == [("iter(iterable)",)]
    drafts.close()  # the editor moved on
    assert [r.choices for r in backend.closed] == [("iter(iterable)",), None]


def test_the_bundled_model_takes_the_files_text_or_writes_freely(bundled_engine):
    """Through the real engine, in process: the choice request is followed (the file's text,
    or none and then a free hole)."""
    asked = []

    class Recording:
        engine_info = bundled_engine.engine_info

        def infill_stream(self, request, cancel=None, document=None):
            asked.append(request)
            return bundled_engine.infill_stream(request, cancel, document=document)

    completion, last = complete(Recording())
    assert asked[0].choices == ("iter(iterable)",)
    if len(asked) == 1:
        assert completion.text == "iter(iterable)"
    else:
        assert asked[1].choices is None
    assert last.score is not None and last.done
