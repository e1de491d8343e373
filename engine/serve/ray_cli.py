"""`dg-engine serve --ray [ADDRESS]` and `dg-engine status URL`.

`serve --ray` deploys engine.serve.ray_app on a Ray cluster (ADDRESS, else the one RAY_ADDRESS
or `ray start` names, else a local one started for it) behind Ray Serve's HTTP proxy on
`--listen` (every node's proxy listens on that port), with TLS where `--tls-cert` and
`--tls-key` are given. It prints the URL, then holds the application until interrupted
(or, with `--detach`, leaves it running on the cluster and exits).

`status URL` asks a running application for its replicas, their models, queues and tokens/s.

Ray is imported only here and only to deploy: `dg-engine --help` stays fast.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from pathlib import Path
from typing import Any

DEFAULT_LISTEN = "127.0.0.1:8000"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`serve`'s options for a Ray Serve deployment (its other options apply too)."""
    group = parser.add_argument_group("a team's engine on Ray Serve")
    group.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                       help="deploy as a Ray Serve application on the cluster at ADDRESS "
                       "(default: RAY_ADDRESS or the local cluster, else a new local one); "
                       f"--listen is its HTTP address (default {DEFAULT_LISTEN})")
    group.add_argument("--replicas", type=int, default=1,
                       help="model replicas (one GPU each where the cluster has GPUs)")
    group.add_argument("--min-replicas", type=int, default=None,
                       help="autoscale on queue length between --min- and --max-replicas")
    group.add_argument("--max-replicas", type=int, default=None)
    group.add_argument("--replica-cpus", type=float, default=1.0,
                       help="CPUs each replica reserves when the cluster has no GPU")
    group.add_argument("--tls-cert", type=Path, help="serve HTTPS with this certificate")
    group.add_argument("--tls-key", type=Path, help="the certificate's private key")
    group.add_argument("--detach", action="store_true",
                       help="leave the application running on the cluster and exit")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("status", help="replicas, models, queues and tokens/s of a "
                                   "team's engine (dg-engine serve --ray)")
    parser.add_argument("url", help="the engine's URL, http(s)://HOST:PORT")
    parser.add_argument("--token-file", type=Path, default=None,
                        help="file holding the team's token (default ~/.config/dg-engine/token)")
    parser.add_argument("--json", action="store_true", help="print the raw status as JSON")
    parser.set_defaults(func=status)


def status(args: argparse.Namespace) -> int:
    from engine.serve.client import EngineUnavailable
    from engine.serve.remote import RemoteEngine
    from engine.serve.token import read_token

    try:
        report = RemoteEngine(args.url, read_token(args.token_file)).status()
    except EngineUnavailable as exc:
        print(f"dg-engine status: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(format_status(args.url, report))
    return 0


def format_status(url: str, report: dict[str, Any]) -> str:
    replicas = report.get("replicas", [])
    lines = [f"{url}: {len(replicas)} replica(s), {report.get('refused', 0)} request(s) "
             f"refused for a bad token",
             f"{'replica':<10} {'model':<28} {'device':<8} {'queued':>6} {'live':>5} "
             f"{'done':>7} {'tok/s':>7}"]
    for r in replicas:
        queued = sum(r.get("queued", {}).values())
        model = str(r.get("model", ""))[-28:]
        lines.append(f"{r['replica']:<10} {model:<28} {r.get('device', ''):<8} {queued:>6} "
                     f"{r.get('live', 0):>5} {r.get('completed', 0):>7} "
                     f"{r.get('tokensPerSecond', 0):>7}")
    return "\n".join(lines)


def options_from_args(args: argparse.Namespace, token: str, gpus: bool) -> Any:
    from engine.serve.ray_app import AppOptions, token_digest

    autoscale = args.min_replicas is not None or args.max_replicas is not None
    if autoscale and (args.min_replicas is None or args.max_replicas is None
                      or not 0 <= args.min_replicas <= args.max_replicas
                      or args.max_replicas < 1):
        raise ValueError("--min-replicas and --max-replicas go together, "
                         "0 <= min <= max, max >= 1")
    if args.replicas < 1:
        raise ValueError("--replicas must be at least 1")
    return AppOptions(model=args.model, device=args.device, dtype=args.dtype,
                      token_digest=token_digest(token), replicas=args.replicas,
                      min_replicas=args.min_replicas, max_replicas=args.max_replicas,
                      max_batch=args.max_batch, max_queue=args.max_queue,
                      request_timeout=args.request_timeout, gpus=1.0 if gpus else 0.0,
                      cpus=args.replica_cpus, threads=args.threads)


def http_options(listen: str, cert: Path | None, key: Path | None) -> dict[str, Any]:
    host, _, port = listen.rpartition(":")
    if not port.isdigit():
        raise ValueError(f"--listen expects HOST:PORT, got {listen!r}")
    options: dict[str, Any] = {"host": host or "127.0.0.1", "port": int(port)}
    if (cert is None) != (key is None):
        raise ValueError("--tls-cert and --tls-key go together")
    if cert is not None and key is not None:
        options |= {"ssl_certfile": str(cert), "ssl_keyfile": str(key)}
    return options


def serve_on_ray(args: argparse.Namespace) -> int:
    """Deploy the application and hold it; the exit status."""
    from engine.serve.token import read_token

    if args.token_file is None:
        print("dg-engine serve --ray: needs --token-file (every request must carry the "
              "team's token)", file=sys.stderr)
        return 2
    try:
        token = read_token(args.token_file)
        http = http_options(args.listen or DEFAULT_LISTEN, args.tls_cert, args.tls_key)
    except ValueError as exc:
        print(f"dg-engine serve: {exc}", file=sys.stderr)
        return 2
    import ray
    from ray import serve

    from engine.serve.ray_app import APP_NAME, build_app

    ray.init(address=args.ray or None, include_dashboard=False, logging_level="warning")
    try:
        gpus = ray.cluster_resources().get("GPU", 0) > 0 and args.device != "cpu"
        try:
            options = options_from_args(args, token, gpus)
        except ValueError as exc:
            print(f"dg-engine serve: {exc}", file=sys.stderr)
            return 2
        serve.start(http_options=http)
        serve.run(build_app(options), name=APP_NAME, route_prefix="/")
        scheme = "https" if "ssl_certfile" in http else "http"
        print(f"dg-engine: serving {args.model or 'the bundled model'} at "
              f"{scheme}://{http['host']}:{http['port']} on Ray Serve "
              f"({'GPU' if gpus else 'CPU'} replicas)", file=sys.stderr, flush=True)
        if args.detach:
            return 0
        _wait_for_signal()
        serve.delete(APP_NAME)
        print("dg-engine: stopped", file=sys.stderr, flush=True)
        return 0
    finally:
        ray.shutdown()


def _wait_for_signal() -> None:
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    while not stop.wait(1.0):
        pass
