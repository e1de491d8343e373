"""Where the resident engine for a (model, device, dtype) listens, and the locks around starting it.

    $XDG_RUNTIME_DIR/dg-engine/<key>.sock     (else <tmp>/dg-engine-<uid>/, mode 0700)
    <key>.lock    held by the serving process for its whole life (flock): one engine per key
    <key>.spawn   held by a client while it starts an engine: several editors opening at once
                  start one engine, not several
    <key>.log     the spawned engine's stderr

The directory is trusted only as ssh-agent, tmux and D-Bus trust theirs: it must be a real
directory (not a symlink), owned by this user and closed to everyone else (mode 0700). In a
shared /tmp another user could otherwise create it first and read every request or answer
in the engine's place. Anything else is refused with `UnsafeRuntimeDir`, whose message names
the path and the fix. Files in it are opened with O_NOFOLLOW, and both ends of the socket
check the other's uid (SO_PEERCRED) before trusting a byte.

No torch here: the language server imports this and should start fast.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import os
import socket
import stat
import struct
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

from engine.serve.socket import protocol

CONNECT_TIMEOUT = 5.0  # seconds: a local socket connects at once unless the engine is stuck
# A ping is answered by the engine's event loop even while the model computes: a few seconds
# without an answer means the process is stopped or wedged.
PING_TIMEOUT = 5.0


class UnsafeRuntimeDir(OSError):
    """The runtime directory (or a file in it) could be read or replaced by another user."""


class UntrustedPeer(OSError):
    """The process at the other end of the socket runs as another user."""


def runtime_dir() -> Path:
    """The user's private directory for engine sockets, created if missing; UnsafeRuntimeDir
    when it exists but is not a directory of this user's that only they can open."""
    base = os.environ.get("XDG_RUNTIME_DIR")
    if base:
        path = Path(base) / "dg-engine"
    else:
        path = Path(tempfile.gettempdir()) / f"dg-engine-{os.getuid()}"
    try:
        # Created with its final mode in one call: no moment where it is open to others.
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass  # ours from an earlier run, or planted: the checks below tell
    except OSError as exc:
        raise UnsafeRuntimeDir(f"cannot create the engine's runtime directory {path}: "
                               f"{exc.strerror}") from None
    check_private_dir(path)
    return path


def check_private_dir(path: Path) -> None:
    """UnsafeRuntimeDir unless `path` itself (not a symlink's target) is a directory owned by
    this user with no access for group or others."""
    try:
        st = os.lstat(path)
    except OSError as exc:
        raise UnsafeRuntimeDir(f"cannot inspect {path}: {exc.strerror}") from None
    uid = os.getuid()
    if stat.S_ISLNK(st.st_mode):
        problem = "is a symlink"
    elif not stat.S_ISDIR(st.st_mode):
        problem = "is not a directory"
    elif st.st_uid != uid:
        problem = f"is owned by uid {st.st_uid}, not by you (uid {uid})"
    elif st.st_mode & 0o077:
        raise UnsafeRuntimeDir(
            f"the engine's runtime directory {path} has mode {stat.S_IMODE(st.st_mode):04o}: "
            f"other users may have put files in it; check it, then chmod 700 {path}")
    else:
        return
    raise UnsafeRuntimeDir(f"the engine's runtime directory {path} {problem}: someone may be "
                           f"intercepting the engine; remove it (or set XDG_RUNTIME_DIR to a "
                           f"private directory)")


def open_private(path: Path, binary: bool = False) -> IO:
    """`path` opened for appending, refusing a symlink (O_NOFOLLOW) or anything but a regular
    file of this user's; created 0600 when missing."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        # O_NONBLOCK: a FIFO planted in its place must not hang us before the check below.
        fd = os.open(path, flags | os.O_NONBLOCK, 0o600)
    except OSError as exc:
        raise UnsafeRuntimeDir(f"cannot open {path} safely: {exc.strerror} (a symlink there "
                               f"is refused: remove it)") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid():
        os.close(fd)
        raise UnsafeRuntimeDir(f"{path} is not a regular file of yours: remove it")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "ab" if binary else "a")


PEERCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


def peer_credentials(sock: socket.socket) -> tuple[int, int, int]:
    """(pid, uid, gid) of the process at the other end of a Unix socket, from the kernel."""
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, PEERCRED.size)
    pid, uid, gid = PEERCRED.unpack(raw)
    return pid, uid, gid


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
        handle = open_private(self.lock_path)  # held for the process's life
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            return None
        return handle

    def spawn_lock(self) -> IO:
        """Blocks until this process may start the engine; close the file to release."""
        handle = open_private(self.spawn_path)
        fcntl.flock(handle, fcntl.LOCK_EX)
        return handle

    def serving(self) -> bool:
        """Whether some process holds the serving lock (it is loading or serving)."""
        handle = self.try_lock()
        if handle is None:
            return True
        handle.close()
        return False

    def connect(self, timeout: float | None = CONNECT_TIMEOUT) -> socket.socket:
        """A connection to the engine, checked to run as this user before a byte is sent
        (UntrustedPeer otherwise); `timeout` applies to the connect and every later read."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        try:
            sock.connect(str(self.socket))
            pid, uid, _ = peer_credentials(sock)
            if uid != os.getuid():
                raise UntrustedPeer(f"the process listening at {self.socket} (pid {pid}) runs "
                                    f"as uid {uid}, not as you (uid {os.getuid()}): refusing "
                                    f"to talk to it")
        except OSError:
            sock.close()
            raise
        return sock

    def probe(self, timeout: float = PING_TIMEOUT) -> tuple[str, int | None]:
        """("alive", pid) when the engine answers a ping within `timeout`; ("hung", pid) when
        it accepts connections but does not answer (stopped or stuck); ("absent", None) when
        nothing listens."""
        try:
            sock = self.connect(timeout=timeout)
        except TimeoutError:
            return "hung", None  # the listen backlog is full: nobody accepts
        except OSError:
            return "absent", None
        with sock:
            pid = peer_credentials(sock)[0]
            try:
                # Any answer proves it alive, "busy" (all connections taken) included.
                protocol.ask(sock, {"op": "ping", "id": 0})
            except TimeoutError:
                return "hung", pid
            except (OSError, protocol.ProtocolError):
                return "absent", None
        return "alive", pid

    def alive(self, timeout: float = PING_TIMEOUT) -> bool:
        """Whether an engine answers a ping on the socket within `timeout`."""
        return self.probe(timeout)[0] == "alive"

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
    "cpu" (as `engine.models.checkpoint.resolve_device` decides), and "cuda" is "cuda:0"."""
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
