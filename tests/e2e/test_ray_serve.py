"""The engine as a Ray Serve application (engine.serve.team.app), on a local Ray cluster.

One module-wide deployment: two CPU replicas of the tiny Dream checkpoint behind the HTTP
ingress and the front `dg-engine serve --ray` puts on the team's URL, reached by that URL with
a token, as a team's dg-lsp and other tools reach it. The cluster is small
(2 CPUs, half a CPU per replica) and shut down after the module.
"""

from __future__ import annotations

import http.client
import json
import ssl
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

ray = pytest.importorskip("ray", reason="Ray is optional: pip install 'dg-lsp[distributed]'")
serve = pytest.importorskip("ray.serve", reason="needs ray[serve]")
# A local Ray cluster.
pytestmark = pytest.mark.e2e

from engine.serve.socket.client import EngineRefused, EngineUnavailable  # noqa: E402
from engine.serve.team.app import APP_NAME, AppOptions, build_app, token_digest  # noqa: E402
from engine.serve.team.command import tls_context  # noqa: E402
from engine.serve.team.front import Front  # noqa: E402
from engine.serve.team.remote import RemoteEngine, read_token  # noqa: E402
from engine.serve.team.routing import rank, routing_key  # noqa: E402
from engine.types import HolesRequest, InfillRequest, RewriteRequest, SamplerSettings, UnitEnd  # noqa: E402, E501
from tests.support.continue_adapter import adapter_call, installed_adapter  # noqa: E402
from tests.support.front_thread import front_in_thread  # noqa: E402
from tests.support.openai_checks import check_completions  # noqa: E402
from tests.support.ports import free_port  # noqa: E402
from tests.support.tls import self_signed  # noqa: E402
from tests.support.wait import wait_for  # noqa: E402

TOKEN = "team-s3cret"
REPORT = 0.25  # seconds between the replicas' reports to the status board
ONE_PER_STEP = SamplerSettings(sampler="topk", k=1)  # a request as long as its hole


@pytest.fixture(scope="module")
def token_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("team") / "token"
    path.write_text(TOKEN + "\n")
    path.chmod(0o600)
    return path


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and its key."""
    return self_signed(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def team(dream_ckpt: Path, certificate: tuple[Path, Path]) -> str:
    """The URL of a two-replica deployment as `dg-engine serve --ray` sets it up: Ray Serve's
    proxy on loopback, the front (with TLS) on the URL, which every test then goes through."""
    # Outside the ports Ray's processes take as they start.
    port, serve_port = free_port(), free_port()
    ray.init(num_cpus=2, include_dashboard=False, logging_level="warning", log_to_driver=False)
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": serve_port})
        options = AppOptions(model=str(dream_ckpt), device="cpu", dtype="float32",
                             token_digest=token_digest(TOKEN), replicas=2, cpus=0.5, threads=1,
                             health_period=1.0, report_period=REPORT)
        serve.run(build_app(options), name=APP_NAME, route_prefix="/")
        board = serve.get_deployment_handle("StatusBoard", APP_NAME)
        front = Front(("127.0.0.1", serve_port), options.token_digest,
                      on_refused=lambda: board.refuse.remote())
        url = f"https://127.0.0.1:{port}"
        CA_FILE.append(str(certificate[0]))
        with front_in_thread(front, port, tls_context(*certificate)):
            wait_for(lambda: len(client(url).status()["replicas"]) == 2, 60, interval=0.2)
            yield url
    finally:
        serve.shutdown()
        ray.shutdown()


CA_FILE: list[str] = []  # the module's certificate, which its clients trust


def client(url: str, **kwargs) -> RemoteEngine:
    return RemoteEngine(url, TOKEN, ca_file=CA_FILE[-1], **kwargs)


def replica_totals(url: str) -> dict[str, int]:
    replicas = client(url).status()["replicas"]
    return {key: sum(r[key] for r in replicas) for key in ("submitted", "completed",
                                                           "cancelled", "live",
                                                           "forwardPasses")}


def settled(url: str) -> dict[str, int]:
    """Replica totals once every request has left its replica and the board has heard: none
    live, and the same totals over two report periods (a request's last report is in)."""
    last: list[dict[str, int]] = []

    def steady() -> dict[str, int] | None:
        totals = replica_totals(url)
        same = last[-1:] == [totals] and totals["live"] == 0
        last.append(totals)
        return totals if same else None

    return wait_for(steady, 30, "the replicas' totals to settle", interval=2 * REPORT)


def test_a_remote_completion_equals_the_local_engine_for_the_same_seed(team, dream_ckpt,
                                                                      token_file):
    from engine import Engine

    local = Engine.load(str(dream_ckpt), device="cpu", dtype="float32")
    remote = RemoteEngine.connect(team, token_file, ca_file=CA_FILE[-1])
    assert (remote.engine_info.family, remote.engine_info.device) == ("masked", "cpu")
    assert remote.engine_info.counts_tokens
    for seed in (0, 7):
        # share_prefix off: otherwise the first pass may start from keys/values a replica
        # kept from an earlier request, which depends on what it served before.
        settings = SamplerSettings(seed=seed, temperature=0.7, share_prefix=False)
        request = InfillRequest("def add(a, b):\n    ", "\n", 12, settings)
        here = list(local.infill_stream(request))
        there = list(remote.infill_stream(request))
        assert [d.token_ids for d in there] == [d.token_ids for d in here]  # every draft
        assert (there[-1].text, there[-1].finish_reason) == (here[-1].text,
                                                             here[-1].finish_reason)
        assert remote.completion_ids(there[-1]) == local.completion_ids(here[-1])
    rewrite = RewriteRequest("x = ", "\n", "compute(1)", strength=0.5, max_tokens=8)
    here = list(local.rewrite_stream(rewrite))[-1]
    there = list(remote.rewrite_stream(rewrite))[-1]
    assert (there.token_ids, there.text) == (here.token_ids, here.text)
    holes = HolesRequest(("def f(a):\n", "\n    b = a * 2\n", "\n"), (6, 5),
                         SamplerSettings(share_prefix=False), until=(UnitEnd("line"), None))
    here = list(local.holes_stream(holes))
    there = list(remote.holes_stream(holes, document="f.py"))
    assert [(d.holes, d.token_ids, d.step) for d in there] == [
        (d.holes, d.token_ids, d.step) for d in here]
    with pytest.raises(EngineRefused, match="holes: expected an integer in 1..16"):
        list(remote.holes_stream(HolesRequest(("a",) * 18, (1,) * 17)))
    assert list(remote.holes_stream(holes))[-1].holes == here[-1].holes  # still serving


def test_eight_clients_typing_every_request_answered_or_cancelled_and_one_replica_per_document(
        team):
    before = settled(team)
    # Four documents homed on each replica (the router's rendezvous hash over the replicas'
    # ids), so the load stays even and no request has to leave its home: with the ids drawn
    # at random, all eight could hash to one replica, whose load would then send some away.
    ids = [r["replica"] for r in client(team).status()["replicas"]]
    homes: dict[str, list[str]] = {i: [] for i in ids}
    for n in range(200):
        document = f"# module {n}: helpers for part {n}\n" + "import os\n" * 60
        home = rank(routing_key({"prefix": document}), ids)[0]
        if len(homes[home]) < 4:
            homes[home].append(document)
    documents = [d for home in ids for d in homes[home]]
    home_of = [home for home in ids for _ in homes[home]]
    assert len(documents) == 8
    keystrokes = "def f(x):\n    return x"
    outcomes: dict[int, list[str]] = {i: [] for i in range(8)}
    replicas: dict[int, list[str]] = {i: [] for i in range(8)}
    errors: list[BaseException] = []
    start = threading.Barrier(8)

    def type_in(i: int) -> None:
        engine = client(team)
        start.wait()
        try:
            for k in range(1, len(keystrokes) + 1, 3):
                # As an editor does: the request for a keystroke the user has typed past is
                # cancelled after its first draft; the last one runs to its answer.
                last = k + 3 > len(keystrokes)
                seen: list = []
                settings = SamplerSettings() if last else ONE_PER_STEP
                drafts = engine.infill_stream(
                    InfillRequest(documents[i] + keystrokes[:k], "\n", 16 if last else 48,
                                  settings),
                    cancel=lambda last=last, seen=seen: not last and bool(seen))
                for draft in drafts:
                    seen.append(draft)
                outcomes[i].append(seen[-1].finish_reason)
                assert seen[-1].done
                if engine.last_replica:
                    replicas[i].append(engine.last_replica)
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=type_in, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    sent = sum(len(o) for o in outcomes.values())
    assert sent == 8 * len(range(1, len(keystrokes) + 1, 3))
    for i in range(8):  # the last keystroke's request answered, the others answered or cancelled
        assert outcomes[i][-1] in ("stop", "length")
        assert set(outcomes[i]) <= {"stop", "length", "cancelled"}
        # Its home served it. One request may leave home when the router sees that replica
        # full or briefly unhealthy (a clean-clone CI run once saw a document on both
        # replicas); a router that ignored the document would move about half of them.
        away = [r for r in replicas[i] if r != home_of[i]]
        assert len(away) <= 1, f"document {i} (home {home_of[i]}) was served by {replicas[i]}"
    after = settled(team)
    # None lost on the replicas' side either: every request arrived and finished or was
    # cancelled there (a cancel that lands after the last step finds it completed).
    assert after["submitted"] - before["submitted"] == sent
    cancelled = after["cancelled"] - before["cancelled"]
    assert (after["completed"] - before["completed"]) + cancelled == sent
    assert cancelled > 0  # the disconnects reached the replicas
    print(f"{sent} requests, {cancelled} cancelled on the replicas; documents per replica: "
          f"{Counter(home_of)}")


def test_a_cancelled_request_leaves_its_replica_at_the_next_step(team):
    before = settled(team)
    engine = client(team)
    seen: list = []
    for draft in engine.infill_stream(InfillRequest("def slow():\n" + "    pass\n" * 30, "\n", 200,
                                                    ONE_PER_STEP),
                                      cancel=lambda: len(seen) >= 2):
        seen.append(draft)
    assert seen[-1].finish_reason == "cancelled" and len(seen) == 3
    after = settled(team)
    assert after["cancelled"] - before["cancelled"] == 1
    assert after["completed"] == before["completed"]
    # It stopped long before its 200 steps: the disconnect reached the scheduler.
    assert after["forwardPasses"] - before["forwardPasses"] < 100


@pytest.mark.parametrize("header", [None, "Bearer wrong", f"Basic {TOKEN}", "Bearer",
                                    f"Bearer {TOKEN}x"])
def test_a_wrong_or_missing_token_is_refused_and_reaches_no_model(team, header):
    before = settled(team) if header is None else replica_totals(team)
    refused = client(team).status()["refused"]
    host, port = team.removeprefix("https://").split(":")
    context = ssl.create_default_context(cafile=CA_FILE[-1])
    for method, path in (("POST", "/v1/stream"), ("GET", "/v1/hello"), ("GET", "/v1/status")):
        connection = http.client.HTTPSConnection(host, int(port), timeout=30, context=context)
        headers = {"Authorization": header} if header else {}
        body = b'{"op":"infill","id":1,"prefix":"x","suffix":"","max_tokens":4}'
        connection.request(method, path, body=body if method == "POST" else None,
                           headers=headers)
        response = connection.getresponse()
        text = response.read().decode()
        connection.close()
        assert response.status == 401 and '"unauthorized"' in text
        assert TOKEN not in text
    with pytest.raises(EngineUnavailable) as caught:
        RemoteEngine(team, "wrong", ca_file=CA_FILE[-1]).hello()
    assert caught.value.code == "unauthorized"
    # Counted on the status board, which the ingress tells without waiting for it.
    wait_for(lambda: client(team).status()["refused"] == refused + 4, 10, interval=0.2)
    time.sleep(2 * REPORT)
    assert replica_totals(team)["submitted"] == before["submitted"]


def test_the_token_file_must_be_private_and_the_url_must_not_carry_it(tmp_path):
    path = tmp_path / "token"
    path.write_text("abc\n")
    path.chmod(0o644)
    with pytest.raises(ValueError, match="chmod 600"):
        read_token(path)
    with pytest.raises(ValueError, match="token file"):
        RemoteEngine("http://me:abc@host:8000", "abc")
    with pytest.raises(ValueError, match="needs a token"):
        RemoteEngine("http://host:8000", "")
    assert "abc" not in repr(RemoteEngine("http://host:8000", "abc"))


def test_tls_is_required_of_a_client_that_does_not_trust_the_certificate(team):
    with pytest.raises(EngineUnavailable, match="CERTIFICATE_VERIFY_FAILED"):
        RemoteEngine(team, TOKEN).hello()  # the system's CAs do not know it
    with pytest.raises(EngineUnavailable):  # nor does plain HTTP reach it
        RemoteEngine(team.replace("https:", "http:"), TOKEN).hello()


def test_status_shows_each_replica_its_model_and_queue(team, token_file, capsys,
                                                         monkeypatch):
    from engine.cli import main

    monkeypatch.setenv("SSL_CERT_FILE", CA_FILE[-1])  # how a developer trusts a private CA
    assert main(["status", team, "--token-file", str(token_file)]) == 0
    out = capsys.readouterr().out
    assert "2 replica(s)" in out and "dream" in out and "tok/s" in out


def test_doctor_checks_the_team_engine_a_developer_points_at(team, token_file, tmp_path,
                                                             capsys, monkeypatch):
    from dg_lsp.cli import main

    monkeypatch.setenv("SSL_CERT_FILE", CA_FILE[-1])
    assert main(["doctor", "--engine", team, "--token-file", str(token_file)]) == 0
    out = capsys.readouterr().out
    assert f"engine:      {team}: 2 replica(s)" in out and "dream" in out
    wrong = tmp_path / "wrong-token"
    wrong.write_text("not-the-token\n")
    wrong.chmod(0o600)
    assert main(["doctor", "--engine", team, "--token-file", str(wrong)]) == 1
    out = capsys.readouterr().out
    assert f"engine:      BROKEN: {team}: " in out and "not-the-token" not in out

def test_a_language_server_pointed_at_the_url_completes_and_never_logs_the_token(
        team, token_file, tmp_path):
    from tests.support.lsp_wire import WireServer

    before = settled(team)
    options = {"engine": team, "engineTokenFile": str(token_file),
               "holeSize": {"restOfLine": 4, "brackets": 4, "comment": 4, "block": 4}}
    server = WireServer(None, options, env={"SSL_CERT_FILE": CA_FILE[-1]})
    try:
        uri = (tmp_path / "a.py").as_uri()
        server.open(uri, "def add(a, b):\n    return \n")
        reply = server.inline(uri, 1, 11)
        stats = server.call("workspace/executeCommand", {"command": "dg-lsp.stats"})["result"]
        assert "error" not in reply and stats["engineRequests"] >= 1  # the team's engine was asked
        said = server.stderr() + json.dumps(server.notifications)  # its logs: logMessage
    finally:
        server.close()
    assert TOKEN not in said and team in said  # it said where, not with what
    assert settled(team)["completed"] > before["completed"]


def test_killing_a_replica_mid_request_fails_that_request_alone_and_the_app_heals(team):
    engine = client(team)
    drafts = engine.infill_stream(InfillRequest("def slow():\n" + "    pass\n" * 30, "\n", 120,
                                                ONE_PER_STEP))
    next(drafts)
    victim = engine.last_replica
    ray.kill(ray.get_actor(f"SERVE_REPLICA::{APP_NAME}#EngineReplica#{victim}",
                           namespace="serve"), no_restart=True)
    with pytest.raises(EngineUnavailable) as caught:
        for _ in drafts:
            pass
    assert caught.value.code == "unavailable"
    # The client's next request goes to the replica that is left, and is answered.
    slow = InfillRequest("def slow():\n" + "    pass\n" * 30, "\n", 8)
    last = list(engine.infill_stream(slow))[-1]
    assert last.finish_reason in ("stop", "length") and engine.last_replica != victim

    def restored() -> bool:
        app = serve.status().applications[APP_NAME]
        states = app.deployments["EngineReplica"].replica_states
        return states.get("RUNNING", 0) == 2 and sum(states.values()) == 2

    wait_for(restored, 60, interval=0.2)
    wait_for(lambda: victim not in {r["replica"] for r in engine.status()["replicas"]}
             and len(engine.status()["replicas"]) == 2, 30, interval=0.2)


def test_serve_ray_options_are_checked_before_anything_is_deployed(token_file, capsys):
    from engine.cli import build_parser, main
    from engine.serve.team.app import autoscaling_config
    from engine.serve.team.command import front_address, options_from_args, tls_context

    def parse(*extra: str):
        return build_parser().parse_args(["serve", "--ray", "--token-file", str(token_file),
                                          *extra])
    options = options_from_args(parse("--min-replicas", "1", "--max-replicas", "4"), TOKEN,
                                gpus=True)
    assert (options.min_replicas, options.max_replicas, options.gpus) == (1, 4, 1.0)
    assert options.token_digest == token_digest(TOKEN) and TOKEN not in repr(options)
    for bad in (("--min-replicas", "3", "--max-replicas", "2"), ("--min-replicas", "1")):
        with pytest.raises(ValueError):
            options_from_args(parse(*bad), TOKEN, gpus=False)
    # Each number's own range is its flag's, refused when parsed (test_engine_numbers.py).
    for bad in (("--replicas", "0"), ("--autoscale-window", "0"), ("--upscale-delay", "-1"),
                ("--downscale-delay", "inf")):
        with pytest.raises(SystemExit):
            parse(*bad)
    # The delays and the window reach Ray Serve's autoscaling config (the defaults: a service's).
    quick = options_from_args(parse("--min-replicas", "1", "--max-replicas", "2",
                                    "--upscale-delay", "2", "--downscale-delay", "5",
                                    "--autoscale-window", "4", "--max-batch", "2"), TOKEN,
                              gpus=False)
    assert autoscaling_config(quick) == {
        "min_replicas": 1, "max_replicas": 2, "initial_replicas": 1,
        "target_ongoing_requests": 2, "upscale_delay_s": 2.0, "downscale_delay_s": 5.0,
        "look_back_period_s": 4.0, "metrics_interval_s": 1.0}
    assert {k: v for k, v in autoscaling_config(options).items() if k.endswith("_s")} == {
        "upscale_delay_s": 5.0, "downscale_delay_s": 120.0, "look_back_period_s": 30.0}
    with pytest.raises(ValueError, match="together"):
        tls_context(Path("cert.pem"), None)
    with pytest.raises(ValueError, match="HOST:PORT"):
        front_address("0.0.0.0")
    assert front_address(":8000") == ("127.0.0.1", 8000)
    assert main(["serve", "--ray"]) == 2  # no token file: refused before Ray starts
    assert "--token-file" in capsys.readouterr().err
    # The front runs in the command's process: it cannot leave the application behind.
    assert main(["serve", "--ray", "--token-file", str(token_file), "--detach"]) == 2
    assert "service" in capsys.readouterr().err


def test_a_replica_whose_scheduler_is_dead_or_stuck_fails_its_health_check():
    from engine.serve.limits import Limits
    from engine.serve.team.app import EngineReplica

    class Scheduler:
        _thread = threading.Thread(target=time.sleep, args=(30,), daemon=True)
        state = {"rounds": 5, "completed": 1, "live": 2}

        def stats(self) -> dict:
            return dict(self.state)

    replica = EngineReplica.__new__(EngineReplica)
    replica.scheduler, replica.limits = Scheduler(), Limits(512, 1 << 30, 10.0)
    with pytest.raises(RuntimeError, match="not running"):
        replica.check_health()
    Scheduler._thread.start()
    clock = [1000.0]
    replica._clock = lambda: clock[0]
    replica.check_health()
    clock[0] += 15  # stuck, but not yet for twice a request's time
    replica.check_health()
    Scheduler.state["rounds"] = 6  # it moved
    clock[0] += 15
    replica.check_health()
    clock[0] += 21
    with pytest.raises(RuntimeError, match="no scheduler round"):
        replica.check_health()
    Scheduler.state["live"] = 0  # idle is healthy however long
    clock[0] += 100
    replica.check_health()


@pytest.fixture(scope="module")
def inproc(dream_ckpt: Path):
    from engine import Engine

    return Engine.load(str(dream_ckpt), device="cpu", dtype="float32")


def tools_client() -> Any:
    """An HTTP client of the team's URL that trusts its certificate, as the tools' are."""
    import httpx

    return httpx.Client(verify=ssl.create_default_context(cafile=CA_FILE[-1]), timeout=120)


def test_openai_completions_through_the_team_equal_the_engine_in_process(team, inproc):
    openai = pytest.importorskip("openai")

    http = tools_client()
    # One client, one connection pool, several requests: the front answers each on a
    # connection of its own and says so (Connection: close), which the client honours.
    api = openai.OpenAI(base_url=f"{team}/v1", api_key=TOKEN, max_retries=0, http_client=http)
    model = api.models.list().data[0].id
    suffix = "\n\nprint(total(3))\n"
    check_completions(api, model, inproc, "def total(n):\n    return ",
                      "def squares(n):\n    return ", suffix)

    auth = {"Authorization": f"Bearer {TOKEN}"}
    for prefix, stream in (("def cubes(n):\n    return ", False),
                           ("def halves(n):\n    return ", True)):
        expected = inproc.infill(prefix, suffix, 8, seed=0).text
        body = {"input_prefix": prefix, "input_suffix": suffix, "n_predict": 8, "seed": 0,
                "stream": stream}
        with http.stream("POST", f"{team}/infill", json=body, headers=auth) as answer:
            assert answer.status_code == 200 and answer.headers["connection"] == "close"
            lines = [json.loads(line.removeprefix("data: ")) for line in answer.iter_lines()
                     if line.strip()]
        assert "".join(chunk["content"] for chunk in lines) == expected
        assert lines[-1]["stop"] is True and len(lines) >= (2 if stream else 1)


def test_continues_adapter_through_the_team_equals_the_engine_in_process(team, inproc):
    folder = installed_adapter()
    prefix, suffix = "def doubled(n):\n    return ", "\n\nprint(doubled(3))\n"
    config = {"provider": "llamastack", "apiBase": f"{team}/v1/", "apiKey": TOKEN,
              "requestOptions": {"caBundlePath": CA_FILE[-1]}}
    body = {"model": "bundled", "prompt": prefix, "suffix": suffix, "max_tokens": 8,
            "temperature": 0, "stream": True}
    pieces = adapter_call(folder, config, "fimStream", body)
    assert "".join(pieces) == inproc.infill(prefix, suffix, 8).text


def test_a_tool_client_that_disconnects_cancels_its_denoising_on_its_replica(team):
    before = settled(team)
    # One token per pass over a long hole: it is still denoising when the client leaves.
    body = {"prompt": "z = ", "max_tokens": 500, "stream": True,
            "dg_settings": {"sampler": "topk", "k": 1}}
    with tools_client().stream("POST", f"{team}/v1/completions", json=body,
                               headers={"Authorization": f"Bearer {TOKEN}"}) as response:
        assert response.status_code == 200
        next(response.iter_lines())
    wait_for(lambda: replica_totals(team)["cancelled"] > before["cancelled"], timeout=2.0,
             what="the request cancelled on its replica", interval=0.05)
    after = settled(team)
    assert after["completed"] == before["completed"]
    assert after["forwardPasses"] - before["forwardPasses"] < 500


@pytest.mark.parametrize("method,path", [("GET", "/v1/models"), ("POST", "/v1/completions"),
                                         ("POST", "/infill")])
def test_the_team_tool_paths_want_the_token_and_say_so_as_openai_does(team, method, path):
    response = tools_client().request(method, f"{team}{path}", json={"prompt": "x"},
                                      headers={"Authorization": "Bearer wrong"})
    assert response.status_code == 401
    assert response.json() == {"error": {
        "message": "this engine needs the team's token (Authorization: Bearer)",
        "type": "invalid_request_error", "param": None, "code": "invalid_api_key"}}


def test_the_openai_client_with_a_wrong_key_gets_its_authentication_error(team):
    openai = pytest.importorskip("openai")
    api = openai.OpenAI(base_url=f"{team}/v1", api_key="wrong", max_retries=0,
                        http_client=tools_client())
    with pytest.raises(openai.AuthenticationError) as caught:
        api.completions.create(model="any", prompt="x", max_tokens=4)
    assert caught.value.body["code"] == "invalid_api_key"
