"""`dg-engine serve`: its options, and the choice between the resident engine and Ray.

Without `--ray` the model is held by this process for every editor and CLI of this user
(engine.serve.socket.daemon); with it, replicas are deployed on a Ray cluster behind one URL
(engine.serve.team.command, which imports Ray only then).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from engine.bounds import (
    IDLE_EXIT_RANGE,
    LARGE_CANVAS_RANGE,
    MAX_BATCH_RANGE,
    MAX_CONNECTIONS_RANGE,
    MAX_QUEUE_RANGE,
    REQUEST_MB_RANGE,
    REQUEST_TIMEOUT_RANGE,
    bounded_argument,
    host_port_argument,
)
from engine.options import add_model_options, add_threads_option
from engine.serve.limits import DEFAULT_REQUEST_TIMEOUT
from engine.serve.socket.daemon import DEFAULT_IDLE_EXIT, DEFAULT_MAX_CONNECTIONS, serve_endpoint
from engine.serve.socket.endpoint import Endpoint, UnsafeRuntimeDir, endpoint_for
from engine.serve.team.command import add_arguments as add_ray_arguments
from engine.serve.team.command import serve_on_ray


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("serve", help="hold a model and serve dg-lsp and CLI clients")
    add_model_options(parser)
    parser.add_argument("--compile", action="store_true",
                        help="torch.compile the model (slow start; see docs/performance.md)")
    parser.add_argument("--socket", type=Path, default=None,
                        help="Unix socket path (default: derived from model and device)")
    parser.add_argument("--listen", metavar="HOST:PORT", type=host_port_argument,
                        help="also listen on TCP (needs a token)")
    parser.add_argument("--http", metavar="HOST:PORT", type=host_port_argument,
                        help="also answer HTTP: OpenAI's /v1/completions and llama.cpp's "
                        "/infill (beyond 127.0.0.1: needs --token-file, and --tls-cert and "
                        "--tls-key; docs/usage.md)")
    parser.add_argument("--allow-http-without-tls", action="store_true",
                        help="let --http listen beyond 127.0.0.1 without TLS, where a TLS "
                        "proxy in front of it does that (warns: the token travels in clear)")
    parser.add_argument("--token-file", type=Path, help="file holding the token for --listen "
                        "and --http")
    # Each number is refused by its flag's name before the model is loaded (engine.bounds).
    parser.add_argument("--max-batch", type=bounded_argument(MAX_BATCH_RANGE), default=8,
                        help="requests denoised together")
    parser.add_argument("--max-queue", type=bounded_argument(MAX_QUEUE_RANGE), default=64,
                        help="queued requests before busy")
    parser.add_argument("--max-connections", type=bounded_argument(MAX_CONNECTIONS_RANGE),
                        default=DEFAULT_MAX_CONNECTIONS,
                        help="connections served at once (more are refused)")
    parser.add_argument("--request-timeout", type=bounded_argument(REQUEST_TIMEOUT_RANGE),
                        default=DEFAULT_REQUEST_TIMEOUT,
                        help="seconds a request may take, queued or denoising; past it, it "
                        "ends with what it has (finish_reason 'deadline')")
    parser.add_argument("--max-request-mb", type=bounded_argument(REQUEST_MB_RANGE), default=0,
                        help="memory one request's forward pass may take (0: a quarter of "
                        "the device's free memory at start)")
    parser.add_argument("--large-canvas", type=bounded_argument(LARGE_CANVAS_RANGE),
                        default=None,
                        help="canvases over this many tokens run as background work "
                        "(default: engine.serve.scheduler.LARGE_CANVAS)")
    parser.add_argument("--idle-exit", type=bounded_argument(IDLE_EXIT_RANGE),
                        default=DEFAULT_IDLE_EXIT,
                        help="exit after this many seconds with no client (0: never)")
    add_threads_option(parser)
    add_ray_arguments(parser)
    parser.set_defaults(func=serve)


def serve(args: argparse.Namespace) -> int:
    if getattr(args, "ray", None) is not None:
        return serve_on_ray(args)
    try:
        endpoint = Endpoint(args.socket) if args.socket else endpoint_for(
            args.model, args.device, args.dtype)
        return serve_endpoint(args, endpoint)
    except UnsafeRuntimeDir as exc:
        print(f"dg-engine: {exc}", file=sys.stderr)
        return 1
