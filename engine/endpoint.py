"""Where the resident engine for a (model, device, dtype) listens, and the locks around starting it.

    $XDG_RUNTIME_DIR/dg-engine/<key>.sock     (else <tmp>/dg-engine-<uid>/, mode 0700)
    <key>.lock    held by the serving process for its whole life (flock): one engine per key
    <key>.spawn   held by a client while it starts an engine: several editors opening at once
                  start one engine, not several
    <key>.log     the spawned engine's stderr

No torch here: the language server imports this and should start fast.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import os
import socket
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

from engine import protocol


def runtime_dir() -> Path:
    base = os.environ.get("XDG_RUNTIME_DIR")
    if base:
        path = Path(base) / "dg-engine"
    else:
        path = Path(tempfile.gettempdir()) / f"dg-engine-{os.getuid()}"
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return path


def model_key(model: str | None) -> str:
    """The same engine for every way of naming one model: None/"bundled", or a resolved path."""
    if model in (None, "", "bundled"):
        return "bundled"
    path = Path(model).expanduser()
    return str(path.resolve()) if path.exists() else model


class Endpoint:
    def __init__(self, socket_path: Path) -> None:
        self.socket = socket_path
        stem = socket_path.with_suffix("")
        self.lock_path = stem.with_suffix(".lock")
        self.spawn_path = stem.with_suffix(".spawn")
        self.log_path = stem.with_suffix(".log")

    def try_lock(self) -> IO | None:
        """The serving lock, or None when another process holds it (close the file to release)."""
        handle = open(self.lock_path, "a")  # noqa: SIM115 - held for the process's life
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            return None
        return handle

    def spawn_lock(self) -> IO:
        """Blocks until this process may start the engine; close the file to release."""
        handle = open(self.spawn_path, "a")  # noqa: SIM115
        fcntl.flock(handle, fcntl.LOCK_EX)
        return handle

    def serving(self) -> bool:
        """Whether some process holds the serving lock (it is loading or serving)."""
        handle = self.try_lock()
        if handle is None:
            return True
        handle.close()
        return False

    def connect(self, timeout: float | None = 5.0) -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        try:
            sock.connect(str(self.socket))
        except OSError:
            sock.close()
            raise
        return sock

    def alive(self) -> bool:
        """Whether an engine answers a ping on the socket."""
        try:
            with self.connect(timeout=5.0) as sock:
                protocol.send(sock, {"op": "ping", "id": 0})
                return protocol.receive(sock).get("type") == "ok"
        except (OSError, protocol.ProtocolError):
            return False

    def wait_alive(self, timeout: float, give_up: Callable[[], bool] = lambda: False) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.alive():
                return True
            if give_up():
                return False
            time.sleep(0.1)
        return False


def resolved_device(device: str) -> str:
    """The device an engine asked for `device` would load onto, without importing torch:
    "auto" is "cuda:0" where torch was built with CUDA and an NVIDIA device is present, else
    "cpu" (as `engine.checkpoint.resolve_device` decides), and "cuda" is "cuda:0"."""
    device = device.strip().lower()
    if device == "auto":
        device = "cuda" if _torch_has_cuda() and _nvidia_device_present() else "cpu"
    if device == "cuda":
        return "cuda:0"
    return device


def _torch_has_cuda() -> bool:
    """Whether the installed torch is a CUDA build (its generated version.py names a CUDA)."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return False
    version_file = Path(next(iter(spec.submodule_search_locations))) / "version.py"
    try:
        text = version_file.read_text()
    except OSError:
        return False
    for line in text.splitlines():
        if line.startswith("cuda"):
            return "None" not in line.partition("=")[2]
    return False


def _nvidia_device_present() -> bool:
    return Path("/dev/nvidiactl").exists() or Path("/proc/driver/nvidia/gpus").is_dir()


def endpoint_for(model: str | None, device: str, dtype: str = "auto") -> Endpoint:
    """Every client that would load the same model on the same device in the same dtype
    shares one engine, however it names the device ("auto", "cpu", "cuda", "cuda:0")."""
    key = f"{model_key(model)}\0{resolved_device(device)}\0{dtype}"
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return Endpoint(runtime_dir() / f"{digest}.sock")
