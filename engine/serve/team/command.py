"""`dg-engine serve --ray [ADDRESS]` and `dg-engine status URL`.

`serve --ray` deploys engine.serve.team.app on a Ray cluster (ADDRESS, else the one RAY_ADDRESS
or `ray start` names, else a local one started for it). It first checks that the cluster
refuses callers without Ray's token (else anyone reaching a Ray port runs code as its user),
and refuses to deploy on one that does not, unless told `--allow-ray-without-auth`. Ray Serve's
proxy listens on 127.0.0.1:`--serve-port` on the head node only; engine.serve.team.front, run
in this process, listens on `--listen` (with TLS where `--tls-cert` and `--tls-key` are given),
bounds every connection and checks the token before it forwards anything. The command prints
the URL and holds the application until SIGINT or SIGTERM.

`status URL` asks a running application for its replicas, their models, queues and tokens/s.

Ray is imported only here and only to deploy: `dg-engine --help` stays fast.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import ssl
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from engine.bounds import (
    AUTOSCALE_DELAY_RANGE,
    AUTOSCALE_WINDOW_RANGE,
    MAX_PER_CLIENT_RANGE,
    MIN_REPLICAS_RANGE,
    PORT_RANGE,
    REPLICA_CPUS_RANGE,
    REPLICAS_RANGE,
    bounded_argument,
)
from engine.serve.team.front import MAX_PER_CLIENT, Front, FrontLimits

DEFAULT_LISTEN = "127.0.0.1:8000"
DEFAULT_SERVE_PORT = 8001  # Ray Serve's proxy, on 127.0.0.1


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`serve`'s options for a Ray Serve deployment (its other options apply too)."""
    group = parser.add_argument_group("a team's engine on Ray Serve")
    group.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                       help="deploy as a Ray Serve application on the cluster at ADDRESS "
                       "(default: RAY_ADDRESS or the local cluster, else a new local one); "
                       f"--listen is its HTTP address (default {DEFAULT_LISTEN})")
    # Each number is refused by its flag's name when parsed, before Ray starts (engine.bounds).
    group.add_argument("--replicas", type=bounded_argument(REPLICAS_RANGE), default=1,
                       help="model replicas (one GPU each where the cluster has GPUs)")
    group.add_argument("--min-replicas", type=bounded_argument(MIN_REPLICAS_RANGE),
                       default=None,
                       help="autoscale on queue length between --min- and --max-replicas")
    group.add_argument("--max-replicas", type=bounded_argument(REPLICAS_RANGE), default=None)
    group.add_argument("--upscale-delay", type=bounded_argument(AUTOSCALE_DELAY_RANGE),
                       default=5.0, metavar="S",
                       help="autoscaling: seconds above --max-batch ongoing requests per "
                       "replica before one is added (default 5)")
    group.add_argument("--downscale-delay", type=bounded_argument(AUTOSCALE_DELAY_RANGE),
                       default=120.0, metavar="S",
                       help="autoscaling: seconds below it before one is removed (default 120)")
    group.add_argument("--autoscale-window", type=bounded_argument(AUTOSCALE_WINDOW_RANGE),
                       default=30.0, metavar="S",
                       help="autoscaling: seconds the ongoing requests are averaged over "
                       "(default 30)")
    group.add_argument("--replica-cpus", type=bounded_argument(REPLICA_CPUS_RANGE),
                       default=1.0,
                       help="CPUs each replica reserves when the cluster has no GPU")
    group.add_argument("--tls-cert", type=Path, help="serve HTTPS with this certificate "
                       "(--ray's --listen, and --http)")
    group.add_argument("--tls-key", type=Path, help="the certificate's private key")
    group.add_argument("--serve-port", type=bounded_argument(PORT_RANGE),
                       default=DEFAULT_SERVE_PORT,
                       help="the loopback port of Ray Serve's own proxy, behind the front "
                       f"on --listen (default {DEFAULT_SERVE_PORT})")
    group.add_argument("--max-per-client", type=bounded_argument(MAX_PER_CLIENT_RANGE),
                       default=MAX_PER_CLIENT,
                       help="connections one address may hold open at the front "
                       "(--max-connections caps them all)")
    group.add_argument("--allow-ray-without-auth", action="store_true",
                       help="deploy on a Ray cluster that runs without Ray's token "
                       "authentication (warns; anyone reaching its ports can run code)")
    group.add_argument("--detach", action="store_true", help=argparse.SUPPRESS)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("status", help="replicas, models, queues and tokens/s of a "
                                   "team's engine (dg-engine serve --ray)")
    parser.add_argument("url", help="the engine's URL, http(s)://HOST:PORT")
    parser.add_argument("--token-file", type=Path, default=None,
                        help="file holding the team's token (default ~/.config/dg-engine/token)")
    parser.add_argument("--json", action="store_true", help="print the raw status as JSON")
    parser.set_defaults(func=status)


def status(args: argparse.Namespace) -> int:
    from engine.serve.socket.client import EngineUnavailable
    from engine.serve.team.remote import RemoteEngine
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


def check_autoscale(args: argparse.Namespace) -> None:
    """ValueError unless --min-replicas and --max-replicas come together, min <= max (each
    one's own range is checked when parsed)."""
    if (args.min_replicas is None) != (args.max_replicas is None) or (
            args.min_replicas is not None and args.min_replicas > args.max_replicas):
        raise ValueError("--min-replicas and --max-replicas go together, min <= max")


def options_from_args(args: argparse.Namespace, token: str, gpus: bool) -> Any:
    from engine.serve.team.app import AppOptions, token_digest

    check_autoscale(args)
    return AppOptions(model=args.model, device=args.device, dtype=args.dtype,
                      token_digest=token_digest(token), replicas=args.replicas,
                      min_replicas=args.min_replicas, max_replicas=args.max_replicas,
                      upscale_delay=args.upscale_delay, downscale_delay=args.downscale_delay,
                      autoscale_window=args.autoscale_window,
                      max_batch=args.max_batch, max_queue=args.max_queue,
                      request_timeout=args.request_timeout, gpus=1.0 if gpus else 0.0,
                      cpus=args.replica_cpus, threads=args.threads)


def front_address(listen: str) -> tuple[str, int]:
    host, _, port = listen.rpartition(":")
    if not port.isdigit():
        raise ValueError(f"--listen expects HOST:PORT, got {listen!r}")
    return host or "127.0.0.1", int(port)


def tls_context(cert: Path | None, key: Path | None) -> ssl.SSLContext | None:
    if (cert is None) != (key is None):
        raise ValueError("--tls-cert and --tls-key go together")
    if cert is None or key is None:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        raise ValueError(f"cannot load the certificate {cert}: {exc}") from None
    return context


def answers_without_token(gcs_address: str) -> bool:
    """Whether the cluster's control store (GCS) answers a caller without Ray's token: then
    anyone who reaches its port, or the dashboard's job API, can run code as its user."""
    import grpc
    from ray.core.generated import gcs_service_pb2, gcs_service_pb2_grpc

    # A bare channel: none of the token metadata this process's Ray client adds.
    with grpc.insecure_channel(gcs_address) as channel:
        stub = gcs_service_pb2_grpc.NodeInfoGcsServiceStub(channel)
        try:
            stub.GetClusterId(gcs_service_pb2.GetClusterIdRequest(), timeout=AUTH_PROBE_TIMEOUT)
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.UNAUTHENTICATED:
                return False
            raise RuntimeError(f"cannot ask the cluster at {gcs_address} how it "
                               f"authenticates: {exc.code().name}") from None
    return True


def serve_on_ray(args: argparse.Namespace) -> int:
    """Deploy the application behind its front and hold it; the exit status."""
    from engine.serve.token import read_token

    if args.token_file is None:
        print("dg-engine serve --ray: needs --token-file (every request must carry the "
              "team's token)", file=sys.stderr)
        return 2
    if args.detach:
        print("dg-engine serve --ray: --detach is gone: the front that bounds every "
              "connection runs in this process; run it as a service instead (docs/team.md "
              "in the dg-lsp repository)", file=sys.stderr)
        return 2
    try:
        check_autoscale(args)  # before Ray starts: options_from_args is reached after it
        token = read_token(args.token_file)
        host, port = front_address(args.listen or DEFAULT_LISTEN)
        tls = tls_context(args.tls_cert, args.tls_key)
        limits = FrontLimits(max_connections=args.max_connections,
                             max_per_client=args.max_per_client)
    except ValueError as exc:
        print(f"dg-engine serve: {exc}", file=sys.stderr)
        return 2
    import ray
    from ray import serve

    from engine.serve.team.app import APP_NAME, build_app

    ray.init(address=args.ray or None, include_dashboard=False, logging_level="warning")
    # A cluster ray.init started here is this process's children; a `ray start` one is not.
    own_cluster = bool(getattr(ray._private.worker._global_node, "head", False))
    try:
        if answers_without_token(ray.get_runtime_context().gcs_address):
            if not args.allow_ray_without_auth:
                print(RAY_WITHOUT_AUTH + " Refusing to deploy (--allow-ray-without-auth "
                      "overrides).", file=sys.stderr)
                return 2
            print("WARNING " + RAY_WITHOUT_AUTH, file=sys.stderr, flush=True)
        gpus = ray.cluster_resources().get("GPU", 0) > 0 and args.device != "cpu"
        options = options_from_args(args, token, gpus)
        # Serve's own proxy on loopback, on this (the head) node only: the front is the door.
        serve.start(proxy_location="HeadOnly",
                    http_options={"host": "127.0.0.1", "port": args.serve_port})
        serve.run(build_app(options), name=APP_NAME, route_prefix="/")
        board = serve.get_deployment_handle("StatusBoard", APP_NAME)
        front = Front(("127.0.0.1", args.serve_port), options.token_digest, limits,
                      on_refused=lambda: board.refuse.remote())
        scheme = "https" if tls else "http"
        return asyncio.run(_hold(front, host, port, tls, f"dg-engine: serving "
                                 f"{args.model or 'the bundled model'} at {scheme}://{host}:"
                                 f"{port} on Ray Serve ({'GPU' if gpus else 'CPU'} replicas)",
                                 lambda: _stop(serve, APP_NAME, own_cluster)))
    finally:
        ray.shutdown()


RAY_WITHOUT_AUTH = ("dg-engine serve --ray: this Ray cluster runs without Ray's token "
                    "authentication: anyone who reaches its ports (the GCS, the dashboard's "
                    "job API) can run code as its user and read the team's token. Start it "
                    "with RAY_AUTH_MODE=token (docs/team.md in the dg-lsp repository).")
AUTH_PROBE_TIMEOUT = 10.0  # seconds for the cluster's GCS to answer the probe
STOP_TIMEOUT = 10.0  # seconds to remove the application from a cluster that outlives us


async def _hold(front: Front, host: str, port: int, tls: ssl.SSLContext | None,
                serving: str, stop: Callable[[], None]) -> int:
    """Serve the front until SIGTERM or SIGINT, then stop; the exit status."""
    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopping.set)
    try:
        server = await front.start(host, port, tls)
    except OSError as exc:
        print(f"dg-engine serve: cannot listen on {host}:{port}: {exc}", file=sys.stderr)
        return 1
    print(serving, file=sys.stderr, flush=True)
    await stopping.wait()
    server.close()
    await asyncio.to_thread(stop)
    print("dg-engine: stopped", file=sys.stderr, flush=True)
    return 0


def _stop(serve: Any, app: str, own_cluster: bool) -> None:
    """Remove the application from a cluster that outlives this process. A cluster this
    process started goes down with it (ray.shutdown), and a SIGTERM to the process group, as
    systemd sends, has already reached its processes: waiting on them would only hang."""
    if own_cluster:
        return
    remover = threading.Thread(target=serve.delete, args=(app,), daemon=True)
    remover.start()
    remover.join(STOP_TIMEOUT)
