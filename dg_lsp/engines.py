"""Opening the engine the settings name, for the language server, the one-shot commands and
batch mode alike: in this process, the resident engine (started when none runs), or a team's
engine at a URL with its token."""

from __future__ import annotations

from pathlib import Path

from dg_lsp.settings import Settings
from engine.backend import Backend
from engine.serve.socket.client import EngineUnavailable


def open_backend(settings: Settings, priority: str = "interactive") -> Backend:
    """The engine `settings` name, for the language server and every command line alike:
    `engine` "inproc" loads the model here; "resident" connects to the resident engine of
    (model, device, dtype), starting it when none runs; an http(s):// URL is a team's engine,
    reached with the token `engine_token_file` holds (engine.serve.token: a private file, or
    a descriptor a one-shot command was handed), whose model, device and dtype are the
    deployment's. `priority` is the requests' on a shared engine ("batch": after editors').

    Errors: CheckpointError / OSError / ValueError for a model that cannot load here;
    TokenError (a ValueError) for a token file that cannot be used, before anything is sent;
    ValueError for a malformed URL; EngineUnavailable for an engine that cannot be reached,
    refuses the token ("unauthorized" code) or cannot start."""
    model, device, dtype = settings.model, settings.device, settings.dtype
    if settings.engine == "inproc":
        from engine import Engine

        return Engine.load(model, device, dtype)
    from engine.serve.team.remote import RemoteEngine, is_engine_url

    if is_engine_url(settings.engine):  # a team's engine: it loaded its own model
        return RemoteEngine.connect(settings.engine, settings.engine_token_file,
                                    priority=priority)
    from engine.serve.socket.client import EngineClient

    return EngineClient.connect_or_start(model, device, dtype=dtype, priority=priority)


class NoEngine(Exception):
    """A command line's engine cannot be had: one line for stderr, never the token."""


def open_for_command(settings: Settings, priority: str = "interactive") -> Backend:
    """`open_backend` for a one-shot command: an engine that cannot be reached or refuses the
    token, a token file that cannot be used and a malformed URL are NoEngine (one line; the
    command exits 2, nothing sent). A model that cannot load here raises as it does."""
    from engine.serve.team.remote import is_engine_url, shown_url

    remote = is_engine_url(settings.engine)
    try:
        return open_backend(settings, priority)
    except EngineUnavailable as exc:
        if remote and exc.code == "unauthorized":
            raise NoEngine(f"the engine at {shown_url(settings.engine)} refused the token from "
                           f"{token_source(settings.engine_token_file)}: is it the team's "
                           "current token?") from None
        raise NoEngine(f"no engine: {exc}") from None
    except ValueError as exc:  # TokenError, a malformed URL, another protocol version
        if not remote:
            raise
        raise NoEngine(str(exc)) from None


def check_engine_arguments(engine: str, token_file: str | None, inputs: list[Path]) -> None:
    """ValueError for a command line whose --token-file cannot be meant: given without a
    team engine's URL, or naming the descriptor one of its `inputs` is read from too
    (`--token-file -` with /dev/stdin as the source): a descriptor handed over for the token
    carries nothing else. ("-" as an input is a file of that name.)"""
    from engine.serve.team.remote import is_engine_url
    from engine.serve.token import inherited_descriptor

    if token_file is None:
        return
    if not is_engine_url(engine):
        raise ValueError(f"--token-file is for a team's engine (--engine URL), not --engine "
                         f"{engine}")
    fd = inherited_descriptor(token_file)
    for path in inputs if fd is not None else ():
        if str(path) != "-" and inherited_descriptor(path) == fd:
            where = "standard input" if fd == 0 else token_file
            raise ValueError(f"{where} carries the token (--token-file {token_file}): it "
                             f"cannot also be the input {path}")


def token_source(token_file: str | None) -> str:
    """How messages name where the token came from (never what it is)."""
    from engine.serve.token import default_token_file, descriptor_name, inherited_descriptor

    if not token_file:
        return str(default_token_file())
    fd = inherited_descriptor(token_file)
    return str(token_file) if fd is None else descriptor_name(fd, token_file)
