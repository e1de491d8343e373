"""The team deployment as docs/team.md writes it (issue #33): Ray's control plane, the front,
SIGTERM. Each test starts real Ray processes in their own session and temp dir on loopback,
waits for them within a bound and kills their process group after.

Slow (a Ray head node or two and a deployment): three tests, each with what it needs only.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import random
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("ray.serve", reason="Ray is optional: pip install 'dg-lsp[distributed]'")
pytestmark = pytest.mark.e2e  # a Ray cluster, started as docs/team.md says

from engine.serve.remote import RemoteEngine  # noqa: E402
from engine.types import InfillRequest  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
TEAM_TOKEN = "team-tok3n"
STARTUP = 240.0  # seconds for a head node or a deployment to come up on a loaded 2-core machine
STOPPED = 30.0  # seconds SIGTERM may take to stop `dg-engine serve --ray` (Ctrl-C takes ~5)


@pytest.fixture
def tmp_path() -> Iterator[Path]:
    """A short temp dir: Ray's socket paths under it must stay within AF_UNIX's 107 bytes."""
    path = Path(tempfile.mkdtemp(prefix="dgr-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def free_port() -> int:
    """A free port that Ray will not hand out meanwhile: the kernel's port 0 comes from the
    ephemeral range (32768 and up), where Ray's own processes also take ports as they start,
    so a port chosen that way was once taken before `dg-engine serve` bound it; Ray's workers
    take 10002-19999 (its default min/max worker ports)."""
    for port in random.sample(range(20000, 32000), 200):
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise OSError("no free port between 20000 and 32000")


def documented_head_recipe() -> tuple[dict[str, str], list[str]]:
    """docs/team.md's head-node recipe: its `export` lines and its `ray start --head` line."""
    text = (ROOT / "docs" / "team.md").read_text()
    block = text.split("\n# head node", 1)[1].split("```", 1)[0]
    env = dict(re.findall(r"^export (\w+)=(\S+)", block, re.M))
    line = next(x for x in block.splitlines() if x.startswith("ray start --head"))
    return env, shlex.split(line.split("#", 1)[0].replace("HEAD_IP", "127.0.0.1"))


def fetch(method: str, port: int, path: str, body: bytes | None = None,
         headers: dict[str, str] | None = None) -> tuple[int, str]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request(method, path, body=body, headers=headers or {})
        response = connection.getresponse()
        return response.status, response.read().decode(errors="replace")
    finally:
        connection.close()


def kill_group(process: subprocess.Popen, grace: float = 10.0) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(grace)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)  # Ray's daemons outlive a SIGTERM for a while
    process.wait(10)


def wait_for(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


@contextlib.contextmanager
def head_node(tmp: Path, command: list[str], env: dict[str, str]) -> Iterator[tuple[str, int]]:
    """`command` (a `ray start --head` line) run blocking in its own session, with every port
    it would share with other clusters on this machine moved to a free one; its GCS address
    and dashboard port."""
    gcs, dashboard = free_port(), free_port()
    overrides = ["--port", str(gcs), "--dashboard-port", str(dashboard),
                 "--ray-client-server-port", str(free_port()), "--temp-dir", str(tmp / "r"),
                 "--node-ip-address", "127.0.0.1", "--num-cpus", "2", "--block"]
    env = env | {"AUTOSCALER_METRIC_PORT": str(free_port()),
                 "DASHBOARD_METRIC_PORT": str(free_port())}
    log = (tmp / "ray-start.log").open("wb")
    process = subprocess.Popen([str(BIN / "ray"), *command[1:], *overrides], env=env,
                               stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        def up() -> bool:
            assert process.poll() is None, (tmp / "ray-start.log").read_text()[-2000:]
            with contextlib.suppress(OSError):
                return fetch("GET", dashboard, "/api/gcs_healthz")[0] == 200
            return False

        wait_for(up, STARTUP, "the head node")
        yield f"127.0.0.1:{gcs}", dashboard
    finally:
        kill_group(process)
        log.close()


def clean_env(tmp: Path) -> dict[str, str]:
    """This environment without any Ray settings, with a HOME of its own (no ~/.ray token)."""
    home = tmp / "home"
    home.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("RAY_") or k == "RAY_TMPDIR"}
    return env | {"HOME": str(home), "RAY_TMPDIR": str(tmp / "t"),
                  "PYTHONPATH": str(ROOT)}


def team_token(tmp: Path) -> Path:
    path = tmp / "team-token"
    path.write_text(TEAM_TOKEN + "\n")
    path.chmod(0o600)
    return path


def serve_ray(tmp: Path, env: dict[str, str], dream_ckpt: Path, *address: str,
              options: tuple[str, ...] = ("--dtype", "float32")
              ) -> tuple[subprocess.Popen, int, int]:
    """`dg-engine serve --ray` in its own session, logging to tmp/serve.log; `options` are
    added to its command line (other tests: replicas, autoscaling)."""
    listen, serve_port = free_port(), free_port()
    log = (tmp / "serve.log").open("wb")
    process = subprocess.Popen(
        [str(BIN / "dg-engine"), "serve", "--ray", *address, "--model", str(dream_ckpt),
         "--device", "cpu", "--token-file", str(team_token(tmp)),
         "--listen", f"127.0.0.1:{listen}", "--serve-port", str(serve_port),
         "--replica-cpus", "0.5", "--threads", "1", *options],
        env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    log.close()
    return process, listen, serve_port


def wait_serving(process: subprocess.Popen, tmp: Path) -> None:
    def serving() -> bool:
        said = (tmp / "serve.log").read_text()
        assert process.poll() is None, said[-3000:]
        return "dg-engine: serving" in said

    wait_for(serving, STARTUP, "the deployment")


def test_the_documented_head_node_refuses_unauthenticated_jobs_and_the_team_engine_sits_behind_its_front(  # noqa: E501
        tmp_path, dream_ckpt):
    recipe_env, command = documented_head_recipe()
    assert recipe_env.get("RAY_AUTH_MODE") == "token"
    ray_token = tmp_path / "ray-token"
    ray_token.write_text("r" * 64)
    ray_token.chmod(0o600)
    env = clean_env(tmp_path) | recipe_env | {"RAY_AUTH_TOKEN_PATH": str(ray_token)}
    with head_node(tmp_path, command, env) as (gcs, dashboard):
        job = json.dumps({"entrypoint": "id"}).encode()
        status, text = fetch("POST", dashboard, "/api/jobs/", job,
                            {"Content-Type": "application/json"})
        assert status == 401, text  # another local user cannot run code as the cluster's
        assert fetch("GET", dashboard, "/api/authentication_mode")[1] == \
            '{"authentication_mode": "token"}'
        process, listen, serve_port = serve_ray(tmp_path, env, dream_ckpt, gcs)
        try:
            wait_serving(process, tmp_path)
            # The front answers nothing without the team's token, Ray Serve's routes included.
            for path in ("/-/routes", "/-/healthz", "/v1/hello"):
                status, text = fetch("GET", listen, path)
                assert status == 401 and '"unauthorized"' in text
            engine = RemoteEngine(f"http://127.0.0.1:{listen}", TEAM_TOKEN)
            assert engine.hello()["family"] == "masked"
            drafts = list(engine.infill_stream(
                InfillRequest("def add(a, b):\n    return ", "\n", 4)))
            assert drafts[-1].done and drafts[-1].finish_reason in ("stop", "length")
            # Ray Serve's own proxy is on loopback, and its port is not the front's.
            assert fetch("GET", serve_port, "/-/healthz")[0] == 200
            # SIGTERM to the process group, as systemd stops a service: clean and prompt.
            os.killpg(process.pid, signal.SIGTERM)
            assert process.wait(STOPPED) == 0
            assert "dg-engine: stopped" in (tmp_path / "serve.log").read_text()
        finally:
            kill_group(process)


def test_a_cluster_without_rays_authentication_takes_anyones_jobs_and_serve_ray_refuses_it(
        tmp_path, dream_ckpt):
    env = clean_env(tmp_path)  # main's recipe: `ray start --head --port 6379`, no token
    with head_node(tmp_path, ["ray", "start", "--head"], env) as (gcs, dashboard):
        job = json.dumps({"entrypoint": "true"}).encode()
        status, text = fetch("POST", dashboard, "/api/jobs/", job,
                            {"Content-Type": "application/json"})
        assert status == 200 and "submission_id" in text  # what the probe did with `id`
        process, _, _ = serve_ray(tmp_path, env, dream_ckpt, gcs)
        try:
            assert process.wait(STARTUP) == 2
        finally:
            kill_group(process)
        said = (tmp_path / "serve.log").read_text()
        assert "without Ray's token authentication" in said and "--allow-ray-without-auth" in said


def test_sigterm_to_the_process_group_of_a_team_engine_on_its_own_cluster_stops_it_cleanly(
        tmp_path, dream_ckpt):
    # No address and no `ray start` cluster in its RAY_TMPDIR: it starts a local one, whose
    # processes share its process group and get the same SIGTERM.
    process, listen, _ = serve_ray(tmp_path, clean_env(tmp_path), dream_ckpt)
    try:
        wait_serving(process, tmp_path)
        assert RemoteEngine(f"http://127.0.0.1:{listen}", TEAM_TOKEN).hello()
        os.killpg(process.pid, signal.SIGTERM)
        assert process.wait(STOPPED) == 0
        assert "dg-engine: stopped" in (tmp_path / "serve.log").read_text()
    finally:
        kill_group(process)
