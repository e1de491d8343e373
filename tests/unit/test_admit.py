"""One admission for every door (engine.serve.admit): the same bad request is refused with the
same words at the socket and at the tools' HTTP port, each naming the field as its own users
write it.

Both doors are the real ones over one EngineServer (the daemon's socket handler, and the HTTP
API over it as `dg-engine serve --http` runs it); no model is loaded: every request here is
refused before the engine's decoder is asked anything.
"""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest
from starlette.testclient import TestClient

from engine.serve import admit
from engine.serve.http.api import HttpApi, LocalBackend
from engine.serve.limits import Limits
from engine.serve.socket import protocol
from engine.serve.socket.daemon import EngineServer
from engine.types import Draft, InfillRequest

MAX_CANVAS = 1024
PREFIX = "def f(x):\n    return "


@pytest.fixture(scope="module")
def server() -> EngineServer:
    engine = SimpleNamespace(decoder=None, config=SimpleNamespace(family="masked"))
    return EngineServer(engine, SimpleNamespace(started=0), "fake",
                        limits=Limits(MAX_CANVAS, 1 << 30, 60.0))


@pytest.fixture(scope="module")
def http(server: EngineServer) -> TestClient:
    return TestClient(HttpApi(LocalBackend(server), None).app)


def socket_error(server: EngineServer, message: dict[str, Any]) -> dict[str, Any]:
    """The daemon's reply to one frame (written as a client writes it, JSON escapes and all)."""
    frame = protocol.decode(json.dumps({"id": 7, "op": "infill", **message}).encode())
    reply = server._reply(frame, {}, lambda reply: None, authorized=True)
    assert reply is not None and reply["type"] == "error", reply
    assert reply["id"] == 7
    return reply


def http_error(http: TestClient, path: str, body: dict[str, Any]) -> dict[str, Any]:
    # JSON's escapes, as the client wrote them: a lone surrogate is no UTF-8
    response = http.post(path, content=json.dumps(body),
                         headers={"Content-Type": "application/json"})
    assert response.status_code == 400, response.text
    return response.json()["error"]


# (what is wrong, the socket's message, its field there; the HTTP path, body, field there)
CASES = [
    ("a sampler setting out of its range",
     {"prefix": PREFIX, "settings": {"threshold": 2}}, "settings.threshold",
     "/v1/completions", {"prompt": PREFIX, "dg_settings": {"threshold": 2}},
     "dg_settings.threshold"),
    ("a sampler setting the tools send as their own field",
     {"prefix": PREFIX, "settings": {"temperature": 11}}, "settings.temperature",
     "/infill", {"input_prefix": PREFIX, "temperature": 11}, "temperature"),
    ("a sampler setting of the wrong type",
     {"prefix": PREFIX, "settings": {"share_prefix": "yes"}}, "settings.share_prefix",
     "/v1/completions", {"prompt": PREFIX, "dg_settings": {"share_prefix": "yes"}},
     "dg_settings.share_prefix"),
    ("a prefix that is not valid Unicode",
     {"prefix": "\ud800"}, "prefix", "/v1/completions", {"prompt": "\ud800"}, "prompt"),
    ("a prefix that is not valid Unicode, llama.cpp's way",
     {"prefix": "\ud800"}, "prefix", "/infill", {"input_prefix": "\ud800"}, "input_prefix"),
    ("a suffix that is not valid Unicode",
     {"prefix": PREFIX, "suffix": "\udc00"}, "suffix",
     "/infill", {"input_prefix": PREFIX, "input_suffix": "\udc00"}, "input_suffix"),
    ("no hole",
     {"prefix": PREFIX, "max_tokens": 0, "canvas_length": 256}, "max_tokens",
     "/v1/completions", {"prompt": PREFIX, "max_tokens": 0}, "max_tokens"),
    ("a hole over the model's canvas",
     {"prefix": PREFIX, "max_tokens": 5000, "canvas_length": MAX_CANVAS}, "max_tokens",
     "/infill", {"input_prefix": PREFIX, "n_predict": 5000}, "n_predict"),
]


@pytest.mark.parametrize("case", CASES, ids=[case[0] for case in CASES])
def test_the_same_bad_request_gets_the_same_error_at_each_door_naming_its_own_field(
        server, http, case):
    _, message, wire_field, path, body, http_field = case
    refused = socket_error(server, message)
    answered = http_error(http, path, body)
    assert refused["code"] == "bad-request" and answered["code"] == "invalid_value"
    assert answered["param"] == http_field
    assert refused["message"].startswith(wire_field)
    assert answered["message"].startswith(http_field)
    # the same words after the field's name
    assert refused["message"][len(wire_field):] == answered["message"][len(http_field):]


def test_a_refusal_that_names_no_field_is_the_same_at_both_doors(server, http):
    refused = socket_error(server, {"prefix": PREFIX, "settings": {"top_k": 3}})
    answered = http_error(http, "/v1/completions", {"prompt": PREFIX,
                                                    "dg_settings": {"top_k": 3}})
    assert refused["message"] == answered["message"] == "unknown sampler settings: ['top_k']"
    assert answered["param"] is None


def test_the_socket_and_a_team_parse_with_the_same_function():
    """A /v1/stream message and a socket frame are one parser's: a ProtocolError names the
    field, and survives being sent back from a team's replica (pickled by Ray)."""
    import pickle

    with pytest.raises(admit.ProtocolError) as refused:
        admit.parse({"prefix": PREFIX, "strength": 2.0, "original": "x"}, "rewrite")
    assert refused.value.field == "strength"
    again = pickle.loads(pickle.dumps(refused.value))
    assert (again.code, str(again), again.field) == ("bad-request", str(refused.value),
                                                     "strength")


def test_one_token_check_for_a_message_and_a_header():
    digest = admit.token_digest("s3cret")
    assert admit.authorised("s3cret", digest)
    assert not admit.authorised("s3cret ", digest) and not admit.authorised(None, digest)
    assert not admit.authorised("s3cret", None)
    assert admit.bearer_authorised("Bearer s3cret", digest)
    assert admit.bearer_authorised(b"bearer  s3cret", digest)
    assert not admit.bearer_authorised("Basic s3cret", digest)
    assert not admit.bearer_authorised(None, digest)


def test_a_judged_request_travels_and_one_without_choices_is_refused():
    request = InfillRequest(PREFIX, "\n", 8, choices=("x", "y + 1"), judge=True)
    message = json.loads(json.dumps(protocol.to_wire(request)))
    assert message["judge"] is True and protocol.from_wire(message) == request
    assert "judge" not in protocol.to_wire(InfillRequest(PREFIX, "\n", 8))
    with pytest.raises(admit.ProtocolError) as refused:
        admit.parse({"prefix": PREFIX, "judge": True}, "infill")
    assert (refused.value.field, str(refused.value)) == (
        "judge", "judge: a judged request needs choices")
    with pytest.raises(admit.ProtocolError):
        admit.parse({"prefix": PREFIX, "choices": ["x"], "judge": "yes"}, "infill")


def test_a_drafts_choice_scores_travel_and_only_where_it_has_some():
    scored = Draft(step=1, token_ids=[5], committed=0, text="",
                   choice_logprobs=((-0.5, -1.25), ()), top_logprobs=(-0.25, -0.5))
    wire = json.loads(json.dumps(protocol.draft_to_wire(scored)))
    assert wire["choice_logprobs"] == [[-0.5, -1.25], []]
    assert wire["top_logprobs"] == [-0.25, -0.5]
    assert protocol.draft_from_wire(wire) == scored
    plain = Draft(step=2, token_ids=[5], committed=1, text="x")
    assert not {"choice_logprobs", "top_logprobs"} & set(protocol.draft_to_wire(plain))
    assert protocol.draft_from_wire(protocol.draft_to_wire(plain)) == plain
