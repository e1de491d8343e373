"""The CPU thread policy (engine.threads): how many intra-op threads each pass runs, for every
way the engine starts. Behaviour, not time: what the policy chooses for a given load, and what
each engine process has in its environment and reports."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine.threads import (
    CpuTimes,
    ThreadPolicy,
    available_cores,
    user_threads,
)


class Machine:
    """A fake /proc/stat: `run(seconds, elsewhere, own)` advances the clock by `seconds`
    while other processes keep `elsewhere` cores busy and this one `own`."""

    def __init__(self) -> None:
        self.busy = self.own = self.wall = 0.0

    def run(self, seconds: float, elsewhere: float, own: float = 0.0) -> None:
        self.wall += seconds
        self.own += own * seconds
        self.busy += (elsewhere + own) * seconds

    def read(self) -> CpuTimes:
        return CpuTimes(self.busy, self.own, self.wall)


def policy(machine: Machine, most: int = 2, fixed: bool = False, cores: int = 2
           ) -> tuple[ThreadPolicy, list[int]]:
    """A policy on `machine` and the counts it gave torch, in order (torch starts at `most`)."""
    applied = [most]
    return ThreadPolicy(most, fixed=fixed, cores=cores, clock=machine.read,
                        torch_threads=(lambda: applied[-1], applied.append)), applied


def test_an_idle_machine_runs_every_thread_and_a_busy_core_takes_one_away():
    machine = Machine()
    threads, applied = policy(machine)
    assert threads.before_pass() == 2  # nothing measured yet: torch's default
    machine.run(0.5, elsewhere=0.0, own=2.0)  # our passes on both cores
    assert threads.before_pass() == 2
    machine.run(0.5, elsewhere=1.0, own=1.0)  # a build started on one core
    assert threads.before_pass() == 1
    machine.run(0.5, elsewhere=1.0, own=1.0)
    assert threads.before_pass() == 1
    machine.run(0.5, elsewhere=0.1, own=1.0)  # the build ended; an editor types
    assert threads.before_pass() == 2
    machine.run(0.5, elsewhere=0.3, own=1.0)  # a browser's page: a thread would share a core
    assert threads.before_pass() == 1
    assert applied == [2, 1, 2, 1]  # torch is told only when the count changes


def test_the_count_follows_the_cores_left_free_between_one_and_the_most():
    machine = Machine()
    threads, _ = policy(machine, most=8, cores=16)
    seen = []
    for elsewhere in (0.0, 7.6, 8.4, 12.0, 16.0, 3.0):
        machine.run(1.0, elsewhere)
        seen.append(threads.before_pass())
    assert seen == [8, 8, 7, 4, 1, 8]  # 8.4 busy: a ninth core is shared
    assert threads.describe()["busyElsewhere"] == 3.0


def test_a_look_within_the_interval_keeps_the_count():
    machine = Machine()
    threads, _ = policy(machine)
    threads.before_pass()
    machine.run(0.05, elsewhere=2.0)  # too short a window to judge: 5 of /proc/stat's ticks
    assert threads.before_pass() == 2
    machine.run(0.2, elsewhere=2.0)
    assert threads.before_pass() == 1


def test_a_count_the_user_fixed_is_kept_whatever_the_load():
    machine = Machine()
    threads, applied = policy(machine, most=2, fixed=True)
    for _ in range(3):
        machine.run(1.0, elsewhere=2.0)
        assert threads.before_pass() == 2
    assert applied == [2]
    assert threads.describe()["threadChoice"] == "fixed"


def test_an_unreadable_proc_stat_keeps_the_count():
    threads = ThreadPolicy(2, cores=2, clock=lambda: None, torch_threads=(lambda: 2, print))
    assert [threads.before_pass() for _ in range(3)] == [2, 2, 2]


def test_the_users_thread_count_is_threads_then_omp_num_threads():
    assert user_threads(3, {"OMP_NUM_THREADS": "1"}, cores=4) == 3
    assert user_threads(0, {}, cores=4) == 1
    assert user_threads(None, {"OMP_NUM_THREADS": "2"}, cores=4) == 2
    # Not one positive number (libgomp's per-level lists, junk, 0): the policy chooses.
    assert [user_threads(None, {"OMP_NUM_THREADS": v}) for v in ("4,2", "many", "0", "")] == [
        None, None, None, None]
    assert user_threads(None, {}) is None


def test_a_users_count_past_the_cores_is_capped_at_them_with_a_notice(
        capsys: pytest.CaptureFixture[str]):
    assert user_threads(1000, {}, cores=2) == 2
    assert capsys.readouterr().err == (
        "dg-engine: --threads 1000 is more than the 2 CPU cores this process may run on: "
        "using 2 threads\n")
    assert user_threads(None, {"OMP_NUM_THREADS": "64"}, cores=8) == 8
    assert capsys.readouterr().err == (
        "dg-engine: OMP_NUM_THREADS 64 is more than the 8 CPU cores this process may run on: "
        "using 8 threads\n")
    assert user_threads(8, {}, cores=8) == 8
    assert capsys.readouterr().err == ""


def test_torchs_own_count_past_the_cores_is_capped_from_the_first_pass():
    # A replica's CPU share or OMP_NUM_THREADS may set torch's count past the cores; the
    # policy chooses by load only after a first look, so it starts at the cores.
    threads, applied = policy(Machine(), most=1000, cores=2)
    assert (threads.most, threads.before_pass(), applied) == (2, 2, [1000, 2])


def _fresh_torch_threads() -> int:
    """torch's default thread count in a fresh process without OMP_NUM_THREADS."""
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    out = subprocess.run([sys.executable, "-c", "import torch; print(torch.get_num_threads())"],
                         env=env, capture_output=True, text=True, check=True)
    return int(out.stdout)


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode().split("=", 1) for item in raw if b"=" in item)


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="reads /proc")
def test_a_resident_engine_started_by_a_client_spins_as_libgomp_does_and_chooses_by_load(
        dream_ckpt: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from engine.serve.socket.client import EngineClient

    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    monkeypatch.delenv("OMP_NUM_THREADS")
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    client = EngineClient.connect_or_start(str(dream_ckpt), "cpu", dtype="float32")
    try:
        assert "OMP_WAIT_POLICY" not in _environ(client.info["pid"])
        most = _fresh_torch_threads()
        threads = client.stats()["cpuThreads"]
        # How busy the machine is now (this test's process and others) is not this test's to
        # fix: the count is between one and torch's default, chosen by load.
        assert 1 <= threads.pop("threads") <= most
        threads.pop("busyElsewhere")
        assert threads == {"mostThreads": most, "threadChoice": "by load",
                           "waitPolicy": "libgomp's default"}
    finally:
        client.shutdown()


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="reads /proc")
def test_dg_engine_serve_keeps_the_users_threads_and_wait_policy(dream_ckpt: Path,
                                                                  tmp_path: Path):
    from engine.serve.socket.client import EngineClient
    from engine.serve.socket.endpoint import Endpoint

    socket = tmp_path / "engine.sock"
    env = {**os.environ, "OMP_WAIT_POLICY": "ACTIVE", "XDG_RUNTIME_DIR": str(tmp_path)}
    process = subprocess.Popen(
        [sys.executable, "-m", "engine.cli", "serve", "--model", str(dream_ckpt), "--device",
         "cpu", "--dtype", "float32", "--socket", str(socket), "--threads", "1"], env=env)
    try:
        endpoint = Endpoint(socket)
        assert endpoint.wait_alive(timeout=300, give_up=lambda: process.poll() is not None)
        client = EngineClient(endpoint)
        assert _environ(process.pid)["OMP_WAIT_POLICY"] == "ACTIVE"
        threads = client.stats()["cpuThreads"]
        assert (threads["threads"], threads["threadChoice"], threads["waitPolicy"]) == (
            1, "fixed", "ACTIVE")
        client.shutdown()
        process.wait(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()


def test_the_in_process_engine_applies_its_count_on_the_thread_that_runs_its_passes(
        dream_ckpt: Path, monkeypatch: pytest.MonkeyPatch):
    import threading

    import torch

    from engine import Engine

    monkeypatch.delenv("OMP_NUM_THREADS")
    engine = Engine.load(str(dream_ckpt), device="cpu", dtype="float32")
    policy = engine.runner.threads
    assert policy is not None and not policy.fixed
    seen = {}

    def run() -> None:
        torch.set_num_threads(policy.most + 1)  # a new thread's own count, not the policy's
        engine.infill("def f(x):\n    return ", "\n", 4)
        seen["threads"] = torch.get_num_threads()

    worker = threading.Thread(target=run)
    worker.start()
    worker.join(timeout=120)
    assert seen["threads"] == policy.threads


def test_a_fixed_engine_count_comes_from_threads_or_omp_num_threads(
        dream_ckpt: Path, monkeypatch: pytest.MonkeyPatch):
    from engine import Engine

    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    engine = Engine.load(str(dream_ckpt), device="cpu", dtype="float32")
    assert (engine.runner.threads.most, engine.runner.threads.fixed) == (1, True)
    engine = Engine.load(str(dream_ckpt), device="cpu", dtype="float32", threads=2)
    assert (engine.runner.threads.most, engine.runner.threads.fixed) == (
        min(2, available_cores()), True)


@pytest.mark.parametrize(("threads", "environ"), [(1000, "1"), (None, "1000")],
                         ids=["--threads", "OMP_NUM_THREADS"])
def test_the_engine_runs_its_passes_on_no_more_threads_than_cores(
        threads: int | None, environ: str, dream_ckpt: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]):
    import threading

    import torch

    from engine import Engine

    cores = available_cores()
    monkeypatch.setenv("OMP_NUM_THREADS", environ)
    engine = Engine.load(str(dream_ckpt), device="cpu", dtype="float32", threads=threads)
    assert "is more than the" in capsys.readouterr().err
    seen = {}

    def run() -> None:
        engine.infill("def f(x):\n    return ", "\n", 2)
        seen["threads"] = torch.get_num_threads()

    worker = threading.Thread(target=run)
    worker.start()
    worker.join(timeout=120)
    assert (seen["threads"], engine.runner.threads.describe()["threads"]) == (cores, cores)


def test_the_machines_busy_time_counts_niced_processes_and_leaves_out_idle(monkeypatch, tmp_path):
    import builtins

    from engine import threads

    stat = tmp_path / "stat"
    # user nice system idle iowait irq softirq steal guest guest_nice
    stat.write_text("cpu  100 5000 30 9000 70 4 6 10 0 0\ncpu0 ...\n")
    real_open = builtins.open
    monkeypatch.setattr(builtins, "open", lambda path, *a, **k: real_open(
        stat if path == "/proc/stat" else path, *a, **k))
    times = threads.read_cpu_times()
    assert times is not None
    assert times.machine_busy == pytest.approx(5150 / os.sysconf("SC_CLK_TCK"))
