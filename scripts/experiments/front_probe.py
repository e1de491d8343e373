"""Issue #33's probe cases against a real team engine: `dg-engine serve --ray` with its front.

    PYTHONPATH=. python scripts/experiments/front_probe.py [--model DIR]

Deploys the model (default: a tiny random Dream checkpoint) on one CPU replica of a local Ray
cluster behind the front on 127.0.0.1, then, on loopback only, with bounded counts and time:
one 100 MB Authorization header, ten at once, 300 slow-header connections, 5,000 idle sockets
(from 250 loopback addresses, and 2,000 from one), a body sent a byte at a time. For each it
prints what the clients got, the resident memory (MB) of the front (the dg-engine process),
Ray Serve's proxy, the Ingress and the engine replica before, at the peak during, and 5 s
after, and whether a real completion was served while the case went on. Stops the deployment
with SIGTERM to its process group at the end.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from engine.serve.team.remote import RemoteEngine  # noqa: E402
from engine.types import InfillRequest  # noqa: E402

TOKEN = "probe-tok3n"
ROLES = {"front": "engine.cli serve", "proxy": "ray::ProxyActor",
         "ingress": "ServeReplica:dg-engine:Ingress", "replica": "ServeReplica:dg-engine:Engine"}


def rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def find_roles(front_pid: int) -> dict[str, int]:
    found = {"front": front_pid}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        for role, mark in ROLES.items():
            if role != "front" and mark in cmdline:
                found[role] = int(entry.name)
    return found


class Sampler:
    """Peak RSS of each role while a case runs."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids, self.peak = pids, {role: rss_mb(pid) for role, pid in pids.items()}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            for role, pid in self.pids.items():
                self.peak[role] = max(self.peak[role], rss_mb(pid))

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


def connect(port: int, source: str = "127.0.0.1") -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=30, source_address=(source, 0))


def big_header(port: int, size: int = 100 << 20) -> str:
    sent = 0
    with connect(port) as sock:
        try:
            sock.sendall(b"GET /v1/hello HTTP/1.1\r\nAuthorization: Bearer ")
            while sent < size:
                sock.sendall(b"a" * 65536)
                sent += 65536
        except OSError:
            pass
        try:
            reply = sock.recv(200)
        except OSError:
            reply = b""
    return f"{reply[:12].decode(errors='replace') or 'reset'} after {sent >> 20} MB sent"


def real_request(port: int) -> str:
    start = time.monotonic()
    try:
        engine = RemoteEngine(f"http://127.0.0.1:{port}", TOKEN, read_timeout=60)
        request = InfillRequest("def add(a, b):\n    return ", "\n", 4)
        last = list(engine.infill_stream(request))[-1]
        return f"served ({last.finish_reason}, {time.monotonic() - start:.1f} s)"
    except Exception as exc:  # noqa: BLE001 - reported in the table
        return f"FAILED: {exc}"


def held(socks: list[socket.socket]) -> int:
    """How many of `socks` the front still holds open (no reply, no close)."""
    count = 0
    for sock in socks:
        sock.setblocking(False)
        try:
            sock.recv(1, socket.MSG_PEEK)  # a reply (503, 408) or the close: not held
        except BlockingIOError:
            count += 1  # nothing yet: the front holds it open
        except OSError:
            pass
    return count


def case_slow_headers(port: int) -> str:
    socks = []
    for n in range(300):
        sock = connect(port, f"127.0.2.{1 + n % 250}")
        sock.sendall(b"GET /v1/hello HTTP/1.1\r\nX: ")
        socks.append(sock)
    during = real_request(port)
    time.sleep(12)  # past the 10 s header deadline
    still = held(socks)
    for sock in socks:
        sock.close()
    return f"{still} of 300 still held after 12 s; a real request meanwhile: {during}"


def case_idle(port: int, count: int, addresses: int) -> str:
    socks = [connect(port, f"127.0.{3 + (n % addresses) // 250}.{1 + (n % addresses) % 250}")
             for n in range(count)]
    time.sleep(1)
    at_once = held(socks)
    during = real_request(port)
    for sock in socks:
        sock.close()
    return (f"{at_once} of {count} held by the front; a real request meanwhile: {during}")


def case_byte_body(port: int) -> str:
    start = time.monotonic()
    with connect(port) as sock:
        sock.sendall(f"POST /v1/stream HTTP/1.1\r\nAuthorization: Bearer {TOKEN}\r\n"
                     f"Content-Length: 100000\r\n\r\n".encode())
        reply = b""
        try:
            for _ in range(100000):
                sock.sendall(b" ")
                time.sleep(0.1)
                sock.setblocking(False)
                try:
                    reply = sock.recv(200)
                    break
                except BlockingIOError:
                    pass
                finally:
                    sock.setblocking(True)
        except OSError:
            pass
    got = reply[:12].decode(errors="replace") or "reset"
    return f"{got} after {time.monotonic() - start:.1f} s"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", type=Path)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="dgp-", dir="/tmp"))
    model = args.model
    if model is None:
        from tests.support.tiny_checkpoints import write_dream_checkpoint
        model = write_dream_checkpoint(tmp / "dream")
    token = tmp / "token"
    token.write_text(TOKEN + "\n")
    token.chmod(0o600)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = os.environ | {"RAY_TMPDIR": str(tmp / "t"), "PYTHONPATH": str(ROOT)}
    log = (tmp / "serve.log").open("wb")
    serve = subprocess.Popen(
        [sys.executable, "-m", "engine.cli", "serve", "--ray", "--model", str(model),
         "--device", "cpu", "--dtype", "float32", "--token-file", str(token),
         "--listen", f"127.0.0.1:{port}", "--serve-port", str(port + 1),
         "--replica-cpus", "0.5", "--threads", "1"],
        env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while "dg-engine: serving" not in (tmp / "serve.log").read_text():
            if serve.poll() is not None or time.monotonic() > deadline:
                print((tmp / "serve.log").read_text()[-3000:])
                return 1
            time.sleep(1)
        print("warm-up:", real_request(port))
        pids = find_roles(serve.pid)
        print("processes:", pids)
        cases = [
            ("one 100 MB Authorization header", lambda: big_header(port)),
            ("ten 100 MB Authorization headers at once", lambda: ten(port)),
            ("300 slow-header connections (250 addresses)", lambda: case_slow_headers(port)),
            ("5,000 idle sockets (250 addresses)", lambda: case_idle(port, 5000, 250)),
            ("2,000 idle sockets (one address)", lambda: case_idle(port, 2000, 1)),
            ("a body a byte every 0.1 s, with the token", lambda: case_byte_body(port)),
        ]
        roles = list(pids)
        print("| case | what the clients got | " + " | ".join(
            f"{r} MB before / peak / after" for r in roles) + " |")
        print("| --- | --- |" + " --- |" * len(roles))
        for name, run in cases:
            before = {r: rss_mb(p) for r, p in pids.items()}
            with Sampler(pids) as sampler:
                outcome = run()
            time.sleep(5)
            after = {r: rss_mb(p) for r, p in pids.items()}
            cells = [f"{before[r]:.0f} / {sampler.peak[r]:.0f} / {after[r]:.0f}" for r in roles]
            print(f"| {name} | {outcome} | " + " | ".join(cells) + " |", flush=True)
        start = time.monotonic()
        os.killpg(serve.pid, signal.SIGTERM)
        code = serve.wait(60)
        print(f"SIGTERM to the process group: exit {code} in {time.monotonic() - start:.1f} s")
        return 0
    finally:
        if serve.poll() is None:
            os.killpg(serve.pid, signal.SIGKILL)
        log.close()
        shutil.rmtree(tmp, ignore_errors=True)


def ten(port: int) -> str:
    results: list[str] = []
    threads = [threading.Thread(target=lambda: results.append(big_header(port)))
               for _ in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    return "; ".join(sorted(set(results))) + f" ({len(results)} of 10)"


if __name__ == "__main__":
    sys.exit(main())
