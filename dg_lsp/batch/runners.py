"""Running `dg-lsp batch`'s targets: in this process one at a time, on a shared engine
(resident or a team's) several at a time, or over a Ray cluster (dg_lsp.batch.on_ray). Each
hands every finished file to `finish`, and counts it in the progress."""

from __future__ import annotations

import argparse
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Any

from dg_lsp.batch import shared
from dg_lsp.batch.job import BatchJob, FileResult, merge, run_target
from dg_lsp.batch.plan import BadInput, Plan
from dg_lsp.batch.report import Progress
from dg_lsp.engines import NoEngine, open_for_command
from engine.backend import Backend


class RunFailed(Exception):
    """The run broke off (a Ray worker died): exit 3; what was written is whole."""


def open_engine(job: BatchJob) -> Backend:
    """The engine the command line names (dg_lsp.engines.open_backend); BadInput when
    there is none: the model cannot load here, the engine cannot be reached or started, the
    token file cannot be used or the token is refused."""
    from engine import CheckpointError

    try:
        return open_for_command(job.settings, priority="batch")
    except NoEngine as exc:
        raise BadInput(str(exc)) from None
    except (CheckpointError, OSError, ValueError) as exc:
        raise BadInput(f"cannot load the model: {exc}") from None


def run_inproc(job: BatchJob, plans: dict[str, Plan], finish: Callable[[FileResult], None],
                progress: Progress) -> None:
    if not plans:
        return
    engine = open_engine(job)
    for label in sorted(plans):
        _, doc, targets = plans[label]
        outcomes = []
        for target in targets:
            outcomes.append(run_target(engine, doc, label, target, job))
            progress.target_done(outcomes[-1][0])
        result = merge(label, doc, outcomes)
        finish(result)
        progress.file_done(result)


def run_shared(args: argparse.Namespace, job: BatchJob, plans: dict[str, Plan],
                finish: Callable[[FileResult], None], progress: Progress) -> None:
    """Several targets at once on the resident engine or a team's, each its own connection
    (the client is shared: every stream opens its own): the engine batches them, a team's
    router keeps each file on one replica, and a request whose replica was lost is sent
    again (dg_lsp.batch.shared)."""
    if not plans:
        return
    from engine.serve.team.remote import is_engine_url

    client = open_engine(job)
    stop = threading.Event()
    team = is_engine_url(args.engine)
    # The resident engine is one process: no other replica for a lost request to go to.
    runner = shared.TargetRunner(client, job, stop, lost_waits=None if team else ())
    progress.runner = runner

    def one(label: str, index: int) -> tuple[str, int, Any]:
        _, doc, targets = plans[label]
        return label, index, runner.run(doc, label, targets[index])

    outcomes: dict[str, list] = {label: [None] * len(plan[2]) for label, plan in plans.items()}
    left = {label: len(plan[2]) for label, plan in plans.items()}
    workers = args.workers or (shared.TEAM_WORKERS if team else shared.RESIDENT_WORKERS)
    pool = ThreadPoolExecutor(workers, thread_name_prefix="dg-batch")
    try:
        futures = [pool.submit(one, label, i) for label in sorted(plans)
                   for i in range(len(plans[label][2]))]
        for future in as_completed(futures):
            label, index, outcome = future.result()
            outcomes[label][index] = outcome
            progress.target_done(outcome[0])
            left[label] -= 1
            if not left[label]:
                result = merge(label, plans[label][1], outcomes[label])
                finish(result)
                progress.file_done(result)
    finally:
        stop.set()  # on Ctrl-C: running targets stop at their next step
        pool.shutdown(wait=True, cancel_futures=True)


def run_ray(args: argparse.Namespace, job: BatchJob, plans: dict[str, Plan],
             finish: Callable[[FileResult], None], progress: Progress) -> None:
    from dg_lsp.batch import on_ray

    files = [(label, plans[label][1].text) for label in sorted(plans)]
    try:
        for result in on_ray.run_on_ray(args.ray or None, files, job, args.workers):
            finish(result)
            progress.file_done(result, len(result.records))
    except on_ray.RayRunFailed as exc:
        raise RunFailed(str(exc)) from None
