"""A Ray cluster and a team engine on it, started as docs/team.md says: the Ray tests' helpers."""

from __future__ import annotations

import contextlib
import http.client
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.ports import free_port
from tests.support.wait import wait_for

ROOT = Path(__file__).resolve().parents[2]
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

        wait_for(up, STARTUP, "the head node", interval=0.5)
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

    wait_for(serving, STARTUP, "the deployment", interval=0.5)
