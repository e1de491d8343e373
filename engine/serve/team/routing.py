"""Which replica of a team's engine serves a request: the router's choice, as pure functions.

The Ray Serve request router (engine.serve.team.router) and the ingress (engine.serve.team.app)
call these; nothing here imports Ray, so the choice is tested without a cluster.

- `routing_key`: what names a request's document. A client sends the document's identity as
  "document" beside the request (protocol.to_wire: a digest of the editor's URI or the file's
  path); where it names none (a tool's HTTP request, a command line's), the start of its
  prefix stands in for it.
- `rank`: the key's replicas in order of preference, by rendezvous hashing over the live
  replicas' ids: every router instance agrees on a key's home without talking to the others,
  and when a replica dies or is added only the keys whose home it was or becomes move.
- `choose`: the ranks the router tries: the home first, then the others, unless the home holds
  `imbalance` more requests than the least loaded replica.
"""

from __future__ import annotations

import hashlib
from typing import Any

from engine.serve.admit import MAX_DOCUMENT

ROUTE_CHARS = 512  # characters of a prefix's start that name its document for routing
DEFAULT_IMBALANCE = 8  # requests: a full batch of the scheduler's default size


def routing_key(message: dict[str, Any]) -> str:
    """What names a request's document for the router: the client's "document" when it sends
    one (a non-empty string of at most MAX_DOCUMENT characters), else the start of the prefix,
    whose tokens are what a replica's prefix cache reuses. A short prefix counts only its
    complete lines, so typing on a line keeps its key."""
    document = message.get("document")
    if isinstance(document, str) and 0 < len(document) <= MAX_DOCUMENT:
        return "document:" + document
    prefix = message.get("prefix")
    texts = message.get("texts")  # a "holes" request's prefix is its first text
    if prefix is None and isinstance(texts, list) and texts:
        prefix = texts[0]
    return prefix_key(prefix if isinstance(prefix, str) else "")


def prefix_key(prefix: str) -> str:
    """The routing key of a request that names no document: the start of its prefix."""
    head = prefix[:ROUTE_CHARS]
    if len(prefix) < ROUTE_CHARS:
        head = head[: head.rfind("\n") + 1]
    return "prefix:" + hashlib.blake2b(head.encode("utf-8", "surrogatepass"),
                                       digest_size=12).hexdigest()


def rank(key: str, replica_ids: list[str]) -> list[str]:
    """`replica_ids` ordered by preference for `key`: its home replica first."""
    def weight(replica_id: str) -> bytes:
        return hashlib.blake2b(f"{key}\0{replica_id}".encode(), digest_size=8).digest()

    return sorted(replica_ids, key=weight, reverse=True)


def choose(key: str | None, loads: dict[str, int | None],
           imbalance: int = DEFAULT_IMBALANCE) -> list[list[str]]:
    """The replica ids (the keys of `loads`, each with its queue length where known) in the
    ranks the router tries them: the key's home alone, then every other; the others first and
    the home last when the home holds `imbalance` or more requests than the least loaded. No
    key, or a single replica: one rank of all, in the order given (the router's own choice)."""
    ids = list(loads)
    if key is None or len(ids) < 2:
        return [ids]
    home, *others = rank(key, ids)
    known = [load for load in loads.values() if load is not None]
    home_load = loads[home]
    if home_load is not None and known and home_load - min(known) >= imbalance:
        return [others, [home]]
    return [[home], others]
