"""`dg-engine serve --http`: OpenAI's /v1/completions and llama.cpp's /infill, tested with the
official `openai` package and the request shape llama.vim sends.

One engine (tiny random Dream checkpoint, with a token) serves the module; what it answers
must equal what the same checkpoint computes in this process for the same prefix, suffix
and settings. The HTTP port starts no request from keys/values an earlier one left
(SamplerSettings.share_prefix) unless the request asks it to, so a prefix asked twice gets the
same answer twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from engine.serve.http.api import HEADER_TIMEOUT, MAX_HEADER_BYTES
from engine.serve.socket import protocol
from engine.serve.socket.endpoint import Endpoint
from tests.support.continue_adapter import adapter_call, installed_adapter
from tests.support.front_thread import front_in_thread
from tests.support.openai_checks import check_completions, check_streams_add_up, whole_and_streamed
from tests.support.ports import free_port
from tests.support.tls import self_signed
from tests.support.wait import wait_for

openai = pytest.importorskip("openai")

TOKEN = "s3cret-http"


@pytest.fixture(scope="module")
def inproc(dream_ckpt: Path):
    from engine import Engine

    return Engine.load(str(dream_ckpt), device="cpu", dtype="float32")


def token_file(folder: Path) -> Path:
    token = folder / "token"
    token.write_text(TOKEN + "\n")
    token.chmod(0o600)
    return token


@contextlib.contextmanager
def engine_process(ckpt: Path, folder: Path, host: str, *options: str,
                   verify: Any = True) -> Iterator[tuple[str, subprocess.Popen]]:
    """A resident engine of `ckpt` answering HTTP(S) on `host` (with the token and `options`):
    (its URL on loopback, the process, whose stderr is kept in folder/engine.log)."""
    port, scheme = free_port(), "https" if "--tls-cert" in options else "http"
    with (folder / "engine.log").open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "engine.cli", "serve", "--model", str(ckpt), "--device",
             "cpu", "--dtype", "float32", "--socket", str(folder / "engine.sock"), "--http",
             f"{host}:{port}", "--token-file", str(token_file(folder)), *options],
            stderr=log)
    base = f"{scheme}://127.0.0.1:{port}"

    def up() -> bool:
        assert process.poll() is None, (folder / "engine.log").read_text()[-3000:]
        try:
            return httpx.get(f"{base}/v1/models", headers=_auth(), timeout=5,
                             verify=verify).status_code == 200
        except httpx.TransportError:
            return False

    try:
        wait_for(up, timeout=600, what="the engine's HTTP listener", interval=0.2)
        yield base, process
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=120)


@pytest.fixture(scope="module")
def served(dream_ckpt: Path, tmp_path_factory: pytest.TempPathFactory):
    """(base URL, model name, Unix socket) of the module's engine."""
    folder = tmp_path_factory.mktemp("http")
    with engine_process(dream_ckpt, folder, "127.0.0.1") as (base, _):
        yield base, str(dream_ckpt), folder / "engine.sock"


def _auth(token: str = TOKEN) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _client(base: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{base}/v1", api_key=TOKEN, max_retries=0, timeout=120)


def _stats(sock: Path) -> dict:
    with Endpoint(sock).connect(timeout=30) as conn:
        return protocol.ask(conn, {"op": "stats", "id": 1})["stats"]


def _events(response: httpx.Response) -> list[dict | str]:
    events = []
    for line in response.iter_lines():
        if line.startswith("data: "):
            data = line.removeprefix("data: ")
            events.append(data if data == "[DONE]" else json.loads(data))
    return events


def test_the_models_endpoint_names_the_loaded_model(served):
    base, model, _ = served
    models = _client(base).models.list()
    assert [m.id for m in models.data] == [model]


def test_openai_completions_equal_the_engine_in_process(served, inproc):
    base, model, _ = served
    check_completions(_client(base), model, inproc, "def add(a, b):\n    return ",
                      "class Stack:\n    def push(self, item):\n        ",
                      "\n\nprint(add(1, 2))\n")


def test_a_stop_string_cuts_the_text(served, inproc):
    base, model, _ = served
    prefix = "def fib(n):\n    "
    full = inproc.infill(prefix, "\n", 8, seed=0).text
    assert len(full) > 2
    stop = full[1:3]
    answer = _client(base).completions.create(model=model, prompt=prefix, suffix="\n",
                                              max_tokens=8, seed=0, stop=[stop])
    assert answer.choices[0].text == full[:full.find(stop)]
    assert answer.choices[0].finish_reason == "stop"


# Continue's adapter calls, as its autocomplete makes them: `llamastack` (prompt + suffix to the
# API base's `completions`, streamed: the FIM call of a provider Continue asks for FIM) and the
# plain OpenAI client's completions with a suffix, streamed and not. Each with its own prefix.
@pytest.mark.parametrize("provider,call,prefix", [
    ("llamastack", "fimStream", "def area(r):\n    return "),
    ("openai", "completionStream", "def volume(r):\n    return "),
    ("openai", "completionNonStream", "def perimeter(r):\n    return "),
])
def test_continue_adapter_package_equals_the_engine_in_process(served, inproc, provider, call,
                                                               prefix):
    folder = installed_adapter()
    base, model, _ = served
    suffix, stops = "\n\nprint(area(2))\n", ["\n\n\n\n", "```"]
    expected = inproc.infill(prefix, suffix, 8).text
    assert expected and not any(stop in expected for stop in stops)
    body = {"model": model, "prompt": prefix, "suffix": suffix, "max_tokens": 8,
            "temperature": 0, "stop": stops, "stream": call != "completionNonStream"}
    pieces = adapter_call(folder, {"provider": provider, "apiBase": f"{base}/v1/",
                                   "apiKey": TOKEN}, call, body)
    assert "".join(pieces) == expected
    if call != "completionNonStream":
        assert len(pieces) >= 2  # the text, then the final chunk


# Prompts written in a code model's FIM template with no suffix field, as twinny and Continue's
# `provider: openai` send them: split back, they complete as the same prefix and suffix do.
@pytest.mark.parametrize("template,name,stream", [
    ("<fim_prefix>{p}<fim_suffix>{s}<fim_middle>", "half", False),
    ("<PRE> {p} <SUF>{s} <MID>", "double", True),
    ("[SUFFIX]{s}[PREFIX]{p}", "negate", False),
])
def test_openai_client_with_a_fim_template_in_the_prompt_equals_prefix_and_suffix(
        served, inproc, template, name, stream):
    base, model, _ = served
    prefix, suffix = f"def {name}(x):\n    return ", f"\n\nprint({name}(1))\n"
    expected = inproc.infill(prefix, suffix, 8, seed=0).text
    answer = _client(base).completions.create(
        model=model, prompt=template.format(p=prefix, s=suffix), max_tokens=8, seed=0,
        stream=stream)
    chunks = list(answer) if stream else [answer]
    assert "".join(c.choices[0].text for c in chunks) == expected


def test_continue_openai_provider_autocomplete_with_its_template(served, inproc):
    """Continue's autocomplete with `provider: openai`: its default template (stableCode, for a
    model name it does not know) in `prompt`, no suffix, through its adapter's completions."""
    folder = installed_adapter()
    base, model, _ = served
    prefix, suffix = "def diameter(r):\n    return ", "\n\nprint(diameter(2))\n"
    stops = ["<fim_prefix>", "<fim_suffix>", "<fim_middle>", "<file_sep>", "<|endoftext|>",
             "</fim_middle>", "</code>"]  # the template's own
    expected = inproc.infill(prefix, suffix, 8).text
    assert expected and not any(stop in expected for stop in stops)
    body = {"model": model, "prompt": f"<fim_prefix>{prefix}<fim_suffix>{suffix}<fim_middle>",
            "max_tokens": 8, "temperature": 0, "stop": stops, "stream": True}
    pieces = adapter_call(folder, {"provider": "openai", "apiBase": f"{base}/v1/",
                                   "apiKey": TOKEN}, "completionStream", body)
    assert "".join(pieces) == expected


@pytest.mark.parametrize("path,prompt,prefix,suffix,field", [
    # provider lmstudio (its body; the codellama template, twinny's default, as twinny writes it)
    ("/v1/completions", "<PRE> \ndef cube(x):\n    return  <SUF> \nprint(cube(3))\n <MID>",
     "\ndef cube(x):\n    return ", " \nprint(cube(3))\n", "text"),
    # provider llamacpp with path /infill (its body; the codeqwen template)
    ("/infill", "<|fim_prefix|>def square(x):\n    return <|fim_suffix|>\nprint(square(3))\n"
     "<|fim_middle|>", "def square(x):\n    return ", "\nprint(square(3))\n", "content"),
])
def test_twinny_request_shapes_equal_the_engine_in_process(served, inproc, path, prompt, prefix,
                                                          suffix, field):
    """twinny's FIM requests (src/extension/provider-options.ts), streamed as it reads them."""
    base, model, _ = served
    expected = inproc.infill(prefix, suffix, 8).text
    body = {"prompt": prompt, "stream": True, "temperature": 0, "max_tokens": 8}
    if path == "/v1/completions":
        body["model"] = model
    with httpx.stream("POST", f"{base}{path}", json=body, headers=_auth(),
                      timeout=120) as response:
        assert response.status_code == 200
        events = [e for e in _events(response) if e != "[DONE]"]
    texts = [e["choices"][0]["text"] if field == "text" else e["content"] for e in events]
    assert "".join(texts) == expected


def llama_vim_request(prefix: str, middle: str, suffix: str, stream: bool) -> dict:
    """The body llama.vim's FIM request sends (its autoload/llama.vim)."""
    return {"id_slot": 0, "input_prefix": prefix, "input_suffix": suffix,
            "input_extra": [{"text": "def helper(x):\n    return x * 2\n", "time": 0,
                             "filename": "lib/helper.py"}],
            "prompt": middle, "n_predict": 8, "stop": [], "n_indent": 4, "top_k": 40,
            "top_p": 0.90, "samplers": ["top_k", "top_p", "infill"], "stream": stream,
            "cache_prompt": True, "t_max_prompt_ms": 500, "t_max_predict_ms": 1000,
            "response_fields": ["content", "timings/prompt_n", "timings/predicted_n"]}


def test_llama_vim_infill_equals_the_engine_in_process(served, inproc):
    base, _, _ = served
    extra = ("# Compare this snippet from lib/helper.py:\n# def helper(x):\n"
             "#     return x * 2\n")
    for prefix, stream in (("import os\n\n", False), ("import sys\n\n", True)):
        middle, suffix = "value = ", "\nprint(value)\n"
        expected = inproc.infill(extra + prefix + middle, suffix, 8).text
        body = llama_vim_request(prefix, middle, suffix, stream)
        with httpx.stream("POST", f"{base}/infill", json=body, headers=_auth(),
                          timeout=120) as response:
            assert response.status_code == 200
            if stream:
                events = _events(response)
                assert "".join(e["content"] for e in events) == expected
                assert [e["stop"] for e in events][-1] is True
                assert not any(e["stop"] for e in events[:-1])
            else:
                response.read()
                answer = response.json()
                assert answer["content"] == expected and answer["stop"] is True
                assert "samplers" in answer["dg"]["ignored"]


def test_llama_vim_cache_warm_up_writes_nothing(served):
    base, _, _ = served
    body = dict(llama_vim_request("", "", "", False), n_predict=0)
    answer = httpx.post(f"{base}/infill", json=body, headers=_auth(), timeout=60).json()
    assert answer["content"] == "" and answer["stop"] is True


@pytest.mark.parametrize("path,body,status,error", [
    ("/v1/completions", {"prompt": 1}, 400,
     {"message": "prompt: expected str or list, got 1", "type": "invalid_request_error",
      "param": "prompt", "code": "invalid_type"}),
    ("/v1/completions", {"prompt": "x", "n": 2}, 400,
     {"message": "n: only 1 completion per request", "type": "invalid_request_error",
      "param": "n", "code": "unsupported"}),
    ("/v1/completions", {"prompt": "x", "temperature": 99}, 400,
     {"message": "temperature: expected a finite number in 0..10, got 99",
      "type": "invalid_request_error", "param": "temperature", "code": "invalid_value"}),
    ("/v1/completions", {"prompt": "x", "max_tokens": 9999}, 400,
     {"message": "max_tokens must be in [1, canvas_length - 1 = 511], not 9999",
      "type": "invalid_request_error", "param": "max_tokens", "code": "invalid_value"}),
    ("/infill", {"input_prefix": "x", "n_predict": 9999}, 400,
     {"message": "n_predict must be in [1, canvas_length - 1 = 511], not 9999",
      "type": "invalid_request_error", "param": "n_predict", "code": "invalid_value"}),
    ("/infill", {"input_prefix": "x", "input_extra": "nope"}, 400,
     {"message": 'input_extra: expected list, got "nope"', "type": "invalid_request_error",
      "param": "input_extra", "code": "invalid_type"}),
])
def test_bad_requests_get_openai_error_objects(served, path, body, status, error):
    base, _, _ = served
    response = httpx.post(f"{base}{path}", json=body, headers=_auth(), timeout=60)
    assert response.status_code == status
    assert response.json() == {"error": error}


def test_a_body_over_the_limit_is_refused(served):
    base, _, _ = served
    body = json.dumps({"prompt": "x" * (protocol.MAX_MESSAGE + 1)})
    response = httpx.post(f"{base}/v1/completions", content=body, timeout=60,
                          headers={**_auth(), "Content-Type": "application/json"})
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "too_large"


def test_openai_client_bad_request_raises_its_error(served):
    base, model, _ = served
    with pytest.raises(openai.BadRequestError) as caught:
        _client(base).completions.create(model=model, prompt="x", max_tokens=8, n=2)
    assert caught.value.body["param"] == "n"


@pytest.mark.parametrize("method,path", [("GET", "/v1/models"), ("POST", "/v1/completions"),
                                         ("POST", "/infill"), ("GET", "/nowhere")])
@pytest.mark.parametrize("headers", [{}, _auth("wrong"), {"Authorization": TOKEN}])
def test_no_path_answers_without_the_token(served, method, path, headers):
    base, _, _ = served
    response = httpx.request(method, f"{base}{path}", json={"prompt": "x"}, headers=headers,
                             timeout=60)
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "invalid_api_key"


def test_a_client_that_disconnects_cancels_its_denoising(served):
    base, _, sock = served
    before = _stats(sock)["cancelled"]
    # one token per pass over a long hole: it is still denoising when the client leaves
    body = {"prompt": "x = ", "max_tokens": 500, "stream": True,
            "dg_settings": {"sampler": "topk", "k": 1}}
    with httpx.stream("POST", f"{base}/v1/completions", json=body, headers=_auth(),
                      timeout=120) as response:
        assert response.status_code == 200
        next(response.iter_lines())
    wait_for(lambda: _stats(sock)["cancelled"] > before, timeout=2.0,
             what="the request cancelled", interval=0.05)
    assert _stats(sock)["live"] == 0


def test_http_beyond_loopback_needs_a_token_and_tls_or_the_explicit_flag(dream_ckpt, tmp_path,
                                                                       capsys):
    from engine.cli import main

    serve = ["serve", "--model", str(dream_ckpt), "--device", "cpu", "--socket",
             str(tmp_path / "engine.sock"), "--http", f"0.0.0.0:{free_port()}"]
    assert main(serve) == 2  # refused before the model is loaded
    said = capsys.readouterr().err
    assert "--token-file" in said and "0.0.0.0" in said
    serve += ["--token-file", str(token_file(tmp_path))]
    assert main(serve) == 2
    said = capsys.readouterr().err
    assert "--tls-cert" in said and "--allow-http-without-tls" in said
    missing = ["--tls-cert", str(tmp_path / "none.pem"), "--tls-key", str(tmp_path / "none.key")]
    assert main(serve + missing) == 2
    assert "cannot load the certificate" in capsys.readouterr().err
    assert main(serve + missing[:2]) == 2
    assert "--tls-cert and --tls-key go together" in capsys.readouterr().err


def test_http_beyond_loopback_with_tls_completes_over_https(dream_ckpt, inproc, tmp_path):
    cert, key = self_signed(tmp_path)
    trusted = ssl.create_default_context(cafile=str(cert))
    with engine_process(dream_ckpt, tmp_path, "0.0.0.0", "--tls-cert", str(cert), "--tls-key",
                        str(key), verify=trusted) as (base, _):
        api = openai.OpenAI(base_url=f"{base}/v1", api_key=TOKEN, max_retries=0,
                            http_client=httpx.Client(verify=trusted, timeout=120))
        prefix = "def mean(xs):\n    return "
        answer = api.completions.create(model=str(dream_ckpt), prompt=prefix, suffix="\n",
                                        max_tokens=8, seed=0)
        assert answer.choices[0].text == inproc.infill(prefix, "\n", 8, seed=0).text
        with pytest.raises(httpx.TransportError):  # plain HTTP does not reach it
            httpx.get(base.replace("https:", "http:") + "/v1/models", headers=_auth(),
                      timeout=10)
        with _connect(base.replace("https:", "http:")) as conn:  # no TLS handshake: cut
            assert _closed_after(conn) < HEADER_TIMEOUT + 2


def test_http_beyond_loopback_without_tls_on_the_explicit_flag_warns(dream_ckpt, tmp_path):
    with engine_process(dream_ckpt, tmp_path, "0.0.0.0", "--allow-http-without-tls"):
        said = (tmp_path / "engine.log").read_text()
    assert "warning: --http 0.0.0.0:" in said and "in clear" in said


def test_a_client_that_leaves_before_the_answer_cancels_its_denoising(served):
    base, _, sock = served
    before = _stats(sock)["cancelled"]
    body = {"input_prefix": "y = ", "n_predict": 500, "dg_settings": {"sampler": "topk", "k": 1}}
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{base}/infill", json=body, headers=_auth(), timeout=0.5)
    wait_for(lambda: _stats(sock)["cancelled"] > before, timeout=2.0,
             what="the request cancelled", interval=0.05)


def _connect(base: str) -> socket.socket:
    host, port = base.removeprefix("http://").rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=HEADER_TIMEOUT + 5)


def _closed_after(conn: socket.socket, trickle: bytes = b"") -> float:
    """Seconds until the server closes `conn`, sending it `trickle` a byte at a time."""
    start = time.monotonic()
    conn.settimeout(0.5)
    for byte in trickle:
        try:
            if conn.recv(4096) == b"":
                return time.monotonic() - start
        except TimeoutError:
            pass
        try:
            conn.sendall(bytes([byte]))
        except OSError:  # reset: closed
            return time.monotonic() - start
    conn.settimeout(HEADER_TIMEOUT + 5)
    with contextlib.suppress(ConnectionResetError):
        while conn.recv(4096):
            pass
    return time.monotonic() - start


def test_a_head_sent_a_byte_at_a_time_is_cut_at_the_deadline(served):
    base, _, _ = served
    head = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
            + b"X-Slow: " + b"a" * 200 + b"\r\n\r\n")
    with _connect(base) as conn:
        assert _closed_after(conn, head) < HEADER_TIMEOUT + 2


def test_an_idle_connection_is_closed(served):
    base, _, _ = served
    with _connect(base) as conn:
        assert _closed_after(conn) < HEADER_TIMEOUT + 2


def test_an_oversized_head_sent_in_pieces_is_refused(served):
    base, _, _ = served
    head = (b"GET /v1/models HTTP/1.1\r\nHost: x\r\n"
            + b"X-Big: " + b"a" * (MAX_HEADER_BYTES + 1) + b"\r\n\r\n")
    with _connect(base) as conn:
        with contextlib.suppress(OSError):  # reset before all of it is sent: refused too
            for start in range(0, len(head), 1024):  # in pieces, as a slow client sends it
                conn.sendall(head[start:start + 1024])
                time.sleep(0.01)
        answer = b""
        with contextlib.suppress(ConnectionResetError):
            while piece := conn.recv(4096):
                answer += piece
    assert answer == b"" or answer.split(b" ", 2)[1] in (b"400", b"431")


def test_an_oversized_head_sent_whole_gets_431(served):
    base, _, _ = served
    response = httpx.get(f"{base}/v1/models", timeout=60,
                         headers={**_auth(), "X-Big": "a" * (MAX_HEADER_BYTES + 1)})
    assert response.status_code == 431
    assert response.json()["error"]["code"] == "too_large"


# -- streamed answers add up ----------------------------------------------------------------


def test_streamed_answers_add_up_to_the_whole_answer(served):
    base, _, _ = served
    check_streams_add_up(base, _auth())


@pytest.fixture(scope="module")
def block_ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random DiffusionGemma: the block family, whose drafts rewrite their text at every
    step (each holds the argmax of positions the next step samples again)."""
    from tests.support.diffusion_gemma import write_diffusion_gemma

    return write_diffusion_gemma(tmp_path_factory.mktemp("block"))


def test_a_block_models_streamed_answers_add_up_to_the_whole_answer(block_ckpt, tmp_path):
    with engine_process(block_ckpt, tmp_path, "127.0.0.1") as (base, _):
        check_streams_add_up(base, _auth())


class _Method:
    """A deployment method as a Ray Serve handle offers it: `remote(...)`."""

    def __init__(self, call: Any) -> None:
        self.remote = call


class _Replies:
    """A streamed call's replies (Ray Serve's DeploymentResponseGenerator)."""

    def __init__(self, replies: AsyncIterator[dict]) -> None:
        self.replies = replies

    def __aiter__(self) -> _Replies:
        return self

    async def __anext__(self) -> dict:
        return await self.replies.__anext__()

    def cancel(self) -> None:
        asyncio.ensure_future(self.replies.aclose())


class _ReplicaHandle:
    """The handle the Ingress holds to its EngineReplica deployment, over one replica here."""

    def __init__(self, replica: Any) -> None:
        async def hello(key: str) -> dict:
            return replica.hello(key)

        self.hello = _Method(hello)
        self.stream = _Method(lambda key, message: _Replies(replica.stream(key, message)))
        self.serve = _Method(lambda key, request, names: _Replies(replica.serve(key, request,
                                                                                names)))

    def options(self, stream: bool = False) -> _ReplicaHandle:
        return self


@contextlib.contextmanager
def team_without_ray(ckpt: Path) -> Iterator[str]:
    """A team engine's HTTP face without Ray: engine.serve.team.app's Ingress over one
    EngineReplica of `ckpt` (Ray Serve's handle stood in for), served by uvicorn on loopback
    behind the team's Front, as `dg-engine serve --ray` runs them; the Front's URL."""
    pytest.importorskip("ray.serve", reason="Ray is optional: pip install 'dg-lsp[distributed]'")
    import uvicorn
    from starlette.requests import Request

    from engine import Engine
    from engine.serve.limits import Limits
    from engine.serve.scheduler import Scheduler
    from engine.serve.team.app import EngineReplica, Ingress, token_digest
    from engine.serve.team.front import Front

    replica = EngineReplica.__new__(EngineReplica)  # its __init__ asks Ray for its id
    replica.scheduler = Scheduler.loading(
        lambda: Engine.load(str(ckpt), device="cpu", dtype="float32"), 2, 8)
    replica.engine, replica.name, replica.replica = replica.scheduler.engine, "team", "r1"
    replica.limits = Limits(replica.engine.config.max_position_embeddings, 1 << 30, 120.0)
    board = type("Board", (), {"refuse": _Method(lambda: None)})()
    ingress = Ingress(_ReplicaHandle(replica), board, token_digest(TOKEN))

    async def app(scope: Any, receive: Any, send: Any) -> None:  # as Ray Serve's proxy calls it
        response = await ingress(Request(scope, receive))
        await response(scope, receive, send)

    proxy_port, port = free_port(), free_port()
    proxy = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=proxy_port,
                                          lifespan="off", log_level="warning"))
    thread = threading.Thread(target=proxy.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: proxy.started, timeout=30, what="the stand-in proxy")
        with front_in_thread(Front(("127.0.0.1", proxy_port), token_digest(TOKEN)), port):
            yield f"http://127.0.0.1:{port}"
    finally:
        proxy.should_exit = True
        thread.join(30)
        replica.scheduler.stop()


def test_through_the_team_front_streamed_answers_add_up_and_errors_are_openais(block_ckpt):
    with team_without_ray(block_ckpt) as base:
        check_streams_add_up(base, _auth())
        response = httpx.get(f"{base}/v1/completions", headers=_auth(), timeout=60)
        assert response.status_code == 405 and response.headers["allow"] == "POST"
        assert response.json() == {"error": {
            "message": "GET /v1/completions: this path takes POST",
            "type": "invalid_request_error", "param": None, "code": "method_not_allowed"}}


def test_the_same_request_gets_the_same_answer_whatever_came_before(served):
    """Another hole after the same prefix in between leaves keys/values the engine could start
    from (computed beside that hole): at the port's defaults the answer does not change, whole
    or streamed."""
    base, headers = served[0], _auth()
    prefix = "def area(radius):\n    import math\n    return math.pi * "
    ask = {"prompt": prefix, "suffix": "\n\nprint(area(2))\n", "max_tokens": 8}
    first = httpx.post(f"{base}/v1/completions", json=ask, headers=headers, timeout=120)
    other = ask | {"suffix": " ** 2  # the other hole\n"}
    for _ in range(2):
        assert httpx.post(f"{base}/v1/completions", json=other, headers=headers,
                          timeout=120).status_code == 200
    whole, deltas = whole_and_streamed(base, "/v1/completions", ask, headers)
    assert whole == "".join(deltas) == first.json()["choices"][0]["text"]
