"""The resident engine: one `dg-engine serve` process shared by clients and language servers.

One engine (tiny random Dream checkpoint) serves the whole module, started the way a user's
first editor starts it (`EngineClient.connect_or_start`), with a TCP listener beside its
socket. Completions it serves must equal what the same engine computes in this process.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import stat
import struct
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import pytest_asyncio
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient

from dg_lsp.completion.pipeline import CompletionRequest, Pipeline
from dg_lsp.lsp.server import STATS_COMMAND
from dg_lsp.settings import parse_settings
from dg_lsp.syntax.languages import language_for
from engine.backend import CountingBackend
from engine.serve.socket import protocol
from engine.serve.socket.client import EngineClient, EngineRefused
from engine.serve.socket.endpoint import endpoint_for, resolved_device
from engine.text.units import UnitEnd
from engine.types import HolesRequest, InfillRequest, RewriteRequest, SamplerSettings
from tests.support.wait import wait_for

PREFIXES = [f"def f{i}(x):\n    y = x + {i}\n    return " for i in range(8)]


@pytest.fixture(scope="module")
def inproc(dream_ckpt: Path):
    from engine import Engine

    return Engine.load(str(dream_ckpt), device="cpu", dtype="float32")


@pytest.fixture(scope="module")
def tcp(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, str]:
    """A free port and a token file for the engine's TCP listener."""
    token = tmp_path_factory.mktemp("tcp") / "token"
    token.write_text("s3cret\n")
    token.chmod(0o600)  # the engine refuses a token file others can read
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1], str(token)


@pytest.fixture(scope="module")
def engine(dream_ckpt: Path, tcp: tuple[int, str]):
    """The module's engine, started by hand with a TCP listener; clients find it by model."""
    port, token = tcp
    process = subprocess.Popen(
        [sys.executable, "-m", "engine.cli", "serve", "--model", str(dream_ckpt), "--device",
         "cpu", "--dtype", "float32", "--listen", f"127.0.0.1:{port}", "--token-file", token])
    endpoint = endpoint_for(str(dream_ckpt), "cpu", "float32")
    assert endpoint.wait_alive(timeout=900, give_up=lambda: process.poll() is not None)
    client = EngineClient.connect_or_start(str(dream_ckpt), "cpu", dtype="float32")
    yield client
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=120)
    assert not endpoint.socket.exists()  # a stopped engine cleans up its socket


def raw_connect(client: EngineClient) -> socket.socket:
    return client.endpoint.connect(timeout=60)


def test_socket_and_its_directory_are_private(engine):
    assert stat.S_IMODE(engine.endpoint.socket.stat().st_mode) == 0o600
    assert stat.S_IMODE(engine.endpoint.socket.parent.stat().st_mode) == 0o700
    assert engine.info["family"] == "masked" and engine.info["version"] == protocol.VERSION
    info = engine.engine_info  # the hello, as Backend's explicit capabilities
    assert (info.family, info.device, info.resident, info.counts_tokens) == (
        "masked", "cpu", True, True)


def test_concurrent_requests_are_batched_and_each_gets_its_own_completion(engine, inproc):
    # Exact passes (R=1) are the ones the scheduler batches: with R > 1 most passes are
    # cached ones over a single canvas.
    exact = SamplerSettings(cache_refresh=1)
    expected = [inproc.infill(p, "\n", 12, settings=exact).text for p in PREFIXES]
    before = engine.stats()
    results: dict[int, str] = {}
    barrier = threading.Barrier(len(PREFIXES))

    def run(i: int) -> None:
        barrier.wait()
        drafts = list(engine.infill_stream(InfillRequest(PREFIXES[i], "\n", 12, settings=exact)))
        results[i] = drafts[-1].text

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(PREFIXES))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert [results.get(i) for i in range(len(PREFIXES))] == expected
    after = engine.stats()
    assert after["completed"] - before["completed"] == len(PREFIXES)
    # Some forward passes carried several requests' canvases at once.
    assert after["batchedRows"] > before["batchedRows"]
    assert after["live"] == 0


def test_the_resident_engine_counts_completion_tokens_as_the_in_process_one(engine, inproc):
    for prefix in PREFIXES[:3]:
        here = list(inproc.infill_stream(InfillRequest(prefix, "\n", 12)))[-1]
        there = list(engine.infill_stream(InfillRequest(prefix, "\n", 12)))[-1]
        assert there.token_ids == here.token_ids
        assert engine.completion_ids(there) == inproc.completion_ids(here)
    counted = {}
    for name, backend in (("resident", engine), ("inproc", inproc)):
        counting = CountingBackend(backend)
        for prefix in PREFIXES[:3]:
            list(counting.infill_stream(InfillRequest(prefix, "\n", 12)))
        counted[name] = (counting.requests, counting.steps, counting.tokens)
    assert counted["resident"] == counted["inproc"]
    assert counted["inproc"][2] > 0


def test_the_suffix_fraction_travels_to_the_resident_engine(engine, inproc):
    prefix = "".join(f"a{i} = {i}\n" for i in range(60)) + "b = "
    suffix = "\n" + "".join(f"c{i} = {i}\n" for i in range(60))
    results = {}
    for fraction in (0.1, 0.25, 0.6):
        request = InfillRequest(prefix, suffix, 12, canvas_length=96, suffix_fraction=fraction)
        here = list(inproc.infill_stream(request))[-1]
        there = list(engine.infill_stream(request))[-1]
        assert (there.token_ids, there.step) == (here.token_ids, here.step)
        results[fraction] = tuple(here.token_ids)
    assert len(set(results.values())) > 1  # the split changed what the model wrote


def test_choices_travel_to_the_resident_engine(engine, inproc):
    choices = (" total\n", " totals\n", "\n")
    for prefix in PREFIXES[:3]:
        request = InfillRequest(prefix, "\n", 12, choices=choices)
        here = list(inproc.infill_stream(request))[-1]
        there = list(engine.infill_stream(request))[-1]
        assert (there.token_ids, there.step) == (here.token_ids, here.step)
        assert there.text in {"", *choices}


def test_a_judged_request_through_the_engine_equals_the_in_process_one(engine, inproc):
    """The client assembles the first draft's scores from the wire; they are the in-process
    ones, and so are the drafts written after them."""
    choices = ("y", "x + 1", "z" * 300)
    for prefix in PREFIXES[:3]:
        request = InfillRequest(prefix, "\n", 12, choices=choices, judge=True)
        here = list(inproc.infill_stream(request))
        there = list(engine.infill_stream(request))
        assert [(d.token_ids, d.text, d.step) for d in there] == [
            (d.token_ids, d.text, d.step) for d in here]
        # float32 on both sides, the same canvas; the engine process may run another number
        # of threads, which sums in another order: equal to float32 rounding, not bit for bit
        for got, want in zip(there[0].choice_logprobs, here[0].choice_logprobs, strict=True):
            assert got == pytest.approx(want, abs=1e-4)
        assert there[0].top_logprobs == pytest.approx(here[0].top_logprobs, abs=1e-4)
        assert len(here[0].choice_logprobs) == 3 and here[0].choice_logprobs[2] == ()


def test_rewrites_through_the_engine_equal_in_process_ones(engine, inproc):
    prefix, original = "def f(a):\n    ", "return a + 1"
    for strength in (0.5, 1.0):
        request = RewriteRequest(prefix, "\n", original, strength=strength, max_tokens=12)
        here = list(inproc.rewrite_stream(request))[-1]
        there = list(engine.rewrite_stream(request))[-1]
        assert (there.token_ids, there.text, there.step) == (here.token_ids, here.text,
                                                              here.step)


# Two holes, the first ended at its line; no prefix shared with an earlier request's.
HOLES = HolesRequest(("def f(a):\n", "\n    b = a * 2\n", "\n"), (6, 5),
                     SamplerSettings(share_prefix=False), until=(UnitEnd("line"), None))


def test_holes_through_the_engine_equal_in_process_ones(engine, inproc):
    here = list(inproc.holes_stream(HOLES))
    there = list(engine.holes_stream(HOLES, document="f.py"))
    assert [(d.holes, d.token_ids, d.step, d.finish_reason) for d in there] == [
        (d.holes, d.token_ids, d.step, d.finish_reason) for d in here]
    assert len(there[-1].holes) == 2


@pytest.mark.parametrize(("request_", "message"), [
    (HolesRequest(("a", "b"), (4, 4)), "texts: expected one more text than holes"),
    (HolesRequest(("a",) * 18, (1,) * 17), "holes: expected an integer in 1..16"),
    (HolesRequest(("a",) * 4, (1000,) * 3), "max_tokens in all: expected an integer in 1..2048"),
    (HolesRequest(("a", "x = 1\n" * 40, "c"), (4, 4), canvas_length=64),
     "2 holes of 8 tokens and the"),
])
def test_a_holes_request_over_the_limits_is_refused_and_the_engine_keeps_serving(
        engine, inproc, request_, message):
    with pytest.raises(EngineRefused, match="bad-request") as error:
        list(engine.holes_stream(request_))
    assert message in str(error.value)
    assert list(engine.holes_stream(HOLES))[-1].holes == list(inproc.holes_stream(HOLES))[-1].holes


def test_a_rewrite_without_max_tokens_is_sized_from_its_original_there_as_here(engine, inproc):
    # The engine used to size such a hole at 32 tokens, in process at the original's size and
    # half again (engine.text.remask.default_max_tokens): the same request, two answers.
    request = RewriteRequest("def f(a):\n    ", "\n", "return a + 1", strength=0.5)
    here = list(inproc.rewrite_stream(request))[-1]
    there = list(engine.rewrite_stream(request))[-1]
    assert (there.token_ids, there.text, there.step) == (here.token_ids, here.text, here.step)


def slow_request() -> dict:
    # one token per step over a long hole: it stays in denoising long enough to cancel
    # (the tiny model has 512 positions: the engine refuses a larger canvas)
    return {"op": "infill", "id": "slow", "prefix": "x = ", "suffix": "", "max_tokens": 500,
            "canvas_length": 512, "stream": True,
            "settings": protocol.settings_to_wire(SamplerSettings(sampler="topk", k=1))}


def test_cancel_mid_denoise_frees_the_slot_and_others_finish(engine, inproc):
    before = engine.stats()
    with raw_connect(engine) as sock:
        protocol.send(sock, slow_request())
        first = protocol.receive(sock)
        assert first["type"] == "draft" and first["draft"]["step"] == 1
        # runs beside the slow one
        other = list(engine.infill_stream(InfillRequest(PREFIXES[0], "\n", 12)))
        protocol.send(sock, {"op": "cancel", "id": "c", "target": "slow"})
        replies = {}
        while "slow" not in replies or replies["slow"]["type"] == "draft":
            reply = protocol.receive(sock)
            replies[reply["id"]] = reply
    assert other[-1].text == inproc.infill(PREFIXES[0], "\n", 12).text
    final = replies["slow"]
    assert final["type"] == "result" and final["draft"]["finish_reason"] == "cancelled"
    assert final["draft"]["step"] < 500
    assert replies["c"]["type"] == "ok"
    after = engine.stats()
    assert after["cancelled"] == before["cancelled"] + 1 and after["live"] == 0


def test_a_client_that_disconnects_has_its_work_dropped(engine):
    before = engine.stats()
    sock = raw_connect(engine)
    protocol.send(sock, slow_request())
    assert protocol.receive(sock)["type"] == "draft"
    sock.close()
    wait_for(lambda: engine.stats()["cancelled"] == before["cancelled"] + 1)
    assert engine.stats()["live"] == 0


def errors_for(sock: socket.socket, body: bytes) -> dict:
    sock.sendall(struct.pack(">I", len(body)) + body)
    return protocol.receive(sock)


def test_malformed_messages_get_error_replies_and_the_engine_keeps_serving(engine):
    with raw_connect(engine) as sock:
        assert errors_for(sock, b"{not json")["code"] == "bad-request"
        assert errors_for(sock, b"[1, 2]")["code"] == "bad-request"
        assert errors_for(sock, b'{"op": "fly", "id": 1}') == {
            "type": "error", "id": 1, "code": "unknown-op", "message": "unknown op 'fly'"}
        reply = errors_for(sock, b'{"op": "infill", "id": 2, "prefix": 3}')
        assert (reply["id"], reply["code"]) == (2, "bad-request")
        reply = errors_for(sock, b'{"op": "infill", "id": 3, "settings": {"threshold": "hi"}}')
        assert (reply["id"], reply["code"]) == (3, "bad-request")
        assert errors_for(sock, b'{"op": "hello", "id": 4, "version": 99}')["code"] == "version"
        # the same connection still works
        assert errors_for(sock, b'{"op": "ping", "id": 5}') == {"type": "ok", "id": 5}


def test_oversized_message_is_refused_and_the_engine_keeps_serving(engine):
    with raw_connect(engine) as sock:
        sock.sendall(struct.pack(">I", protocol.MAX_MESSAGE + 1))
        reply = protocol.receive(sock)
        assert (reply["type"], reply["code"]) == ("error", "too-large")
        with pytest.raises(ConnectionError):
            protocol.receive(sock)  # the stream cannot be resynced: the engine hangs up
    assert list(engine.infill_stream(InfillRequest("y = ", "\n", 4)))[-1].done


@pytest.mark.skipif(resolved_device("auto") != "cpu", reason="a GPU is present: auto is cuda")
def test_second_serve_for_the_same_model_and_device_reuses_the_first(engine, dream_ckpt):
    # The module's engine was started with --device cpu; "auto" resolves to the same device
    # on a machine without a GPU, so it is the same engine.
    run = subprocess.run(
        [sys.executable, "-m", "engine.cli", "serve", "--model", str(dream_ckpt),
         "--device", "auto", "--dtype", "float32"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0
    assert f"already serving {dream_ckpt} on auto at {engine.endpoint.socket}" in run.stderr
    assert engine.hello()["pid"] == engine.info["pid"]  # the first one, still serving


def test_one_engine_per_resolved_device_whatever_its_name(dream_ckpt):
    model = str(dream_ckpt)
    assert endpoint_for(model, "cuda").socket == endpoint_for(model, "cuda:0").socket
    assert endpoint_for(model, "auto").socket == endpoint_for(model, resolved_device("auto")).socket
    assert endpoint_for(model, "cpu").socket != endpoint_for(model, "cuda:0").socket
    assert endpoint_for(model, "cpu").socket != endpoint_for(model, "cpu", "float32").socket


def test_doctor_shows_the_running_engine(engine, dream_ckpt):
    run = subprocess.run(
        [sys.executable, "-m", "dg_lsp.cli", "doctor", "--model", str(dream_ckpt), "--device",
         "cpu", "--dtype", "float32"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout
    pid = engine.info["pid"]
    assert (f"engine:      running at {engine.endpoint.socket}: pid {pid}, model {dream_ckpt}, "
            "device cpu, masked family, up ") in run.stdout
    assert "no problems found" in run.stdout


def test_tcp_listener_refuses_a_connection_without_the_token(engine, tcp):
    def over_tcp(first: dict) -> tuple[dict, object]:
        with socket.create_connection(("127.0.0.1", tcp[0]), timeout=60) as sock:
            protocol.send(sock, first)
            reply = protocol.receive(sock)
            try:
                protocol.send(sock, {"op": "ping", "id": 9})
                return reply, protocol.receive(sock)
            except (ConnectionError, OSError):
                return reply, None  # hung up

    reply, after = over_tcp({"op": "ping", "id": 1})
    assert (reply["code"], after) == ("unauthorized", None)
    reply, after = over_tcp({"op": "hello", "id": 1, "token": "wrong"})
    assert (reply["code"], after) == ("unauthorized", None)
    reply, after = over_tcp({"op": "hello", "id": 1, "token": "s3cret"})
    assert reply["type"] == "hello" and after == {"type": "ok", "id": 9}


def test_a_full_queue_answers_busy(dream_ckpt):
    from engine import Engine
    from engine.decode.sequence import Sequence
    from engine.serve.scheduler import BATCH, INTERACTIVE, Scheduler

    scheduler = Scheduler(Engine.load(str(dream_ckpt), device="cpu"), max_batch=1, max_queue=3)
    order: list[str] = []

    def job(name: str, priority: str) -> Sequence:
        def done(draft) -> None:
            if draft.done:
                order.append(name)
        return Sequence(InfillRequest("x = ", "\n", 4), priority, on_draft=done)

    # Queued before the scheduler runs: interactive work goes ahead of batch work.
    assert scheduler.submit(job("batch-1", BATCH))
    assert scheduler.submit(job("batch-2", BATCH))
    assert scheduler.submit(job("typing", INTERACTIVE))
    assert not scheduler.submit(job("one-too-many", INTERACTIVE))
    assert scheduler.stats()["busy"] == 1
    scheduler.start()
    try:
        wait_for(lambda: len(order) == 3)
    finally:
        scheduler.stop()
    assert order == ["typing", "batch-1", "batch-2"]


# -- dg-lsp on the resident engine ------------------------------------------------------------

# Contexts where the tiny random model's completion survives post-processing (most of its
# output is junk the server rightly drops, and comparing two empty results proves nothing).
# Comments: what this random model writes (control characters, stray bytes) survives the
# syntax check only there.
LSP_TEXTS = [f"# note {i}: " for i in range(8)]
# The tiny random model is never sure of what it writes: the confidence gate is off here
# (tests/unit/test_gate.py tests it), these tests are about the engine.
OPTIONS = {"holeSize": {"restOfLine": 12, "brackets": 12, "comment": 12, "block": 12},
           "minConfidence": 0}


async def start_lsp(model: Path, engine_mode: str = "resident") -> LanguageClient:
    command = [sys.executable, "-m", "dg_lsp.cli", "serve", "--model", str(model),
               "--device", "cpu", "--dtype", "float32",  # the module's engine
               "--engine", engine_mode]
    client = await ClientServerConfig(server_command=command).start()
    await client.initialize_session(types.InitializeParams(
        capabilities=types.ClientCapabilities(), initialization_options=OPTIONS))
    return client


async def inline(client: LanguageClient, uri: str, text: str) -> str | None:
    lines = text.split("\n")
    result = await client.text_document_inline_completion_async(types.InlineCompletionParams(
        context=types.InlineCompletionContext(types.InlineCompletionTriggerKind.Automatic),
        text_document=types.TextDocumentIdentifier(uri),
        position=types.Position(len(lines) - 1, len(lines[-1]))))
    return result.items[0].insert_text if result.items else None


def expected_completion(inproc, text: str) -> str | None:
    settings, _ = parse_settings(OPTIONS)
    request = CompletionRequest(text, len(text), language_for("python", "x.py"))
    completion = Pipeline(inproc, settings).complete(request)
    return completion.text if completion else None


def open_doc(client: LanguageClient, uri: str, text: str) -> None:
    client.text_document_did_open(types.DidOpenTextDocumentParams(
        types.TextDocumentItem(uri=uri, language_id="python", version=1, text=text)))


@pytest_asyncio.fixture(loop_scope="function")
async def eight_servers(engine, dream_ckpt):
    clients = await asyncio.gather(*(start_lsp(dream_ckpt) for _ in range(8)))
    yield clients
    await asyncio.gather(*(c.shutdown_session() for c in clients))


@pytest.mark.asyncio(loop_scope="function")
async def test_eight_language_servers_share_one_engine(eight_servers, engine, inproc):
    texts = LSP_TEXTS
    expected = [expected_completion(inproc, t) for t in texts]
    assert None not in expected  # contexts where this random model's output survives
    before = engine.stats()
    for i, (client, text) in enumerate(zip(eight_servers, texts, strict=True)):
        open_doc(client, f"file:///tmp/doc{i}.py", text)
    got = await asyncio.gather(*(inline(c, f"file:///tmp/doc{i}.py", t)
                                 for i, (c, t) in enumerate(zip(eight_servers, texts,
                                                                strict=True))))
    assert got == expected
    assert engine.stats()["completed"] - before["completed"] == 8
    assert engine.hello()["pid"] == engine.info["pid"]  # nobody started a second engine


@pytest.mark.asyncio(loop_scope="function")
async def test_language_server_stats_are_the_same_on_the_resident_engine_and_in_process(
        engine, dream_ckpt):
    uri, text = "file:///tmp/counted.py", LSP_TEXTS[0]
    stats = {}
    for mode in ("resident", "inproc"):
        client = await start_lsp(dream_ckpt, mode)
        try:
            open_doc(client, uri, text)
            assert await inline(client, uri, text) is not None
            stats[mode] = await client.workspace_execute_command_async(
                types.ExecuteCommandParams(command=STATS_COMMAND))
        finally:
            await client.shutdown_session()
    keys = ("engineRequests", "denoiseSteps", "completionTokens")
    assert [stats["resident"][k] for k in keys] == [stats["inproc"][k] for k in keys]
    assert stats["resident"]["completionTokens"] > 0


@pytest.mark.asyncio(loop_scope="function")
async def test_killed_engine_answers_empty_is_restarted_and_serves_again(dream_ckpt, inproc,
                                                                          tmp_path):
    # Its own engine (a copy of the model is another endpoint): killing it spares the
    # module's shared engine.
    model = shutil.copytree(dream_ckpt, tmp_path / "model")
    client = await ClientServerConfig(server_command=[
        sys.executable, "-m", "dg_lsp.cli", "serve", "--model", str(model),
        "--device", "cpu", "--dtype", "float32"]).start()
    try:
        await client.initialize_session(types.InitializeParams(
            capabilities=types.ClientCapabilities(), initialization_options=OPTIONS))
        text = LSP_TEXTS[0]
        expected = expected_completion(inproc, text)
        assert expected is not None
        open_doc(client, "file:///tmp/kill.py", text)
        assert await inline(client, "file:///tmp/kill.py", text) == expected
        victim = EngineClient(endpoint_for(str(model), "cpu", "float32"))
        first_pid = victim.hello()["pid"]

        client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings={
            # a long hole (the settings keep 32 of the tiny model's 512 positions for context)
            "holeSize": {"restOfLine": 448, "comment": 448}, "canvasLength": 512,
            "sampler": {"name": "topk", "k": 1}}))
        pending = asyncio.ensure_future(inline(client, "file:///tmp/kill.py", text))
        for _ in range(3000):  # until the engine holds it (at most a minute)
            if victim.stats()["live"] or pending.done():
                break
            await asyncio.sleep(0.02)
        assert victim.stats()["live"] == 1, "the long request never reached the engine"
        os.kill(first_pid, signal.SIGKILL)
        assert await pending is None  # empty, not an error

        client.workspace_did_change_configuration(types.DidChangeConfigurationParams(
            settings=OPTIONS))
        restarted = None
        for _ in range(1200):  # the restarted engine loads the model again
            restarted = await inline(client, "file:///tmp/kill.py", text)
            if restarted is not None:
                break
            await asyncio.sleep(0.5)
        assert restarted == expected
        assert victim.hello()["pid"] != first_pid
        warnings = [m.message for m in client.messages if "engine stopped" in m.message]
        assert warnings == ["dg-lsp: the engine stopped; restarting it"]  # told once
        victim.shutdown()
    finally:
        await client.shutdown_session()


def test_the_engine_stops_at_the_unit_end_and_runs_the_same_passes_as_in_process(engine, inproc):
    # Text on a block opener's own line ends a block body at once: with this unit the hole
    # ends at the first step whose settled text is not blank.
    unit = UnitEnd("block", line_prefix="if x:", base_indent="")
    prefix = PREFIXES[1]
    full = list(inproc.infill_stream(InfillRequest(prefix, "\n", 12)))
    ends = next(d.step for d in full if d.text.strip())
    assert ends < full[-1].step  # the unit ends before the hole does

    here = list(inproc.infill_stream(InfillRequest(prefix, "\n", 12, until=unit)))
    before = engine.stats()["forwardPasses"]
    there = list(engine.infill_stream(InfillRequest(prefix, "\n", 12, until=unit)))
    passes = engine.stats()["forwardPasses"] - before
    assert [(d.step, d.finish_reason) for d in (here[-1], there[-1])] == [(ends, "unit")] * 2
    assert there[-1].token_ids == here[-1].token_ids == full[ends - 1].token_ids
    assert passes == ends  # none after the answer was settled


def test_a_malformed_unit_is_refused(engine):
    for bad in ({"kind": "paragraph"}, {"kind": "line", "indent": 4}, "line",
                {"kind": "block", "line_prefix": 7}):
        request = protocol.to_wire(InfillRequest("x = ", "\n", 4, canvas_length=64))
        request["until"] = bad
        with pytest.raises(EngineRefused, match="until"):
            list(engine._stream(request, None))
