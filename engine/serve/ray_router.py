"""Keep a document's requests on the replica that holds its prefix keys/values.

A Ray Serve request router (ray.serve.request_router) for the engine's replicas. Each request
to a replica carries a routing key as its first argument (engine.serve.ray_app.routing_key:
the document, or the start of its prefix). The key's home replica is chosen by rendezvous
hashing over the live replicas' ids: every router instance (one per ingress replica and
proxy) agrees on it without talking to the others, and when a replica dies or is added only
the keys whose home it was or becomes move, so every other document keeps its warm cache.

The home replica is ranked first; when it is gone (Ray drops a dead replica from the
candidates), its queue is full (max_ongoing_requests), or it holds `imbalance` more requests
than the least loaded replica (a few busy documents hashed to one home), the request falls
back to the least loaded of the others, as Ray's own router would choose: a cold cache costs
one full forward pass, a queue behind a full batch costs every step of every request in it.
"""

from __future__ import annotations

import hashlib
from typing import Any

from ray.serve.request_router import PendingRequest, RequestRouter, RunningReplica


def rank(key: str, replica_ids: list[str]) -> list[str]:
    """`replica_ids` ordered by preference for `key`: its home replica first."""
    def weight(replica_id: str) -> bytes:
        return hashlib.blake2b(f"{key}\0{replica_id}".encode(), digest_size=8).digest()

    return sorted(replica_ids, key=weight, reverse=True)


def request_key(pending_request: PendingRequest | None) -> str | None:
    """The routing key a request carries (its first positional argument), if any."""
    if pending_request is None or not pending_request.args:
        return None
    key: Any = pending_request.args[0]
    return key if isinstance(key, str) and key else None


DEFAULT_IMBALANCE = 8  # requests: a full batch of the scheduler's default size


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
        key = request_key(pending_request)
        if key is None or len(candidate_replicas) < 2:
            return [candidate_replicas]
        by_id = {r.replica_id.unique_id: r for r in candidate_replicas}
        order = rank(key, list(by_id))
        home, others = by_id[order[0]], [by_id[i] for i in order[1:]]
        loads = [self.replica_queue_len_cache.get(r.replica_id) for r in candidate_replicas]
        home_load = self.replica_queue_len_cache.get(home.replica_id)
        known = [load for load in loads if load is not None]
        if home_load is not None and known and home_load - min(known) >= self.imbalance:
            return [others, [home]]
        return [[home], others]
