"""Keep a document's requests on the replica that holds its prefix keys/values.

A Ray Serve request router (ray.serve.request_router) for the engine's replicas. Each request
to a replica carries a routing key as its first argument (engine.serve.team.routing.routing_key:
the document the client names, or the start of its prefix). The choice itself is
engine.serve.team.routing.choose, a pure function tested without Ray. The key's home replica is
chosen by rendezvous hashing over the live replicas' ids: every router instance (one per
ingress replica and proxy) agrees on it without talking to the others, and when a replica
dies or is added only the keys whose home it was or becomes move, so every other document
keeps its warm cache.

The home replica is ranked first; when it is gone (Ray drops a dead replica from the
candidates), its queue is full (max_ongoing_requests), or it holds `imbalance` more requests
than the least loaded replica (a few busy documents hashed to one home), the request falls
back to the least loaded of the others, as Ray's own router would choose: a cold cache costs
one full forward pass, a queue behind a full batch costs every step of every request in it.
"""

from __future__ import annotations

from typing import Any

from ray.serve.request_router import PendingRequest, RequestRouter, RunningReplica

from engine.serve.team.routing import DEFAULT_IMBALANCE, choose, rank

__all__ = ["DEFAULT_IMBALANCE", "DocumentAffinityRouter", "rank", "request_key"]


def request_key(pending_request: PendingRequest | None) -> str | None:
    """The routing key a request carries (its first positional argument), if any."""
    if pending_request is None or not pending_request.args:
        return None
    key: Any = pending_request.args[0]
    return key if isinstance(key, str) and key else None


class DocumentAffinityRouter(RequestRouter):
    imbalance = DEFAULT_IMBALANCE  # until initialize_state sets the deployment's
    # Not FIFOMixin: it hands a replica chosen for one request to the oldest waiting one,
    # which would send a document to another document's home. The base class gives each
    # request the replica chosen for it.

    def initialize_state(self, imbalance: int = DEFAULT_IMBALANCE, **kwargs: Any) -> None:
        self.imbalance = imbalance

    async def choose_replicas(
        self,
        candidate_replicas: list[RunningReplica],
        pending_request: PendingRequest | None = None,
    ) -> list[list[RunningReplica]]:
        if pending_request is not None:
            # Past the ranks below, every replica was tried: wait before trying again
            # rather than spin while they are all full.
            pending_request.routing_context.should_backoff = True
        by_id = {r.replica_id.unique_id: r for r in candidate_replicas}
        loads = {unique_id: self.replica_queue_len_cache.get(r.replica_id)
                 for unique_id, r in by_id.items()}
        ranks = choose(request_key(pending_request), loads, self.imbalance)
        return [[by_id[unique_id] for unique_id in ids] for ids in ranks]
