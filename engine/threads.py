"""The CPU threads of the model's passes: how many there are.

Torch splits each operator evenly over its intra-op threads (libgomp) and waits at the end for
the slowest share, and by default a thread whose share is done spins at that barrier instead of
sleeping. On an idle machine spinning is the fastest way to wait. Beside another process, one
of the threads shares a core with it and every operator waits for it, while its partner spins
on the core it could have given up: completions several times slower with one busy process
beside them, even a niced one (docs/performance.md#a-busy-machine). Sleeping instead
(`OMP_WAIT_POLICY=PASSIVE`) holds under load but wakes a thread at every operator, which costs
an idle machine more than it saves. One thread has no barrier at all. So the engine, wherever
it runs (the resident engine, the model inside `dg-lsp serve`, a team replica, training),
follows one policy:

- **As many threads as the other processes leave cores.** Before a pass, at most every
  `ThreadPolicy.interval` seconds, the policy reads how much CPU the machine spent outside
  this process since it last looked (/proc/stat less this process's own time, niced
  processes included) and gives up a thread for every core that is more than `SLACK` busy
  elsewhere, keeping between one and torch's default (one a physical core). On an idle
  machine that is torch's default, spinning as it does; with one core taken, one fewer.
- **What the user chose wins.** `--threads N` or `OMP_NUM_THREADS` fixes the count, up to
  the cores this process may run on (more are capped at them, with a notice on stderr); the
  `OMP_WAIT_POLICY` and `GOMP_SPINCOUNT` they set reach libgomp as they are.
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass

# Seconds between two looks at the machine's load: short enough that a build starting beside
# a completion is seen within a few passes, long enough that /proc/stat's 10 ms ticks add up.
INTERVAL = 0.2
# Cores' worth of work elsewhere that still leaves a thread on every core: the background an
# idle desktop has (an editor typing, a terminal) and the error of 10 ms ticks over INTERVAL.
# A thread sharing its core more than that makes the other spin at every operator.
SLACK = 0.25


def user_threads(requested: int | None, environ: MutableMapping[str, str] | None = None,
                 cores: int | None = None) -> int | None:
    """The thread count the user fixed: `requested` (`--threads`), else OMP_NUM_THREADS when
    it holds one positive number; None when the policy chooses.

    A count past the `cores` this process may run on (default: `available_cores()`) is capped
    at them, with a notice on stderr: a thread without a core of its own holds up every
    operator's barrier, so a completion took many times as long (and libgomp started that
    many threads for every thread that runs passes)."""
    if requested is not None:
        count, source = max(1, requested), "--threads"
    else:
        raw = (os.environ if environ is None else environ).get("OMP_NUM_THREADS", "").strip()
        if not (raw.isdigit() and int(raw) > 0):
            return None
        count, source = int(raw), "OMP_NUM_THREADS"
    cores = cores or available_cores()
    if count > cores:
        print(f"dg-engine: {source} {count} is more than the {cores} CPU cores this process "
              f"may run on: using {cores} threads", file=sys.stderr, flush=True)
        return cores
    return count


@dataclass(frozen=True)
class CpuTimes:
    """Seconds of CPU time, read at one moment: the machine's busy time over all its cores,
    this process's own, and the wall clock."""

    machine_busy: float
    own: float
    wall: float


def read_cpu_times() -> CpuTimes | None:
    """The machine's busy CPU seconds (Linux /proc/stat), this process's and the time; None
    where /proc/stat cannot be read (the policy then keeps its count)."""
    try:
        with open("/proc/stat", "rb") as stat:
            fields = stat.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != b"cpu" or len(fields) < 5:
        return None
    # user, nice, system, idle, iowait, irq, softirq, steal, ...: all but idle and iowait.
    # A niced process counts: it yields its core to ours when both want it, but a time slice
    # it does get stalls every operator while the other thread spins.
    ticks = [int(v) for v in fields[1:9]]
    busy = sum(ticks[0:3]) + sum(ticks[5:8])
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
        self.cores = cores or available_cores()
        # Never more than the cores: torch's own count may come from a replica's CPU share
        # or an OMP_NUM_THREADS past them, and the first passes run it before a look.
        self.most = max(1, min(most, self.cores))
        self.fixed = fixed
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
        free = self.cores - max(0, math.ceil(self.elsewhere - SLACK))
        self.threads = max(1, min(self.most, free))
