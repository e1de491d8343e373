"""engine.serve.http.api's streamed answers add up: the deltas sent, concatenated, are the
answer the same request gets unstreamed, whatever the drafts did in between.

Drafts are scripted (a backend that yields given Drafts): a block-family model's drafts
rewrite their text at every step, a masked one's grow by committed tokens, a byte at a time
where a character takes several.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from engine.serve.admit import Names
from engine.serve.http.api import ApiError, HttpApi, answer_pieces, settled_text
from engine.types import Draft, InfillRequest


def draft(text: str, done: bool = False, reason: str = "") -> Draft:
    return Draft(step=1, token_ids=[], committed=0, text=text, done=done,
                 finish_reason=reason or ("stop" if done else ""))


def drafts_of(*texts: str) -> list[Draft]:
    """A draft per text, the last one done."""
    return [draft(text, done=n == len(texts) - 1) for n, text in enumerate(texts)]


async def _aiter(drafts: list[Draft]) -> AsyncIterator[Draft]:
    for d in drafts:
        yield d


def pieces(drafts: list[Draft], stops: list[str], family: str
           ) -> list[tuple[str, Draft | None, bool]]:
    async def collect() -> list[tuple[str, Draft | None, bool]]:
        return [piece async for piece in answer_pieces(_aiter(drafts), stops, family)]

    return asyncio.run(collect())


# A block-family model's drafts: the argmax of every position, each step sampling the
# uncommitted ones again, so a later draft rewrites text before what an earlier one showed.
REWRITTEN = drafts_of("f", "fib", "fibon", "fibonac", "fibonaccici(n", "fibonacci(n)")


def test_text_a_later_draft_rewrites_is_not_sent_before_the_end():
    got = pieces(REWRITTEN, [], "block")
    assert [text for text, _, _ in got] == ["fibonacci(n)", ""]
    assert got[-1][1] is REWRITTEN[-1] and got[-1][2] is False


def test_a_masked_models_committed_text_is_sent_as_it_grows_less_a_partial_character():
    got = pieces(drafts_of("x = ", "x = caf", "x = caf\ufffd", "x = café", "x = café()"), [],
                 "masked")
    assert [text for text, _, _ in got] == ["x = ", "caf", "é", "()", ""]


def test_a_stop_string_cuts_the_answer_and_its_start_is_held_back_until_it_is_known():
    got = pieces(drafts_of("a\n", "a\n\nb", "a\n\nbc"), ["\n\n"], "masked")
    assert [(text, stopped) for text, _, stopped in got] == [("a", False), ("", True)]
    assert got[-1][1].text == "a\n\nb"  # the draft the stop string ended: the job ends here


def test_a_stop_string_in_text_that_changes_after_is_no_stop():
    got = pieces(drafts_of("ab(", "ax(", "abc"), ["x"], "block")
    assert [(text, stopped) for text, _, stopped in got] == [("abc", False), ("", False)]


@pytest.mark.parametrize("family,stops", [("block", []), ("block", ["ci"]), ("masked", []),
                                          ("masked", ["(n)", "\n"]), ("ar", ["nac"])])
def test_the_pieces_add_up_to_the_last_drafts_visible_text(family, stops):
    texts = ("f", "fib", "fibon", "fibonac", "fibonacci(", "fibonacci(n)")
    if family == "block":
        texts = tuple(t.replace("b", "p") for t in texts[:-1]) + texts[-1:]
    got = pieces(drafts_of(*texts), stops, family)
    answer = "fibonacci(n)"
    cuts = [answer.find(s) for s in stops if s in answer]
    assert "".join(text for text, _, _ in got) == answer[:min(cuts, default=len(answer))]


def test_an_unknown_family_sends_the_whole_answer_at_the_end():
    assert settled_text(draft("abc"), "someday") == ""
    assert settled_text(draft("abc", done=True), "someday") == "abc"
    got = pieces(drafts_of("a", "ab", "abc"), [], "someday")
    assert [text for text, _, _ in got] == ["abc", ""]


def test_a_steady_family_whose_text_changed_after_all_fails_the_request():
    with pytest.raises(ApiError) as caught:
        pieces(drafts_of("fibonac", "fibonaccici(n", "fibonacci(n)"), [], "masked")
    assert (caught.value.status, caught.value.code) == (500, "unsettled")


def test_drafts_that_end_without_the_last_fail_the_request():
    with pytest.raises(ApiError) as caught:
        pieces([draft("ab")], [], "masked")
    assert caught.value.code == "incomplete"


# -- through the endpoints ----------------------------------------------------------------


class ScriptedBackend:
    """engine.serve.http.api.Backend answering every request with `drafts`."""

    def __init__(self, drafts: list[Draft], family: str) -> None:
        self.drafts, self.family = drafts, family
        self.closed = 0

    async def hello(self) -> dict[str, Any]:
        return {"name": "scripted", "started": 0, "maxCanvas": 512, "family": self.family}

    async def submit(self, request: InfillRequest, names: Names) -> AsyncIterator[Draft]:
        return self._drafts()

    async def _drafts(self) -> AsyncIterator[Draft]:
        try:
            for d in self.drafts:
                yield d
        finally:
            self.closed += 1

    def tokens(self, draft: Draft) -> int:
        return len(draft.text)


def streamed(client: TestClient, path: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    response = client.post(path, json=body | {"stream": True})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    lines = [line.removeprefix("data: ") for line in response.text.split("\n\n") if line]
    return [json.loads(line) for line in lines if line != "[DONE]"]


@pytest.mark.parametrize("family", ["block", "masked"])
@pytest.mark.parametrize("stops", [[], ["ci("]])
def test_streamed_completions_add_up_to_the_whole_answer(family, stops):
    texts = ("f", "fib", "fibon", "fibonac", "fibonaccici(n", "fibonacci(n)")
    if family == "masked":  # committed text only grows
        texts = ("f", "fib", "fibon", "fibonac", "fibonacci(", "fibonacci(n)")
    client = TestClient(HttpApi(ScriptedBackend(drafts_of(*texts), family), None).app)
    body = {"prompt": "print(", "suffix": ")\n", "max_tokens": 8, "stop": stops}
    whole = client.post("/v1/completions", json=body).json()["choices"][0]
    events = streamed(client, "/v1/completions", body)
    assert "".join(e["choices"][0]["text"] for e in events) == whole["text"]
    assert whole["text"] == ("fibonac" if stops else "fibonacci(n)")
    assert events[-1]["choices"][0]["finish_reason"] == whole["finish_reason"]
    assert [e["choices"][0]["finish_reason"] for e in events[:-1]] == [None] * (len(events) - 1)


@pytest.mark.parametrize("family", ["block", "masked", "ar"])
def test_streamed_infill_adds_up_to_the_whole_answer(family):
    texts = ("de", "def", "def f(x):", "def f(x):\n    return x") if family != "block" else (
        "de", "do", "def g(", "def f(x):\n    return x")
    client = TestClient(HttpApi(ScriptedBackend(drafts_of(*texts), family), None).app)
    body = {"input_prefix": "", "input_suffix": "\n", "n_predict": 8}
    whole = client.post("/infill", json=body).json()
    events = streamed(client, "/infill", body)
    assert "".join(e["content"] for e in events) == whole["content"] == texts[-1]
    assert [e["stop"] for e in events] == [False] * (len(events) - 1) + [True]


def test_a_stream_whose_settled_text_changed_ends_with_the_error_the_whole_answer_gets():
    backend = ScriptedBackend(drafts_of("fibonac", "fibonaccici(n", "fibonacci(n)"), "masked")
    client = TestClient(HttpApi(backend, None).app)
    whole = client.post("/v1/completions", json={"prompt": "x"})
    assert whole.status_code == 500
    events = streamed(client, "/v1/completions", {"prompt": "x"})
    assert [e["choices"][0]["text"] for e in events[:-1]] == ["fibonac", "cici(n"]
    assert events[-1] == whole.json() == {"error": {
        "message": "the engine changed text it had settled", "type": "server_error",
        "param": None, "code": "unsettled"}}
    assert backend.closed == 2  # both requests' drafts closed: the job is cancelled
