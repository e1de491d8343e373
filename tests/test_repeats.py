"""Where the file's other lines hold a text at the cursor's place (Context.repeats), the model
chooses between those texts and the one it wrote (dg_lsp.pipeline)."""

from __future__ import annotations

from dg_lsp.languages import language_for
from dg_lsp.pipeline import CompletionRequest, Pipeline, _last_draft
from dg_lsp.settings import Settings
from engine.backend import EngineInfo
from engine.types import Draft, Score

SOURCE = ("def pairs(iterable):\n    it = iter(iterable)\n    return zip(it, it)\n\n"
          "def firsts(iterable):\n    it = \n    return next(it)\n")
CURSOR = SOURCE.index("it = \n") + len("it = ")
FREE, CHOSEN = Score(0.2, 0.5, 4, 5), Score(0.6, 0.6, 1, 2)


class Written:
    """A backend that answers each request with the next (text, score, finish reason)."""

    engine_info = EngineInfo(model="written", family="masked", device="cpu", resident=False,
                             counts_tokens=False)

    def __init__(self, *answers: tuple[str, Score, str]) -> None:
        self.answers = list(answers)
        self.requests: list = []

    def infill_stream(self, request, cancel=None, document=None):
        self.requests.append(request)
        text, score, reason = self.answers.pop(0)
        yield Draft(step=score.passes, token_ids=[], committed=1, text=text, done=True,
                    finish_reason=reason, score=score)


def complete(backend, offset: int = CURSOR, source: str = SOURCE):
    request = CompletionRequest(source, offset, language_for("python"))
    pipeline = Pipeline(backend, Settings(min_confidence=0.0))
    ctx, drafts = pipeline.start(request)
    last = _last_draft(drafts)
    return pipeline.finish(request, ctx, last), last


def test_the_model_chooses_the_files_text_over_its_own():
    backend = Written(("next(it)", FREE, "unit"), ("iter(iterable)", CHOSEN, "stop"))
    completion, last = complete(backend)
    first, second = backend.requests
    assert first.choices is None
    assert second.choices == ("iter(iterable)", "next(it)")
    assert (second.prefix, second.suffix, second.until) == (first.prefix, first.suffix,
                                                           first.until)
    assert (completion.text, completion.steps) == ("iter(iterable)", 7)
    assert last.score == CHOSEN


def test_keeping_its_own_text_keeps_its_own_score():
    backend = Written(("next(it)", FREE, "unit"), ("next(it)", CHOSEN, "stop"))
    completion, last = complete(backend)
    assert (completion.text, completion.steps, last.score) == ("next(it)", 7, FREE)


def test_one_request_where_the_model_wrote_the_files_text_or_no_line_holds_one():
    backend = Written(("iter(iterable)", FREE, "unit"))
    assert complete(backend)[0].text == "iter(iterable)"
    assert len(backend.requests) == 1
    source = SOURCE.replace("    it = iter(iterable)\n", "    xs = iter(iterable)\n")
    backend = Written(("next(it)", FREE, "unit"))
    assert complete(backend, source.index("it = \n") + 5, source)[0].text == "next(it)"
    assert len(backend.requests) == 1
    backend = Written(("next(it)", FREE, "cancelled"))
    assert complete(backend)[0] is None and len(backend.requests) == 1


def test_nothing_written_the_model_may_still_choose_the_files_text():
    backend = Written(("", FREE, "stop"), ("iter(iterable)", CHOSEN, "stop"))
    completion, _ = complete(backend)
    assert backend.requests[1].choices == ("iter(iterable)",)
    assert completion.text == "iter(iterable)"


def test_the_bundled_model_writes_one_of_the_texts_it_was_offered(bundled_engine):
    """Through the real engine, in process: the choice request is followed (a text offered,
    or nothing) and ends at the line's end as the free one does."""
    asked = []

    class Recording:
        engine_info = bundled_engine.engine_info

        def infill_stream(self, request, cancel=None, document=None):
            asked.append(request)
            return bundled_engine.infill_stream(request, cancel, document=document)

    completion, last = complete(Recording())
    assert asked[0].choices is None
    if len(asked) == 2:  # the model did not write the file's text itself
        assert completion is None or completion.text in asked[1].choices
    else:
        assert completion.text == "iter(iterable)"
    assert last.score is not None and last.done


def test_a_request_closed_while_the_model_chooses_closes_the_engines_stream():
    closed = []

    class Slow(Written):
        def infill_stream(self, request, cancel=None, document=None):
            self.requests.append(request)
            text, score, reason = self.answers.pop(0)
            try:
                yield Draft(step=1, token_ids=[], committed=0, text="", score=score)
                yield Draft(step=2, token_ids=[], committed=1, text=text, done=True,
                            finish_reason=reason, score=score)
            finally:
                closed.append(request.choices)

    backend = Slow(("next(it)", FREE, "unit"), ("iter(iterable)", CHOSEN, "stop"))
    pipeline = Pipeline(backend, Settings(min_confidence=0.0))
    _, drafts = pipeline.start(CompletionRequest(SOURCE, CURSOR, language_for("python")))
    assert [next(drafts).step for _ in range(3)] == [1, 2, 3]  # the choice's first draft
    assert closed == [None]
    drafts.close()  # the editor moved on
    assert closed == [None, ("iter(iterable)", "next(it)")]
