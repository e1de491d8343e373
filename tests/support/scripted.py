"""A backend that writes given texts, for tests of what the server does with a model's text
(the checks, the shaping, the prompt it sent), independent of what a model would write."""

from __future__ import annotations

from engine.backend import EngineInfo
from engine.types import Draft, Score
from engine.units import until_unit_ends


class Scripted:
    engine_info = EngineInfo(model="scripted", family="masked", device="cpu", resident=False,
                             counts_tokens=False)

    def __init__(self, *texts: str, score: Score | None = None) -> None:
        self.texts = list(texts)
        self.score = score
        self.documents: list[str | None] = []  # the document each request named
        self.requests: list = []  # every request, as sent

    @property
    def calls(self) -> list[tuple[str, str]]:
        """(prefix, suffix) of every request."""
        return [(r.prefix, r.suffix) for r in self.requests]

    def _drafts(self):
        yield Draft(step=3, token_ids=[], committed=0, text=self.texts.pop(0), done=True,
                    finish_reason="stop", score=self.score)

    def infill_stream(self, request, cancel=None, document=None):
        self.documents.append(document)
        self.requests.append(request)
        return self._drafts()

    def rewrite_stream(self, request, cancel=None, document=None):
        self.documents.append(document)
        self.requests.append(request)
        return self._drafts()


class Scored:
    """A backend that writes given texts with given scores (None: no score, an old engine)."""

    engine_info = EngineInfo(model="scripted", family="masked", device="cpu", resident=False,
                             counts_tokens=False)

    def __init__(self, *written: tuple[str, float | None]) -> None:
        self.written = list(written)

    def _drafts(self):
        text, lowest = self.written.pop(0)
        score = None if lowest is None else Score(lowest, lowest, 3, 3)
        yield Draft(step=3, token_ids=[], committed=3, text=text, done=True,
                    finish_reason="stop", score=score)

    def infill_stream(self, request, cancel=None, document=None):
        return self._drafts()

    def rewrite_stream(self, request, cancel=None, document=None):
        return self._drafts()


class ScriptedEngine:
    """Yields the given committed texts as successive drafts, up to the end of the unit the
    request names, as engines do (engine.units.until_unit_ends); counts the drafts taken."""

    engine_info = EngineInfo(model="scripted", family="masked", device="cpu", resident=False,
                             counts_tokens=False)

    def __init__(self, texts: list[str]) -> None:
        self.texts, self.taken = texts, 0

    def infill_stream(self, request, cancel=None, document=None):
        self.until = request.until
        return until_unit_ends(self._drafts(), self.until)

    def _drafts(self):
        for step, text in enumerate(self.texts, 1):
            self.taken += 1
            yield Draft(step=step, token_ids=[], committed=step, text=text,
                        done=step == len(self.texts), finish_reason="stop")
