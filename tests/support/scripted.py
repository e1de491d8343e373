"""The tests' one fake engine: a backend that writes given answers, for tests of what the server
does with a model's text (the checks, the shaping, the prompt it sent, an engine lost), independent
of what a model would write. A test that needs another behaviour subclasses it (`_drafts`)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator

from engine.backend import EngineInfo
from engine.text.units import until_unit_ends
from engine.types import Draft, Score

# One request's answer; see Scripted.
Answer = str | tuple[str, float | None] | list[str] | list[Draft] | BaseException


def steps_of(text: str, steps: int) -> list[Draft]:
    """`text` committed over `steps` denoising steps, the last one done."""
    return [Draft(step=step, token_ids=[], committed=step, text=text, done=step == steps,
                  finish_reason="stop" if step == steps else "") for step in range(1, steps + 1)]


def holes(*texts: str, steps: int = 3, score: Score | None = None) -> list[Draft]:
    """A holes request's answer (Scripted.holes_stream): one finished draft after `steps`
    passes, each hole's text in order."""
    return [Draft(step=steps, token_ids=[], committed=0, text="", done=True,
                  finish_reason="stop", score=score, holes=texts)]


class Scripted:
    """Each request (infill, rewrite or holes) takes the next answer:

    - a text: one finished draft, scored `score`;
    - (text, lowest): one finished draft whose every confidence is `lowest` (None: no score,
      as a family that records none answers);
    - a list of texts: the committed text after each step, up to the end of the unit the
      request names, as engines cut them (engine.text.units.until_unit_ends);
    - a list of Drafts: yielded as they are;
    - an exception: raised after a first empty draft, as by an engine lost mid-request; it
      stays the answer to every later request (a lost engine stays lost).

    A holes request (HolesRequest: several holes in one canvas) is answered with `holes(...)`,
    each hole's text. Drafts of a list come `step_seconds` apart. What it was asked is kept:
    `requests` (as sent), `documents` (the document each named), `closed` (the requests whose
    stream was closed), `taken` (the drafts taken).
    """

    engine_info = EngineInfo(model="scripted", family="masked", device="cpu", resident=False,
                             counts_tokens=False)

    def __init__(self, *texts: Answer, score: Score | None = None, resident: bool = False,
                 step_seconds: float = 0.0) -> None:
        self.texts = list(texts)  # the answers still to give
        self.score = score
        self.step_seconds = step_seconds
        if resident:
            self.engine_info = dataclasses.replace(Scripted.engine_info, resident=True)
        self.documents: list[str | None] = []
        self.requests: list = []
        self.closed: list = []
        self.taken = 0

    @property
    def calls(self) -> list[tuple[str, str]]:
        """(prefix, suffix) of every request."""
        return [(r.prefix, r.suffix) for r in self.requests]

    @property
    def until(self):
        """The unit the last request names (None: the whole hole)."""
        return getattr(self.requests[-1], "until", None)

    def infill_stream(self, request, cancel=None, document=None) -> Iterator[Draft]:
        self.documents.append(document)
        self.requests.append(request)
        return self._closing(request, self._drafts())

    rewrite_stream = infill_stream

    def holes_stream(self, request, cancel=None, document=None) -> Iterator[Draft]:
        if len(request.texts) != len(request.max_tokens) + 1:  # as the engine refuses it
            raise ValueError(f"{len(request.texts)} texts for {len(request.max_tokens)} holes")
        return self.infill_stream(request, cancel, document)

    def _closing(self, request, drafts: Iterator[Draft]) -> Iterator[Draft]:
        try:
            yield from drafts
        finally:
            self.closed.append(request)

    def _drafts(self) -> Iterator[Draft]:
        answer = self.texts[0]
        if not isinstance(answer, BaseException):
            self.texts.pop(0)
        else:
            yield Draft(step=1, token_ids=[], committed=0, text="", done=False)
            raise answer
        if isinstance(answer, list):
            drafts = self._steps(answer)
            if not any(isinstance(draft, Draft) for draft in answer):
                drafts = until_unit_ends(drafts, self.until)
            yield from drafts
            return
        text, score = answer, self.score
        if isinstance(answer, tuple):
            text, lowest = answer
            score = None if lowest is None else Score(lowest, lowest, 3, 3)
        self.taken += 1
        yield Draft(step=3, token_ids=[], committed=0, text=text, done=True,
                    finish_reason="stop", score=score)

    def _steps(self, answer: list) -> Iterator[Draft]:
        for step, draft in enumerate(answer, 1):
            if self.step_seconds:
                time.sleep(self.step_seconds)
            self.taken += 1
            if isinstance(draft, Draft):
                yield draft
            else:
                yield Draft(step=step, token_ids=[], committed=step, text=draft,
                            done=step == len(answer), finish_reason="stop")
