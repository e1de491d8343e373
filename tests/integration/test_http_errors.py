"""`dg-engine serve --http`: every status the port answers carries OpenAI's error object, with
its JSON content type, those uvicorn writes without asking the application included: an
unknown path (404), a path asked with another method (405), a malformed request head (400),
the connection cap (503), a WebSocket upgrade. A trailing slash is the same path, as the team
engine's Ingress serves it: no redirect.

One engine (tiny random Dream checkpoint, with a token, at most CAP connections) serves the
module.
"""

from __future__ import annotations

import contextlib
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from engine.serve.http.api import HEADER_TIMEOUT, MAX_HEADER_BYTES
from tests.support.engine_procs import serving
from tests.support.ports import free_port
from tests.support.wait import wait_for

TOKEN = "s3cret-errors"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
CAP = 3  # --max-connections
ENDPOINTS = "POST /v1/completions, POST /completions, GET /v1/models, POST /infill"


@pytest.fixture(scope="module")
def base(dream_ckpt: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    folder = tmp_path_factory.mktemp("http-errors")
    token = folder / "token"
    token.write_text(TOKEN + "\n")
    token.chmod(0o600)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with serving(dream_ckpt, folder / "engine.sock", "--http", f"127.0.0.1:{port}",
                 "--token-file", str(token), "--max-connections", str(CAP),
                 stderr=folder / "engine.log"):
        def up() -> bool:
            with contextlib.suppress(httpx.TransportError):
                return httpx.get(f"{url}/v1/models", headers=AUTH, timeout=5).status_code == 200
            return False

        wait_for(up, timeout=120, what="the engine's HTTP listener", interval=0.1)
        yield url


def error_of(response: httpx.Response) -> dict:
    """The response's OpenAI error object, checked for its content type and shape."""
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert list(body) == ["error"] and list(body["error"]) == ["message", "type", "param", "code"]
    return body["error"]


@pytest.mark.parametrize("method,path", [("GET", "/nowhere"), ("POST", "/v1/chat/completions"),
                                         ("GET", "/nowhere/"), ("DELETE", "/")])
def test_an_unknown_path_is_a_404_error_object(base, method, path):
    response = httpx.request(method, f"{base}{path}", headers=AUTH, timeout=60)
    assert response.status_code == 404
    assert error_of(response) == {
        "message": f"{method} {path}: no such endpoint (this engine serves {ENDPOINTS})",
        "type": "invalid_request_error", "param": None, "code": "not_found"}


@pytest.mark.parametrize("method,path,allowed", [("GET", "/v1/completions", "POST"),
                                                 ("PUT", "/infill", "POST"),
                                                 ("POST", "/v1/models", "GET"),
                                                 ("GET", "/completions/", "POST")])
def test_a_path_asked_with_another_method_is_a_405_error_object(base, method, path, allowed):
    response = httpx.request(method, f"{base}{path}", headers=AUTH, timeout=60)
    assert response.status_code == 405
    assert response.headers["allow"] == allowed
    assert error_of(response) == {"message": f"{method} {path}: this path takes {allowed}",
                                  "type": "invalid_request_error", "param": None,
                                  "code": "method_not_allowed"}


def test_a_trailing_slash_is_the_same_path_not_a_redirect(base):
    models = httpx.get(f"{base}/v1/models/", headers=AUTH, timeout=60)
    assert models.status_code == 200 and models.json()["object"] == "list"
    body = {"prompt": "def twice(x):\n    return ", "max_tokens": 4}
    for path in ("/v1/completions/", "/completions/"):
        answer = httpx.post(f"{base}{path}", json=body, headers=AUTH, timeout=120)
        assert answer.status_code == 200 and answer.json()["object"] == "text_completion"
    answer = httpx.post(f"{base}/infill/", json={"input_prefix": "x = ", "n_predict": 2},
                        headers=AUTH, timeout=120)
    assert answer.status_code == 200 and "content" in answer.json()


def _raw(base: str, request: bytes) -> tuple[int, dict[str, str], bytes]:
    """(status, headers, body) of a raw `request`, read until the server closes."""
    host, port = base.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as conn:
        conn.sendall(request)
        reply = b""
        with contextlib.suppress(ConnectionResetError):
            while piece := conn.recv(65536):
                reply += piece
    head, _, body = reply.partition(b"\r\n\r\n")
    line, *fields = head.decode("latin-1").split("\r\n")
    headers = {name.lower(): value.strip() for name, _, value in
               (f.partition(":") for f in fields)}
    return int(line.split(" ")[1]), headers, body


@pytest.mark.parametrize("request_", [
    b"GET /v1/models HTTP/1.1\r\nHost: x\r\nNo colon here\r\n\r\n",
    b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: many\r\n\r\n",
    b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n",  # a TLS hello to a plain port
])
def test_a_malformed_request_head_is_a_400_error_object(base, request_):
    status, headers, body = _raw(base, request_)
    assert status == 400
    assert headers["content-type"] == "application/json"
    assert headers["connection"] == "close"
    assert json.loads(body) == {"error": {
        "message": f"a malformed request head, or one over {MAX_HEADER_BYTES} bytes",
        "type": "invalid_request_error", "param": None, "code": "invalid_request"}}


def test_a_websocket_upgrade_is_an_http_request_like_any_other(base):
    upgrade = {"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
               "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}
    response = httpx.get(f"{base}/v1/models", headers=upgrade, timeout=60)
    assert response.status_code == 401
    assert error_of(response)["code"] == "invalid_api_key"
    response = httpx.get(f"{base}/v1/models", headers=upgrade | AUTH, timeout=60)
    assert response.status_code == 200 and response.json()["object"] == "list"


def test_past_the_connection_cap_a_request_is_a_503_error_object(base):
    host, port = base.removeprefix("http://").rsplit(":", 1)
    held = [socket.create_connection((host, int(port)), timeout=30) for _ in range(CAP)]
    # Connections that send no head are closed at HEADER_TIMEOUT: the checks end before that.
    closed_by_server = time.monotonic() + HEADER_TIMEOUT

    def status() -> int:
        return httpx.get(f"{base}/v1/models", headers=AUTH, timeout=60).status_code

    try:
        wait_for(lambda: status() == 503, timeout=3, what="a request past the cap refused")
        response = httpx.get(f"{base}/v1/models", headers=AUTH, timeout=60)
        assert response.status_code == 503
        assert response.headers["connection"] == "close"
        assert error_of(response) == {
            "message": f"the engine serves {CAP} connections at once; try again",
            "type": "server_error", "param": None, "code": "busy"}
        # CAP connections in all with the asking one: served (uvicorn's count refused it).
        held.pop().close()
        wait_for(lambda: status() == 200, timeout=closed_by_server - time.monotonic() - 1,
                 what="a request served beside CAP - 1 connections")
    finally:
        for conn in held:
            conn.close()
    wait_for(lambda: httpx.get(f"{base}/v1/models", headers=AUTH, timeout=60).status_code == 200,
             timeout=10, what="a request served once the connections closed")


def test_an_endpoint_that_raises_is_a_500_error_object():
    """In process: no request a client can make gets an endpoint of a sound engine to raise."""
    from starlette.testclient import TestClient

    from engine.serve.http.api import HttpApi

    class Broken:
        async def hello(self) -> dict:
            raise RuntimeError("lost")

    client = TestClient(HttpApi(Broken(), None).app, raise_server_exceptions=False)
    response = client.get("/v1/models")
    assert response.status_code == 500
    assert error_of(response) == {"message": "the engine failed: RuntimeError",
                                  "type": "server_error", "param": None,
                                  "code": "internal_error"}
