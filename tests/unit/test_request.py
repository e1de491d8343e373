"""A request is one frozen object from the pipeline to the decoder; on the wire it is the
version 1 message, field for field, and older clients' messages still parse."""

from __future__ import annotations

import dataclasses

import pytest

from engine.serve import admit
from engine.serve.socket import protocol
from engine.types import InfillRequest, RewriteRequest, SamplerSettings, UnitEnd

SETTINGS = SamplerSettings(sampler="topk", k=2, temperature=0.5, seed=7, max_steps=9)


def test_a_request_is_frozen():
    request = InfillRequest("x = ", "\n")
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.max_tokens = 64  # type: ignore[misc]


def test_an_infill_on_the_wire_is_the_version_1_message_byte_for_byte():
    request = InfillRequest("def f():\n    ", "\n", 24, SETTINGS, 128, 0.4,
                            UnitEnd("block", "    ", ""))
    # The message clients sent before request objects, keys in the same order.
    before = {"op": "infill", "prefix": "def f():\n    ", "suffix": "\n", "max_tokens": 24,
              "canvas_length": 128, "suffix_fraction": 0.4,
              "settings": dataclasses.asdict(SETTINGS),
              "until": {"kind": "block", "line_prefix": "    ", "base_indent": ""}}
    assert protocol.encode(protocol.to_wire(request)) == protocol.encode(before)
    assert "until" not in protocol.to_wire(dataclasses.replace(request, until=None))
    assert "choices" not in protocol.to_wire(request)  # sent only when it restricts


def test_a_rewrite_on_the_wire_is_the_version_1_message_byte_for_byte():
    request = RewriteRequest("x = ", "\n", "compute(1)", 0.5, None, SETTINGS, 96, 0.3)
    before = {"op": "rewrite", "prefix": "x = ", "suffix": "\n", "original": "compute(1)",
              "strength": 0.5, "canvas_length": 96, "suffix_fraction": 0.3,
              "settings": dataclasses.asdict(SETTINGS)}
    assert protocol.encode(protocol.to_wire(request)) == protocol.encode(before)
    sized = protocol.to_wire(dataclasses.replace(request, max_tokens=12))
    assert list(sized)[-1] == "max_tokens" and sized["max_tokens"] == 12


@pytest.mark.parametrize("request_", [
    InfillRequest("a", "b", 24, SETTINGS, 128, 0.4, UnitEnd("line")),
    InfillRequest("a", "b", choices=(" y\n", "\n")),
    InfillRequest("a", "b"),
    RewriteRequest("a", "b", "c", 0.25, 12, SETTINGS, 96, 0.3),
    RewriteRequest("a", "b", "c"),
])
def test_a_request_arrives_as_it_was_sent(request_):
    message = protocol.decode(protocol.encode(protocol.to_wire(request_))[protocol.HEADER.size:])
    assert protocol.from_wire(message) == request_


def test_an_older_clients_message_parses_with_the_defaults():
    # Before suffix_fraction and until, with the id, stream and priority a client adds.
    old = {"op": "infill", "id": 3, "prefix": "x = ", "suffix": "\n", "max_tokens": 8,
           "canvas_length": 64, "settings": {"seed": 1}, "stream": True,
           "priority": "interactive"}
    assert protocol.from_wire(old) == InfillRequest("x = ", "\n", 8, SamplerSettings(seed=1), 64)
    assert protocol.from_wire({"op": "infill"}) == InfillRequest("", "")


@pytest.mark.parametrize(("message", "error"), [
    ({"op": "infill", "prefix": 3}, "prefix: expected"),
    ({"op": "infill", "max_tokens": "8"}, "max_tokens: expected"),
    ({"op": "infill", "suffix_fraction": 1.5},
     "suffix_fraction: expected a finite number in 0..0.95, got 1.5"),
    ({"op": "infill", "settings": {"k": 0}}, "settings.k: expected an integer in 1..1024, got 0"),
    ({"op": "rewrite", "prefix": "x"}, "original: expected"),
    ({"op": "rewrite", "original": "y", "strength": 2},
     "strength: expected a finite number in 0..1, got 2"),
    ({"op": "infill", "until": {"kind": "page"}}, "until.kind must be one of"),
    ({"op": "infill", "choices": "x"}, "choices: expected"),
    ({"op": "infill", "choices": ["x", 1]}, "choices: expected texts, got 1"),
    ({"op": "infill", "choices": ["x"] * (admit.MAX_CHOICES + 1)},
     "choices: at most 64 texts"),
    ({"op": "infill", "choices": ["x" * 9000, "y" * 9000]},
     "choices: at most 16384 characters in all"),
    ({"op": "infill", "choices": ["\ud800"]}, "choices: not valid Unicode"),
])
def test_a_malformed_request_is_refused_naming_the_field(message, error):
    with pytest.raises(protocol.ProtocolError, match=error.replace("[", r"\[")) as refused:
        protocol.from_wire(message)
    assert refused.value.code == "bad-request"
