"""A backend that writes given texts, for tests of what the server does with a model's text
(the checks, the shaping, the prompt it sent), independent of what a model would write."""

from __future__ import annotations

from engine.backend import EngineInfo
from engine.types import Draft, Score


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
