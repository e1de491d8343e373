"""What a developer costs a team's engine (engine.serve.team.app), in replica-seconds.

    python scripts/experiments/team_cost.py [--developers 8] [--replicas 2] [--seconds 60] \
        [--pause 1.0]

Deploys the bundled model as a Ray Serve application on a local Ray cluster (CPU replicas:
this measures replica-seconds on CPUs; on a GPU cluster the same run gives GPU-seconds), then
has each simulated developer complete held-out cursor cases (dg_lsp/measure/eval/heldout.py, the
`dg-lsp bench` ones) through the language server's pipeline and `RemoteEngine`, one request
at a time with `--pause` seconds between them, for `--seconds`. Prints the completions
answered, their latency, and the replicas' busy time (engine.serve.scheduler's busySeconds:
time spent in denoising rounds) per completion and per developer-hour at that pace.
"""

from __future__ import annotations

import argparse
import secrets
import socket
import statistics
import threading
import time

from dg_lsp.completion.pipeline import CompletionRequest, Pipeline
from dg_lsp.measure.eval.heldout import heldout_sources
from dg_lsp.settings import Settings
from dg_lsp.syntax.languages import language_for
from engine.data.cases import cut_cursor_cases
from engine.serve.team.remote import RemoteEngine


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--developers", type=int, default=8)
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--cpus", type=int, default=2, help="CPUs of the local cluster")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--pause", type=float, default=1.0,
                        help="seconds a developer waits between completion requests")
    args = parser.parse_args()

    import ray
    from ray import serve

    from engine.serve.team.app import APP_NAME, AppOptions, build_app, token_digest

    token = secrets.token_hex(16)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    ray.init(num_cpus=args.cpus, include_dashboard=False, logging_level="warning",
             log_to_driver=False)
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        cpus = args.cpus / args.replicas
        serve.run(build_app(AppOptions(device="cpu", token_digest=token_digest(token),
                                       replicas=args.replicas, cpus=cpus)),
                  name=APP_NAME, route_prefix="/")
        url = f"http://127.0.0.1:{port}"
        report(url, token, args)
    finally:
        serve.shutdown()
        ray.shutdown()


def busy(engine: RemoteEngine) -> tuple[float, int]:
    replicas = engine.status()["replicas"]
    return (sum(r["busySeconds"] for r in replicas), sum(r["completed"] for r in replicas))


def report(url: str, token: str, args: argparse.Namespace) -> None:
    cases = cut_cursor_cases(heldout_sources(), 64 * args.developers, seed=0)
    probe = RemoteEngine(url, token)
    while len(probe.status()["replicas"]) < args.replicas:
        time.sleep(0.5)
    engine = RemoteEngine(url, token)
    engine.hello()
    Pipeline(engine, Settings()).complete(to_request(cases[0]))  # warm both ends
    time.sleep(2.0)
    busy_before, completed_before = busy(probe)
    latencies: list[float] = []
    lock = threading.Lock()
    stop = time.monotonic() + args.seconds

    def developer(i: int) -> None:
        client = RemoteEngine(url, token)
        client.hello()
        pipeline = Pipeline(client, Settings())
        mine = cases[i::args.developers]
        n = 0
        while time.monotonic() < stop:
            started = time.perf_counter()
            pipeline.complete(to_request(mine[n % len(mine)]))
            with lock:
                latencies.append(time.perf_counter() - started)
            n += 1
            time.sleep(args.pause)

    threads = [threading.Thread(target=developer, args=(i,)) for i in range(args.developers)]
    started = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - started
    time.sleep(2.0)  # the replicas' last reports
    busy_after, completed_after = busy(probe)
    spent, done = busy_after - busy_before, completed_after - completed_before
    per_completion = spent / max(done, 1)
    per_developer_hour = spent / args.developers * 3600 / wall
    lat = sorted(latencies)
    print(f"{args.developers} developers, {args.replicas} CPU replicas, {wall:.0f} s, a "
          f"request every {args.pause:g} s after the last answer")
    print(f"completions answered: {len(lat)} (replicas completed {done}); latency p50 "
          f"{1000 * statistics.median(lat):.0f} ms, p90 {1000 * lat[int(0.9 * len(lat))]:.0f} ms")
    print(f"replica busy: {spent:.1f} s in {wall:.0f} s on {args.replicas} replicas; "
          f"{1000 * per_completion:.1f} ms per completion; {per_developer_hour:.0f} "
          f"replica-seconds per developer-hour at this pace")


def to_request(case) -> CompletionRequest:
    return CompletionRequest(*case.document(),
                             language_for("python"), "file:///team.py")


if __name__ == "__main__":
    main()
