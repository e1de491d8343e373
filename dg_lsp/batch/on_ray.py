"""`dg-lsp batch --ray [ADDRESS]`: the files spread over a Ray cluster.

Each worker is a Ray actor that loads the model once and keeps it for the whole run (one GPU
per actor where the cluster has GPUs, else one CPU), and works through the files it is handed
with batch mode's own `process_file`. The driver reads the files, sends their text (the
workers need no shared file system, only dg-lsp installed), and merges what comes back: the
patch is assembled in sorted file order, so for the same seed it is byte-identical to a local
`--engine inproc` run's.

Ray is optional (`pip install "dg-lsp[distributed]"`) and imported only here, only when asked.
With no ADDRESS a local cluster is started for the run (or the one this process already
joined is used); with an address (`auto`, `HOST:PORT`, `ray://HOST:PORT`) the run joins it.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from typing import Any

from dg_lsp.batch.job import BatchJob, FileResult, Queries, process_file


class RayMissing(Exception):
    """Ray is not installed."""


class RayRunFailed(Exception):
    """The cluster could not be reached, or a worker died."""


class BatchWorker:
    """One Ray actor: a loaded engine, and the files it is given one after another."""

    def __init__(self, job: BatchJob) -> None:
        from engine import Engine

        self.job = job
        settings = job.settings
        self.engine = Engine.load(settings.model, device=settings.device, dtype=settings.dtype)
        self.queries = Queries(job.query, job.action)
        self.name = f"{socket.gethostname()}:{os.getpid()}"

    def process(self, label: str, text: str) -> FileResult:
        result = process_file(self.engine, label, text, self.job, self.queries)
        result.worker = self.name
        return result


def import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise RayMissing('--ray needs Ray: pip install "dg-lsp[distributed]"') from None
    return ray


def run_on_ray(address: str | None, files: list[tuple[str, str]], job: BatchJob,
               workers: int | None = None) -> Iterator[FileResult]:
    """FileResults for (label, text) pairs as the workers finish them (in no set order)."""
    ray = import_ray()
    from ray.util import ActorPool

    if not files:
        return
    started = not ray.is_initialized()
    try:
        if started:
            ray.init(address=address, include_dashboard=False, logging_level="warning")
        resources = ray.cluster_resources()
        gpus = int(resources.get("GPU", 0)) if job.settings.device != "cpu" else 0
        count = workers or gpus or max(1, int(resources.get("CPU", 1)))
        options = {"num_gpus": 1} if gpus else {"num_cpus": 1}
        actor = ray.remote(**options)(BatchWorker)
        pool = ActorPool([actor.remote(job) for _ in range(min(count, len(files)))])
        yield from pool.map_unordered(lambda a, item: a.process.remote(*item), files)
    except (ray.exceptions.RayError, ConnectionError) as exc:
        raise RayRunFailed(f"the Ray run failed: {exc}") from None
    finally:
        if started:
            ray.shutdown()
