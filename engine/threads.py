"""The CPU threads of the model's passes: how many there are, and how they wait.

Torch splits each operator evenly over its intra-op threads (libgomp) and waits at the end for
the slowest share. On a machine where another process holds a core, one of those threads
shares that core and every operator waits for it, while by default the threads that finished
spin at the barrier and keep the cores they could have given up: a completion that takes
66 ms on an idle 2-core machine took seconds with one busy process beside it
(docs/performance.md#a-busy-machine). So the engine, wherever it runs (the resident engine,
the model inside `dg-lsp serve`, a team replica, training), follows one policy:

- **Wait passively.** `OMP_WAIT_POLICY=PASSIVE` unless the user set it: a thread whose share
  is done sleeps instead of spinning. libgomp reads it once, when torch loads it, so it is put
  in the environment before torch is imported (`prepare_environment`, first thing in the
  `dg-lsp` and `dg-engine` commands) and in the environment of every engine process started
  (`engine_environment`).
- **As many threads as the other processes leave cores.** Before a pass, at most every
  `ThreadPolicy.interval` seconds, the policy reads how much CPU the machine spent outside
  this process since it last looked (/proc/stat less this process's own time) and runs
  `cores - busy elsewhere` threads, rounded, between one and torch's default (one a physical
  core). On an idle machine that is torch's default; with one core taken, one fewer.
- **What the user chose wins.** `--threads N` or `OMP_NUM_THREADS` fixes the count; a set
  `OMP_WAIT_POLICY` (or `GOMP_SPINCOUNT`) is left alone.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass

WAIT_POLICY = "PASSIVE"
WAIT_VARIABLES = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")  # libgomp's; the user's are kept
# Seconds between two looks at the machine's load: short enough that a build starting beside
# a completion is seen within a few passes, long enough that /proc/stat's 10 ms ticks add up.
INTERVAL = 0.2


def prepare_environment(environ: MutableMapping[str, str] | None = None) -> None:
    """Put the wait policy in `environ` (this process's by default) unless the user chose
    one; it must run before torch is imported to have any effect on this process."""
    environ = os.environ if environ is None else environ
    if not any(name in environ for name in WAIT_VARIABLES):
        environ["OMP_WAIT_POLICY"] = WAIT_POLICY


def engine_environment(environ: MutableMapping[str, str] | None = None) -> dict[str, str]:
    """The environment to start an engine process with: `environ` (this process's by
    default) and the wait policy."""
    env = dict(os.environ if environ is None else environ)
    prepare_environment(env)
    return env


def wait_variables(environ: MutableMapping[str, str] | None = None) -> dict[str, str]:
    """Only the wait policy's variables of `engine_environment`: what a process started
    elsewhere (a Ray replica on another node) is given."""
    env = engine_environment(environ)
    return {name: env[name] for name in WAIT_VARIABLES if name in env}


def user_threads(requested: int | None, environ: MutableMapping[str, str] | None = None
                 ) -> int | None:
    """The thread count the user fixed: `requested` (`--threads`), else OMP_NUM_THREADS when
    it holds one positive number; None when the policy chooses."""
    if requested is not None:
        return max(1, requested)
    raw = (os.environ if environ is None else environ).get("OMP_NUM_THREADS", "").strip()
    return int(raw) if raw.isdigit() and int(raw) > 0 else None


@dataclass(frozen=True)
class CpuTimes:
    """Seconds of CPU time, read at one moment: the machine's busy time over all its cores,
    this process's own, and the wall clock."""

    machine_busy: float
    own: float
    wall: float


def read_cpu_times() -> CpuTimes | None:
    """The machine's busy CPU seconds at normal priority or above (Linux /proc/stat), this
    process's and the time; None where /proc/stat cannot be read (the policy then keeps its
    count)."""
    try:
        with open("/proc/stat", "rb") as stat:
            fields = stat.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != b"cpu" or len(fields) < 5:
        return None
    # user, nice, system, idle, iowait, irq, softirq, steal, ...: nice time is left out, as
    # is idle, for a process that runs at a lower priority (`nice make`) yields its core to
    # ours when both want it.
    ticks = [int(v) for v in fields[1:9]]
    busy = ticks[0] + ticks[2] + sum(ticks[5:8])
    own = os.times()
    return CpuTimes(busy / os.sysconf("SC_CLK_TCK"), own.user + own.system, time.monotonic())


def available_cores() -> int:
    """The CPUs this process may run on (its affinity, or the machine's)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


class ThreadPolicy:
    """Chooses the intra-op thread count before passes (`before_pass`), on the thread that
    runs them (libgomp keeps the count per thread)."""

    def __init__(self, most: int, fixed: bool = False, cores: int | None = None,
                 clock: Callable[[], CpuTimes | None] = read_cpu_times,
                 torch_threads: tuple[Callable[[], int], Callable[[int], None]] | None = None,
                 interval: float = INTERVAL) -> None:
        """`most`: the threads on an idle machine; `fixed`: always `most` (the user chose).
        `torch_threads`: (get, set) of the calling thread's count (default: torch's)."""
        self.most = max(1, most)
        self.fixed = fixed
        self.cores = cores or available_cores()
        self.clock = clock
        self.interval = interval
        self._torch_threads = torch_threads
        self.threads = self.most
        self.elsewhere = 0.0  # cores busy outside this process at the last look
        self._last: CpuTimes | None = None

    @classmethod
    def standard(cls, requested: int | None = None) -> ThreadPolicy:
        """The engine's policy: fixed at the user's count (`--threads`, OMP_NUM_THREADS),
        else chosen by load up to torch's default."""
        import torch

        fixed = user_threads(requested)
        return cls(fixed or torch.get_num_threads(), fixed=fixed is not None)

    def before_pass(self) -> int:
        """The count for the next pass, applied to the calling thread (libgomp keeps one per
        thread, so it is compared with that thread's, not with the last one applied)."""
        if not self.fixed:
            self._look()
        if self._torch_threads is None:
            import torch

            self._torch_threads = (torch.get_num_threads, torch.set_num_threads)
        get, set_threads = self._torch_threads
        if get() != self.threads:
            set_threads(self.threads)
        return self.threads

    def describe(self) -> dict[str, object]:
        """What `dg-engine` reports (engine stats, `dg-lsp doctor`)."""
        return {"threads": self.threads, "mostThreads": self.most,
                "threadChoice": "fixed" if self.fixed else "by load",
                "busyElsewhere": round(self.elsewhere, 2),
                "waitPolicy": os.environ.get("OMP_WAIT_POLICY", "libgomp's default")}

    def _look(self) -> None:
        now = self.clock()
        if now is None:
            return
        last = self._last
        if last is not None and now.wall - last.wall < self.interval:
            return
        self._last = now
        if last is None:
            return
        wall = now.wall - last.wall
        elsewhere = (now.machine_busy - last.machine_busy) - (now.own - last.own)
        self.elsewhere = min(float(self.cores), max(0.0, elsewhere / wall))
        free = int(self.cores - self.elsewhere + 0.5)
        self.threads = max(1, min(self.most, free))
