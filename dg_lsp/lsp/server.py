"""The language server: LSP over stdio or TCP, completions from the diffusion engine.

A thin server in the style of jedi-language-server and ruff's: the state is
dg_lsp.lsp.state.DgLanguageServer (the settings, each open document and its tree, the engine),
and `create_server` puts on it the handlers of each request kind, one module each, which
delegate to the features:

- dg_lsp.lsp.completion: `textDocument/inlineCompletion` and `textDocument/completion`
- dg_lsp.lsp.next_edit: `textDocument/copilotInlineEdit` (its messages: dg_lsp.lsp.messages)
- dg_lsp.lsp.actions: code actions, their resolution, the rewrite-with-instruction command
- dg_lsp.lsp.holes: `dg-lsp/fillHoles`, a completion at every cursor in one request

Completions and next edits live as dg_lsp.lsp.lifecycle says; each denoising pass runs on the
engine's single worker thread and is awaited, so `$/cancelRequest`, or a newer request for the
same document, stops a request at the next pass.

Beside them: dg_lsp.lsp.protocol (pygls's protocol with our overrides), dg_lsp.lsp.engine_host
(the engine, loaded on first use, restarted when lost, its state told), dg_lsp.lsp.rpc (every
request is answered, also a malformed one), dg_lsp.lsp.documents (the server's own copy of
each open document, LSP's line rule); every position is converted with dg_lsp.positions.
"""

from __future__ import annotations

import argparse
from typing import Any

from lsprotocol import types

from dg_lsp.lsp import actions, completion, holes, next_edit, repository
from dg_lsp.lsp.actions import REWRITE_COMMAND
from dg_lsp.lsp.state import DgLanguageServer
from dg_lsp.settings import parse_settings
from engine.backend import Backend
from engine.bounds import host_port_argument
from engine.options import add_model_options

STATS_COMMAND = "dg-lsp.stats"
__all__ = ["REWRITE_COMMAND", "STATS_COMMAND", "create_server", "serve"]


def create_server(backend: Backend | None = None) -> DgLanguageServer:
    """The server, every handler on it; on `backend` (a test's engine) when given, else on
    the engine its settings name, loaded on first use."""
    server = DgLanguageServer(backend)

    @server.feature(types.INITIALIZE)
    def initialize(ls: DgLanguageServer, params: types.InitializeParams) -> None:
        if params.initialization_options is not None:
            ls.apply_settings(params.initialization_options)
        ls.repositories.roots_from(params)

    @server.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
    def did_change_configuration(
        ls: DgLanguageServer, params: types.DidChangeConfigurationParams
    ) -> None:
        ls.apply_settings(params.settings)

    @server.command(STATS_COMMAND)
    def stats(ls: DgLanguageServer, *args: Any) -> dict[str, int | None]:
        return ls.stats_report()

    for kind in (completion, next_edit, actions, holes):
        kind.register(server)
    repository.register(server, server.repositories)
    return server


# -- command line -----------------------------------------------------------------------------


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("serve", help="serve LSP on stdio (default) or TCP")
    parser.add_argument("--tcp", metavar="HOST:PORT", type=host_port_argument,
                        help="listen on TCP instead of stdio")
    # vscode-languageclient (TransportKind.stdio) and other clients add --stdio to the command.
    parser.add_argument("--stdio", action="store_true", help="serve on stdio (the default)")
    add_model_options(parser, default=None)  # the editor's settings decide, unless given
    parser.add_argument("--engine", default=None, metavar="resident|inproc|URL",
                        help="share a resident engine process (default), load the model here, "
                        "or use a team's engine at http(s)://HOST:PORT (dg-engine serve --ray)")
    parser.add_argument("--token-file", default=None,
                        help="the team engine's token: a private file (mode 0600; default "
                        "~/.config/dg-engine/token), read again at every reconnect, so not - "
                        "or /dev/fd/N as the one-shot commands take")
    parser.set_defaults(func=serve)


def serve(args: argparse.Namespace) -> int:
    server = create_server()
    given = (("model", args.model), ("device", args.device), ("dtype", args.dtype),
             ("engine", args.engine), ("engineTokenFile", args.token_file))
    cli = {key: value for key, value in given if value}
    if cli:
        server.settings, errors = parse_settings(cli)
        if errors:
            raise SystemExit("dg-lsp: " + "; ".join(errors))
    if args.tcp and args.stdio:
        raise SystemExit("dg-lsp: --tcp and --stdio exclude each other")
    if args.tcp:
        host, _, port = args.tcp.rpartition(":")  # its form and port checked when parsed
        server.start_tcp(host.strip("[]") or "127.0.0.1", int(port))
    else:
        server.start_io()
    return 0
