"""Routing by document (engine.serve.team.routing, protocol.to_wire): which replica of a team's
engine serves a request, decided without Ray, and the document each client names."""

from __future__ import annotations

from collections import Counter

import pytest

from dg_lsp.actions.rewrite import compute_edit
from dg_lsp.actions.targets import targets_at
from dg_lsp.completion.pipeline import CompletionRequest, Pipeline
from dg_lsp.document.parsed import ParsedText
from dg_lsp.settings import Settings
from dg_lsp.syntax.languages import language_for
from engine.serve.socket import protocol
from engine.serve.team.routing import DEFAULT_IMBALANCE, choose, rank, routing_key
from engine.types import InfillRequest, RewriteRequest
from tests.support.scripted import Scripted

URI = "file:///home/dev/project/shapes.py"


def test_a_document_key_ignores_typing_on_the_cursor_line_and_names_long_prefixes_by_their_start():
    head = "import os\n" * 60
    assert routing_key({"prefix": head + "de"}) == routing_key({"prefix": head + "def f():\n"})
    assert routing_key({"prefix": "x = 1\ny"}) == routing_key({"prefix": "x = 1\nyy"})
    assert routing_key({"prefix": "x = 1\ny"}) != routing_key({"prefix": "x = 2\ny"})
    assert routing_key({"document": "file:///a.py", "prefix": "x"}) == routing_key(
        {"document": "file:///a.py", "prefix": "y = 2\n"})


@pytest.mark.parametrize("document", [None, "", 7, ["a"], "d" * 257])
def test_an_old_client_or_a_malformed_document_is_routed_by_its_prefix(document):
    message = {"prefix": "import os\n", "document": document}
    assert routing_key(message) == routing_key({"prefix": "import os\n"})
    assert routing_key(message).startswith("prefix:")


def test_a_documents_home_moves_only_when_its_replica_goes():
    keys = [f"document:{i}" for i in range(200)]
    three = {k: rank(k, ["a", "b", "c"])[0] for k in keys}
    two = {k: rank(k, ["a", "c"])[0] for k in keys}
    assert {k for k in keys if three[k] != two[k]} == {k for k in keys if three[k] == "b"}
    assert min(Counter(three.values()).values()) > 40  # spread over all three


def test_the_router_tries_the_home_first_then_the_others():
    key = routing_key(protocol.to_wire(InfillRequest("x", ""), URI))
    home, *others = rank(key, ["a", "b", "c"])
    assert choose(key, {"a": 0, "b": 0, "c": 0}) == [[home], others]
    assert choose(key, {"a": None, "b": None, "c": None}) == [[home], others]  # loads unknown
    # A busy home keeps its document until it holds a full batch more than the least loaded.
    busy = {r: 0 for r in "abc"} | {home: DEFAULT_IMBALANCE - 1}
    assert choose(key, busy) == [[home], others]
    busy[home] = DEFAULT_IMBALANCE
    assert choose(key, busy) == [others, [home]]
    assert choose(key, busy, imbalance=DEFAULT_IMBALANCE + 1) == [[home], others]


def test_without_a_key_or_with_one_replica_the_router_takes_them_as_given():
    assert choose(None, {"b": 3, "a": 0}) == [["b", "a"]]
    assert choose("document:x", {"a": 50}) == [["a"]]
    assert choose("document:x", {}) == [[]]


def test_the_document_travels_beside_the_request_as_a_digest():
    request = InfillRequest("def f():\n    return ", "\n", 16)
    message = protocol.to_wire(request, URI)
    assert message["document"] == protocol.document_key(URI)
    assert len(message["document"]) == 32 and "shapes" not in message["document"]
    assert "document" not in protocol.to_wire(request)
    assert protocol.from_wire(message) == request  # the request itself is unchanged
    rewrite = RewriteRequest("x = ", "\n", "f(1)", 0.5, 8)
    assert protocol.from_wire(protocol.to_wire(rewrite, URI)) == rewrite
    # One document keeps one key whatever the cursor's prefix; another document has another.
    keys = {routing_key(protocol.to_wire(InfillRequest(p, ""), URI)) for p in ("a", "b\nc")}
    assert len(keys) == 1
    assert keys != {routing_key(protocol.to_wire(request, URI.replace("shapes", "other")))}


@pytest.mark.parametrize("document", [7, "d" * 257, "\ud800"])
def test_an_engine_refuses_a_malformed_document(document):
    with pytest.raises(protocol.ProtocolError, match="document"):
        protocol.from_wire({"op": "infill", "prefix": "x", "suffix": "", "document": document})


def test_the_language_servers_requests_name_their_document():
    completion = Scripted("a + b")
    text = "def add(a, b):\n    return \n"
    pipeline = Pipeline(completion, Settings())
    assert pipeline.complete(CompletionRequest(text, text.index("\n    return ") + 12,
                                               language_for("python", URI), URI))
    assert completion.documents == [URI]
    edit = Scripted("a * b")
    doc = ParsedText("def f(a, b):\n    return a + b\n", language_for("python", URI), uri=URI)
    start = doc.text.index("a + b")
    target = next(t for t in targets_at(doc, start, start + 5) if t.action == "rewrite")
    compute_edit(edit, doc, target, Settings(), strength=1.0)
    assert edit.documents == [URI]
    anonymous = Scripted("a * b")
    compute_edit(anonymous, ParsedText(doc.text, doc.language), target, Settings(), strength=1.0)
    assert anonymous.documents == [None]  # no identity: the router falls back to the prefix
