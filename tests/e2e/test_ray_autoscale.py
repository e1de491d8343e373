"""The team engine autoscaled between 1 and 2 replicas (`dg-engine serve --ray --min-replicas 1
--max-replicas 2`, its own local Ray cluster, the tiny Dream checkpoint), with short delays:
eight clients that keep a request each in flight bring a second replica within 90 s; once they
stop, the engine is back to one within 90 s. Replicas are counted on the status board, as
`dg-engine status` shows them (a removed replica leaves it 10 s after its last report).
"""

from __future__ import annotations

import threading
import time

import pytest

pytest.importorskip("ray.serve", reason="Ray is optional: pip install 'dg-lsp[distributed]'")
# A Ray cluster of its own: about 50 s on a loaded 2-core machine.
pytestmark = pytest.mark.e2e

from engine.serve.team.remote import RemoteEngine  # noqa: E402
from engine.types import InfillRequest, SamplerSettings  # noqa: E402
from tests.support.ray_cluster import (  # noqa: E402
    STARTUP,
    TEAM_TOKEN,
    clean_env,
    kill_group,
    serve_ray,
    tmp_path,  # noqa: F401 - the short temp dir Ray's socket paths need
    wait_serving,
)
from tests.support.wait import wait_for  # noqa: E402

BOUND = 90.0  # seconds each way
CLIENTS = 8  # requests kept in flight: four times the target of 2 per replica (--max-batch)
AUTOSCALE = ("--dtype", "float32", "--min-replicas", "1", "--max-replicas", "2",
             "--max-batch", "2", "--upscale-delay", "2", "--downscale-delay", "5",
             "--autoscale-window", "4")


def test_one_replica_becomes_two_under_load_and_one_again_when_idle(tmp_path, dream_ckpt):  # noqa: F811
    process, listen, _ = serve_ray(tmp_path, clean_env(tmp_path), dream_ckpt,
                                   options=AUTOSCALE)
    stop = threading.Event()
    errors: list[BaseException] = []
    answered = [0] * CLIENTS

    def client(i: int) -> None:
        engine = RemoteEngine(f"http://127.0.0.1:{listen}", TEAM_TOKEN)
        request = InfillRequest(f"# client {i}\ndef f(x):\n    return ", "\n", 64,
                                SamplerSettings(sampler="topk", k=1))  # 64 steps each
        try:
            while not stop.is_set():
                drafts = list(engine.infill_stream(request))
                assert drafts[-1].done
                answered[i] += 1
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(CLIENTS)]
    try:
        wait_serving(process, tmp_path)
        engine = RemoteEngine(f"http://127.0.0.1:{listen}", TEAM_TOKEN)
        replicas = lambda: len(engine.status()["replicas"])  # noqa: E731
        wait_for(lambda: replicas() == 1, STARTUP, "the first replica", interval=0.5)
        started = time.monotonic()
        for t in threads:
            t.start()
        wait_for(lambda: replicas() == 2 or bool(errors), BOUND, "a second replica", interval=0.5)
        up = time.monotonic() - started
        assert not errors, errors
        stop.set()
        for t in threads:
            t.join(60)
        idle = time.monotonic()
        wait_for(lambda: replicas() == 1, BOUND, "back to one replica", interval=0.5)
        down = time.monotonic() - idle
    finally:
        stop.set()
        kill_group(process)
    assert not errors, errors
    print(f"1 -> 2 replicas in {up:.1f} s under load ({sum(answered)} requests answered), "
          f"2 -> 1 in {down:.1f} s idle")
    assert up < BOUND and down < BOUND
