"""Served deployments against stand-in OpenAI-compatible servers on loopback (no vLLM).

The same flow against two real ``vllm serve`` processes is in ``tests/e2e/test_e2e_served.py``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from pytest_specdecode.engines import protocol
from pytest_specdecode.engines.config import EngineConfig
from pytest_specdecode.engines.protocol import Counters, EngineBackend, EngineSource, LoadRound
from pytest_specdecode.engines.served import ServedEngine, ServedPool, ServerMetrics, parse_metrics
from pytest_specdecode.errors import ConfigError, EngineError
from pytest_specdecode.settings import API_KEY_ENV, BY_NAME

SPEC_METRICS = """# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{{engine="0",model_name="m"}} {drafts}
vllm:spec_decode_num_drafts_created{{engine="0",model_name="m"}} 1.7e9
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{{engine="0",model_name="m"}} {draft_tokens}
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{{engine="0",model_name="m"}} {accepted}
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="m",position="1"}} {pos1}
vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="m",position="0"}} {pos0}
"""
REQUEST_METRICS = """# TYPE vllm:request_success_total counter
vllm:request_success_total{{engine="0",finished_reason="length",model_name="m"}} {requests}
vllm:request_success_total{{engine="0",finished_reason="stop",model_name="m"}} 0
"""


CACHE_METRICS = """# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{{engine="0",model_name="m"}} {queries}
vllm:prefix_cache_queries_created{{engine="0",model_name="m"}} 1.7e9
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{{engine="0",model_name="m"}} {hits}
"""


def metrics_text(speculating: bool = True, **values: int) -> str:
    """A /metrics page; with ``queries`` (and ``hits``), the prefix-cache counters too."""
    defaults = {"drafts": 0, "draft_tokens": 0, "accepted": 0, "pos0": 0, "pos1": 0, "requests": 0,
                "hits": 0}  # fmt: skip
    page = (SPEC_METRICS if speculating else "") + REQUEST_METRICS
    if "queries" in values:
        page += CACHE_METRICS
    return page.format(**{**defaults, **values})


def test_parse_metrics_sums_labels_and_orders_positions() -> None:
    metrics = parse_metrics(
        metrics_text(drafts=10, draft_tokens=20, accepted=15, pos0=9, pos1=6, requests=4)
    )
    assert metrics == ServerMetrics(Counters(10, 20, 15, (9, 6)), requests=4, speculating=True)


def test_parse_metrics_reads_the_prefix_cache_counters() -> None:
    counters = parse_metrics(metrics_text(speculating=False, queries=400, hits=300)).counters
    assert (counters.prefix_cache_queries, counters.prefix_cache_hits) == (400, 300)
    assert counters.prefix_cache_hit_rate == 0.75
    assert parse_metrics(metrics_text()).counters.prefix_cache_hit_rate is None  # none looked up


def test_parse_metrics_tells_a_server_without_speculation() -> None:
    assert parse_metrics(metrics_text(speculating=True)).speculating  # counters at 0 count
    assert not parse_metrics(metrics_text(speculating=False, requests=3)).speculating


class FakeServer:
    """A stand-in vLLM server on HTTP/1.1 with keep-alive: streams two tokens per chunk,
    answers non-streamed requests with ``n`` completions, and counts requests.

    ``speculating`` puts spec-decode counters on /metrics; ``api_key`` requires that key (a
    401 answer echoes the Authorization header it got, as a careless proxy would);
    ``redirects`` maps a path to a Location to redirect to; ``delay`` holds every answer;
    ``trickle`` holds every streamed chunk; ``strangers`` requests of someone else finish with
    each of ours. A prompt ``"fail"`` gets an error event in its stream. A stream that asks
    for usage ends with a usage chunk, which carries ``metrics.speculative_decoding`` when
    ``spec_decoding`` is given (as a server started with ``--per-request-spec-decode-metrics``).
    ``cache`` (prompt tokens looked up, found cached) puts the prefix-cache counters on
    /metrics, that many per request.
    """

    def __init__(
        self,
        *,
        model: str = "tiny",
        root: str | None = None,
        speculating: bool = True,
        api_key: str | None = None,
        redirects: dict[str, str] | None = None,
        delay: float = 0.0,
        trickle: float = 0.0,
        strangers: int = 0,
        spec_decoding: dict[str, Any] | None = None,
        old: int = 0,
        started: float | None = None,
        restart_at: int | None = None,
        page: Any = None,
        endless: bool = False,
        token_ids: bool = True,
        short: int = 1,
        cache: tuple[int, int] | None = None,
    ) -> None:
        self.cache = cache
        self.requests = 0
        self.old, self.started, self.restart_at = old, started, restart_at
        self.page, self.endless = page, endless
        self.token_ids, self.short = token_ids, short
        self.restarts = 0
        self.keep = False  # a restart at restart_at keeps the counts (see restart())
        self.spec_decoding = spec_decoding
        self.model, self.root = model, root
        self.speculating = speculating
        self.api_key = api_key
        self.redirects = redirects or {}
        self.delay, self.trickle = delay, trickle
        self.strangers = strangers
        self.seen: list[tuple[str, str | None]] = []  # (path, Authorization header)
        self.bodies: list[dict[str, Any]] = []  # of the POSTs
        self.connections: list[tuple[str, int]] = []  # (method, client port), in order
        self.closing = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, code: int, body: bytes, ctype: str = "application/json") -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _chunk(self, data: bytes) -> None:
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()

            def _gate(self) -> bool:
                """Record, delay, redirect and check the key; False when answered already."""
                key = self.headers.get("Authorization")
                server.seen.append((self.path, key))
                server.connections.append((self.command, self.client_address[1]))
                server.closing.wait(server.delay)
                if self.path in server.redirects:
                    self.send_response(302)
                    self.send_header("Location", server.redirects[self.path])
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return False
                if server.api_key and key != f"Bearer {server.api_key}":
                    body = {"error": "bad key", "got": key}
                    self._send(401, json.dumps(body).encode())
                    return False
                return True

            def do_GET(self) -> None:
                if not self._gate():
                    return
                if self.path.startswith("/v1/models"):
                    entry = {"id": server.model, **({"root": server.root} if server.root else {})}
                    self._send(200, json.dumps({"data": [entry]}).encode())
                elif self.path == "/version":
                    self._send(200, b'{"version": "0.32.0"}')
                elif self.path == "/health":
                    self._send(200, b"")
                elif self.path == "/metrics" and server.endless:
                    self.send_response(200)
                    self.send_header("Content-Type", "text/plain")
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    line = b"# " + b"x" * (10 if server.trickle else 65000) + b"\n"
                    while not server.closing.is_set():
                        server.closing.wait(server.trickle)
                        self._chunk(line)
                elif self.path == "/metrics":
                    self._send(200, server.metrics().encode(), "text/plain")
                else:
                    self._send(404, b"{}")

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if not self._gate():
                    return
                server.bodies.append(body)
                assert body["return_token_ids"] and body["model"] == server.model
                if body["stream"]:
                    self._stream(body)
                else:  # n completions, listed last first
                    choices = [
                        {"index": j, "text": "x", "token_ids": [j] * body["max_tokens"]}
                        for j in reversed(range(body["n"]))
                    ]
                    self._send(200, json.dumps({"choices": choices}).encode())
                server.requests += 1 + server.strangers
                if server.restart_at is not None and server.requests >= server.restart_at:
                    server.restart_at = None
                    server.restart(server.keep)

            def _stream(self, body: dict[str, Any]) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for i in range(0, body["max_tokens"] // server.short, 2):
                    server.closing.wait(server.trickle)
                    choice: dict[str, Any] = {"text": "ab"}
                    if server.token_ids:
                        choice["token_ids"] = [i, i + 1]
                    event: dict[str, Any] = {"error": {"message": "boom"}}
                    chunk = event if body["prompt"] == "fail" else {"choices": [choice]}
                    self._chunk(f"data: {json.dumps(chunk)}\n\n".encode())
                if (body.get("stream_options") or {}).get("include_usage"):
                    usage: dict[str, Any] = {"choices": [], "usage": {"completion_tokens": 1}}
                    if server.spec_decoding is not None:
                        usage["metrics"] = {"speculative_decoding": server.spec_decoding}
                    self._chunk(f"data: {json.dumps(usage)}\n\n".encode())
                self._chunk(b"data: [DONE]\n\n")
                self._chunk(b"")

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def metrics(self) -> str:
        """The /metrics page: every request of ours drafts 4 times, 8 draft tokens, 6
        accepted."""
        if self.page is not None:
            return str(self.page(self))
        n = self.requests + self.old
        counts = {"drafts": n * 4, "draft_tokens": n * 8, "accepted": n * 6,
                  "pos0": n * 4, "pos1": n * 2, "requests": n}  # fmt: skip
        if self.cache is not None:
            counts.update(queries=n * self.cache[0], hits=n * self.cache[1])
        text = metrics_text(self.speculating, **counts)
        if self.started is not None:
            text += "# TYPE process_start_time_seconds gauge\n"
            text += f"process_start_time_seconds {self.started}\n"
        return text

    def restart(self, keep: bool = False) -> None:
        """The server process restarts: its counters start from 0 again (``keep``: as if it
        had since served as much as before), with a new process start time."""
        self.restarts += 1
        if not keep:
            self.requests = self.old = 0
        if self.started is not None:
            self.started += 1000.0

    def keys_seen(self) -> list[str | None]:
        return [key for _, key in self.seen]

    def close(self) -> None:
        self.closing.set()
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def servers() -> Iterator[Any]:
    """A factory of fake servers, all closed at the end of the test."""
    made: list[FakeServer] = []

    def make(**kwargs: Any) -> FakeServer:
        made.append(FakeServer(**kwargs))
        return made[-1]

    yield make
    for s in made:
        s.close()


@pytest.fixture
def server(servers: Any) -> FakeServer:
    result: FakeServer = servers()
    return result


CONFIG = EngineConfig.create("tiny", {"method": "served"}, {})
BASE_CONFIG = EngineConfig.create("tiny", None, {})
KEY = API_KEY_ENV  # the api_key_env setting's default: SPECDECODE_API_KEY
SAMPLING = {"temperature": 0.0, "max_tokens": 8, "ignore_eos": True}


def test_generate_streams_concurrently_with_per_request_timing(server: FakeServer) -> None:
    engine = ServedEngine(server.url, CONFIG)
    assert engine.model == "tiny" and engine.info["vllm_version"] == "0.32.0"
    done = engine.generate_round(["a", "b", "c"], SAMPLING, concurrency=2)
    assert len(done.requests) == 3 and done.other_requests == 0
    request = done.requests[0]
    assert request.token_ids == tuple(range(8)) and request.text == "ab" * 4
    assert request.ttft is not None and request.tpot is not None
    assert engine.counters().num_drafts == 12
    assert sorted(b["prompt"] for b in server.bodies) == ["a", "b", "c"]
    assert all(b["stream"] and b["max_tokens"] == 8 for b in server.bodies)


def test_the_plain_calls_keep_their_dict_shapes(server: FakeServer) -> None:
    engine = ServedEngine(server.url, CONFIG)
    out = engine.generate(["a"], SAMPLING)
    assert set(out) == {"elapsed", "requests"}
    assert out["requests"][0]["token_ids"] == list(range(8))
    assert set(out["requests"][0]) == {"token_ids", "text", "ttft", "tpot"}
    assert engine.spec_counters() == {
        "num_drafts": 4,
        "num_draft_tokens": 8,
        "num_accepted_tokens": 6,
        "accepted_per_position": [4, 2],
        "prefix_cache_queries": 0,
        "prefix_cache_hits": 0,
    }


def test_connections_are_kept_across_rounds(server: FakeServer) -> None:
    """Two requests at a time over three rounds: two connections in all, both opened before
    the first round's clock started (none inside a TTFT)."""
    engine = ServedEngine(server.url, CONFIG)
    for _ in range(3):
        engine.generate_round(["a", "b", "c", "d"], SAMPLING, concurrency=2)
    assert server.requests == 12
    ports = [port for _, port in server.connections]
    assert len(set(ports)) == 2
    for i, (method, port) in enumerate(server.connections):
        if method == "POST":  # on a connection that a GET opened earlier
            assert ("GET", port) in server.connections[:i]


def test_other_traffic_during_a_round_is_counted(servers: Any) -> None:
    server = servers(strangers=1)  # someone else's request finishes with each of ours
    engine = ServedEngine(server.url, CONFIG)
    assert engine.generate_round(["a", "b"], SAMPLING).other_requests == 2


def test_an_error_in_the_stream_is_an_engine_error(server: FakeServer) -> None:
    engine = ServedEngine(server.url, CONFIG)
    with pytest.raises(EngineError, match="/v1/completions: .*boom"):
        engine.generate_round(["a", "fail"], SAMPLING)


def test_the_timeout_bounds_a_streamed_request_as_a_whole(servers: Any) -> None:
    slow = servers(trickle=0.1)  # every chunk within the timeout, the whole answer not
    engine = ServedEngine(slow.url, CONFIG, timeout=0.3)
    with pytest.raises(EngineError, match=r"/v1/completions: no answer within 0\.3 s"):
        engine.generate_round(["a"], {**SAMPLING, "max_tokens": 40})


def test_sample_returns_every_completion_per_prompt(server: FakeServer) -> None:
    engine = ServedEngine(server.url, CONFIG)
    sampling = {"temperature": 0.8, "max_tokens": 3, "ignore_eos": True, "n": 3}
    assert engine.sample(["a", "b"], sampling) == [
        [[0, 0, 0], [1, 1, 1], [2, 2, 2]],  # in index order
        [[0, 0, 0], [1, 1, 1], [2, 2, 2]],
    ]
    assert sorted(b["prompt"] for b in server.bodies) == ["a", "b"]
    assert all(not b["stream"] and b["n"] == 3 for b in server.bodies)


def test_more_completions_than_vllm_gives_one_request_go_in_several(server: FakeServer) -> None:
    """vLLM refuses n above VLLM_MAX_N_SEQUENCES (16384): a larger sample is split, each
    further request's seed one up so that no completion repeats."""
    engine = ServedEngine(server.url, CONFIG)
    engine.max_n = 2
    sampling = {"temperature": 0.8, "max_tokens": 3, "ignore_eos": True, "n": 5, "seed": 7}
    got = engine.sample(["a", "b"], sampling)
    assert [len(runs) for runs in got] == [5, 5]
    sent = sorted((b["prompt"], b["n"], b["seed"]) for b in server.bodies)
    assert sent == [("a", 1, 9), ("a", 2, 7), ("a", 2, 8), ("b", 1, 9), ("b", 2, 7), ("b", 2, 8)]


def test_split_n_keeps_the_count_and_moves_the_seed() -> None:
    assert protocol.split_n({"n": 5}, 2) == [{"n": 2}, {"n": 2}, {"n": 1}]
    assert protocol.split_n({"n": 4, "seed": 1}, 2) == [{"n": 2, "seed": 1}, {"n": 2, "seed": 2}]
    assert protocol.split_n({"temperature": 1.0}, 16384) == [{"temperature": 1.0, "n": 1}]
    assert protocol.split_n({"n": 16384}) == [{"n": 16384}]


def test_sample_with_too_few_completions_is_an_engine_error(server: FakeServer) -> None:
    engine = ServedEngine(server.url, CONFIG)
    original = engine._get_json

    def one_lost(path: str, body: Any = None) -> Any:
        answer = original(path, body)
        answer["choices"].pop()
        return answer

    engine._get_json = one_lost  # type: ignore[method-assign]
    with pytest.raises(EngineError, match="expected 2 completions with token_ids, got 1"):
        engine.sample(["a"], {"temperature": 0.8, "max_tokens": 2, "n": 2})


def test_served_engines_implement_the_engine_boundary(servers: Any) -> None:
    base, spec = servers(speculating=False), servers()
    pool = ServedPool(base.url, spec.url, KEY)
    assert isinstance(pool, EngineSource)
    assert pool.device.kind == "served" and pool.starts == 0 and pool.max_engines == 2
    engine = pool.acquire(CONFIG)
    assert isinstance(engine, EngineBackend)
    assert engine.pid is None and engine.alive
    assert engine.counters() == Counters(0, 0, 0, (0, 0))


def test_the_speculative_engine_tells_k_from_the_servers_counters(servers: Any) -> None:
    base, spec = servers(speculating=False), servers()
    pool = ServedPool(base.url, spec.url, KEY)
    engine = pool.acquire(CONFIG)
    assert engine.info["method"] == "served"
    assert engine.info["num_speculative_tokens"] == 2  # positions 0 and 1 on /metrics
    baseline = pool.acquire(BASE_CONFIG)
    assert "method" not in baseline.info and "num_speculative_tokens" not in baseline.info


def test_a_closed_engine_can_go_on_with_new_connections(server: FakeServer) -> None:
    engine = ServedEngine(server.url, CONFIG)
    engine.generate_round(["a"], SAMPLING)
    before = {port for _, port in server.connections}
    engine.close()
    engine.generate_round(["a"], SAMPLING)  # a new client, new connections
    assert {port for _, port in server.connections} - before


def test_api_key_from_environment_and_never_printed(
    servers: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = servers(api_key="s3cret")
    monkeypatch.delenv("SPECDECODE_API_KEY", raising=False)
    with pytest.raises(EngineError, match=r"HTTP 401 \(set the API key in \$SPECDECODE_API_KEY\)"):
        ServedEngine(server.url, CONFIG, KEY)
    with pytest.raises(EngineError, match=r"HTTP 401 \(no API key: give the environment var"):
        ServedEngine(server.url, CONFIG)
    monkeypatch.setenv("SPECDECODE_API_KEY", "s3cret")
    engine = ServedEngine(server.url, CONFIG, KEY)
    engine.generate_round(["a"], SAMPLING)
    assert server.keys_seen()[-1] == "Bearer s3cret"


def test_a_401_that_echoes_the_key_is_redacted(
    servers: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = servers(api_key="the-right-key")
    monkeypatch.setenv("SPECDECODE_API_KEY", "a-wrong-s3cret")
    with pytest.raises(EngineError, match="HTTP 401") as info:
        ServedEngine(server.url, CONFIG, KEY)
    assert server.keys_seen() == ["Bearer a-wrong-s3cret"]  # the body echoed this header
    assert "a-wrong-s3cret" not in str(info.value)
    assert "Bearer ***" in str(info.value)


def test_a_redirect_to_another_origin_does_not_carry_the_key(
    servers: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPECDECODE_API_KEY", "s3cret")
    elsewhere = servers()  # another port: another origin
    server = servers(redirects={"/v1/models": elsewhere.url + "/v1/models"})
    engine = ServedEngine(server.url, CONFIG, KEY)
    assert engine.model == "tiny"  # the redirect was followed ...
    assert server.seen[0] == ("/v1/models", "Bearer s3cret")
    assert elsewhere.seen == [("/v1/models", None)]  # ... without the key


def test_a_redirect_within_the_origin_keeps_the_key(
    servers: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPECDECODE_API_KEY", "s3cret")
    server = servers(redirects={"/v1/models": "/v1/models/"})
    ServedEngine(server.url, CONFIG, KEY)
    assert server.seen[:2] == [("/v1/models", "Bearer s3cret"), ("/v1/models/", "Bearer s3cret")]


def test_unreachable_server_is_a_clear_error() -> None:
    with pytest.raises(EngineError, match="cannot connect"):
        ServedEngine("http://127.0.0.1:9", CONFIG)


def test_the_timeout_bounds_the_first_request(servers: Any) -> None:
    slow = servers(delay=30)
    with pytest.raises(EngineError, match=r"/v1/models: no answer within 0\.2 s \(raise "):
        ServedEngine(slow.url, CONFIG, timeout=0.2)


def test_the_pool_passes_its_timeout_and_a_tests_own_to_the_first_request(
    servers: Any,
) -> None:
    base, spec = servers(speculating=False, delay=30), servers(delay=30)
    with pytest.raises(EngineError, match=r"no answer within 0\.3 s"):
        ServedPool(base.url, spec.url, KEY, timeout=0.3).acquire(BASE_CONFIG)
    pool = ServedPool(base.url, spec.url, KEY, timeout=900)
    with pytest.raises(EngineError, match=r"no answer within 0\.25 s"):
        pool.acquire(BASE_CONFIG, timeout=0.25)


def test_the_pool_records_both_servers_and_their_models(servers: Any) -> None:
    base, spec = servers(speculating=False), servers()
    pool = ServedPool(base.url + "/", spec.url, KEY, timeout=5)
    engine = pool.acquire(CONFIG)
    assert engine.role == "speculative" and engine.url == spec.url and engine.timeout == 5
    assert pool.acquire(BASE_CONFIG).role == "baseline"
    assert engine.info["served"] == {
        "baseline": {"url": base.url, "model": "tiny"},
        "speculative": {"url": spec.url, "model": "tiny"},
    }


def test_servers_of_different_models_are_refused(servers: Any) -> None:
    base, spec = servers(model="tiny", speculating=False), servers(model="other")
    pool = ServedPool(base.url, spec.url, KEY)
    with pytest.raises(ConfigError, match="serve different models") as info:
        pool.acquire(BASE_CONFIG)
    for fact in (base.url, spec.url, "'tiny'", "'other'"):
        assert fact in str(info.value)


def test_a_different_served_name_for_the_same_model_is_accepted(servers: Any) -> None:
    base = servers(model="tiny", root="/models/tiny", speculating=False)
    spec = servers(model="tiny-eagle", root="/models/tiny")
    engine = ServedPool(base.url, spec.url, KEY).acquire(CONFIG)
    assert engine.info["served"]["speculative"] == {
        "url": spec.url, "model": "tiny-eagle", "root": "/models/tiny"
    }  # fmt: skip


def test_a_baseline_server_that_speculates_is_refused(server: FakeServer) -> None:
    pool = ServedPool(server.url, server.url, KEY)
    with pytest.raises(ConfigError, match="--specdecode-baseline-url .* speculates") as info:
        pool.acquire(BASE_CONFIG)
    assert "both options give the same URL" in str(info.value)


def test_a_speculative_server_that_does_not_speculate_is_refused(servers: Any) -> None:
    base, spec = servers(speculating=False), servers(speculating=False)
    pool = ServedPool(base.url, spec.url, KEY)
    with pytest.raises(ConfigError, match="--specdecode-speculative-url .* does not speculate"):
        pool.acquire(BASE_CONFIG)


def test_a_baseline_whose_drafts_move_during_a_round_is_refused(servers: Any) -> None:
    base, spec = servers(speculating=False), servers()
    engine = ServedPool(base.url, spec.url, KEY).acquire(BASE_CONFIG)
    base.speculating = True  # e.g. the load balancer now sends us to a speculating replica
    with pytest.raises(ConfigError, match="vllm:spec_decode_num_drafts went from 0 to 4"):
        engine.generate_round(["a"], SAMPLING)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("ftp://host:8000", "expected the http:// or https:// URL"),
        ("127.0.0.1:8000", "expected the http:// or https:// URL"),
        ("http://", "expected the http:// or https:// URL"),
        ("http://host:port", "not a valid URL"),
        ("http://host:8000/v1", "without /v1"),
        ("http://host:8000/?x=1", "without ?query"),
        ("http://user:s3cret@host:8000", "credentials in the URL"),
    ],
)
def test_url_settings_are_checked(value: str, message: str) -> None:
    with pytest.raises(ConfigError, match="--specdecode-baseline-url: ") as info:
        BY_NAME["baseline_url"].parse(value, "--specdecode-baseline-url")
    assert message in str(info.value)
    assert "s3cret" not in str(info.value)


def test_url_settings_keep_a_good_url() -> None:
    parse = BY_NAME["speculative_url"].parse
    assert parse(" https://spec.example:8443/ ", "x") == "https://spec.example:8443"
    assert parse("http://10.0.0.2/vllm", "x") == "http://10.0.0.2/vllm"  # behind a proxy


def test_a_bad_url_is_a_usage_error_at_start_up(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_a(): pass")
    result = pytester.runpytest_inprocess(
        "--specdecode-baseline-url", "ftp://127.0.0.1:1",
        "--specdecode-speculative-url", "http://127.0.0.1:2",
    )  # fmt: skip
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--specdecode-baseline-url: expected the http:// or https://*"])


def test_a_bad_url_in_the_ini_file_names_the_ini_key(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nspecdecode_speculative_url = 127.0.0.1:8000\n")
    pytester.makepyfile("def test_a(): pass")
    result = pytester.runpytest_inprocess("--specdecode-baseline-url", "http://127.0.0.1:1")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*ini specdecode_speculative_url: expected the http*"])


SUITE = """
import pytest

@pytest.mark.specdecode("served")
def test_served(specdecode):
    r = specdecode.run(["a", "b"], max_tokens=8, concurrency=2)
    assert r.acceptance_rate == 0.75
    assert r.mean_acceptance_length == 2.5
    assert r.match_rate == 1.0
"""


def run_on(pytester: pytest.Pytester, base: Any, spec: Any, *args: str) -> pytest.RunResult:
    """The :data:`SUITE` run in process on two (fake) servers, with ``args`` after the URLs."""
    pytester.makepyfile(test_served=SUITE)
    return pytester.runpytest_inprocess(
        "--specdecode-baseline-url", base.url, "--specdecode-speculative-url", spec.url, *args
    )


def test_plugin_measures_two_servers(pytester: pytest.Pytester, servers: Any) -> None:
    base, spec = servers(speculating=False), servers()
    result = run_on(
        pytester, base, spec, "--specdecode-trials", "2", "--specdecode-report", "r.json"
    )
    result.assert_outcomes(passed=1)
    report = json.loads((pytester.path / "r.json").read_text())
    assert report["results"][0]["memory"].startswith("served")
    assert report["session"]["engine_starts"] == 0
    assert report["environment"]["served"] == {
        "baseline": {"url": base.url, "model": "tiny"},
        "speculative": {"url": spec.url, "model": "tiny"},
    }


def test_a_served_run_says_it_has_no_phase_figures(
    pytester: pytest.Pytester, servers: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Served engines cannot be looked into: the summary, the step summary, the checklist and
    the page say so where the phase figures would be, and the report holds none."""
    pytest.importorskip("matplotlib.pyplot")
    base, spec = servers(speculating=False), servers()
    summary = pytester.path / "step-summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    result = run_on(
        pytester, base, spec, "--specdecode-trials", "2", "--specdecode-report", "r.json",
        "--specdecode-html", "r.html",
    )  # fmt: skip
    result.assert_outcomes(passed=1)
    out = result.stdout.str().splitlines()
    assert "phases: no phase figures: served engine" in out
    assert "Phases: no phase figures: served engine." in summary.read_text().splitlines()
    report = json.loads((pytester.path / "r.json").read_text())
    assert report["results"][0].get("phases") is None
    (checklist,) = report["checklist"]
    (draft,) = [x for x in checklist["lines"] if x["question"] == "choice of draft"]
    assert draft == {"question": "choice of draft", "answer": "unknown",
                     "figure": "no phase figures: served engine"}  # fmt: skip
    assert "no phase figures: served engine" in (pytester.path / "r.html").read_text()


def test_a_speculative_server_that_loses_cache_hits_is_flagged(
    pytester: pytest.Pytester, servers: Any
) -> None:
    """Both servers' prefix-cache hit rates from their counters, in the result, the summary
    table and the exports; a speculative side whose hit rate is clearly below the baseline's
    on the same requests gets a warning, a note and the checklist's answer."""
    base = servers(speculating=False, cache=(100, 90))
    spec = servers(cache=(100, 30))
    result = run_on(
        pytester, base, spec, "--specdecode-trials", "3", "--specdecode-report", "r.json"
    )
    result.assert_outcomes(passed=1)
    out = result.stdout.str()
    assert "WARNING: the speculative engine's prefix-cache hit rate is clearly below" in out
    assert "base cache hit" in out and "spec cache hit" in out
    report = json.loads((pytester.path / "r.json").read_text())
    entry = report["results"][0]
    assert entry["baseline"]["prefix_cache_hit_rate"] == pytest.approx(0.9)
    assert entry["speculative"]["prefix_cache_hit_rate"] == pytest.approx(0.3)
    assert entry["baseline"]["prefix_cache_queries"] == 3 * 2 * 100  # 3 rounds of 2 requests
    assert entry["prefix_cache_gap"] == pytest.approx(-0.6)
    assert entry["prefix_cache_gap_ci"] == pytest.approx([-0.6, -0.6])  # every round alike
    assert entry["notes"]["prefix_cache"] == "hit rate 0.30 against 0.90"
    (checklist,) = report["checklist"]
    (line,) = [x for x in checklist["lines"] if x["question"] == "prefix cache kept"]
    assert line["answer"] == "no"
    assert "0.90 baseline, 0.30 speculative" in line["figure"]
    assert "speculation costs the prefix cache" in checklist["summary"]
    from pytest_specdecode.baselines.report import Report
    from pytest_specdecode.reporting.export import bmf

    (measures,) = bmf(Report.from_dict(report, "r.json")).values()
    assert measures["speculative-prefix-cache-hit-rate"] == {"value": pytest.approx(0.3)}
    assert measures["prefix-cache-gap"]["upper_value"] == pytest.approx(-0.6)


def test_servers_that_keep_the_cache_alike_are_not_flagged(
    pytester: pytest.Pytester, servers: Any
) -> None:
    base, spec = servers(speculating=False, cache=(100, 90)), servers(cache=(100, 88))
    result = run_on(
        pytester, base, spec, "--specdecode-trials", "3", "--specdecode-report", "r.json"
    )
    result.assert_outcomes(passed=1)
    assert "prefix-cache hit rate is clearly below" not in result.stdout.str()
    report = json.loads((pytester.path / "r.json").read_text())
    assert "prefix_cache" not in report["results"][0]["notes"]
    (checklist,) = report["checklist"]
    (line,) = [x for x in checklist["lines"] if x["question"] == "prefix cache kept"]
    assert line["answer"] == "yes"


def test_plugin_refuses_a_baseline_url_that_speculates(
    pytester: pytest.Pytester, server: FakeServer
) -> None:
    pytester.makepyfile(test_served=SUITE)
    result = pytester.runpytest_inprocess(
        "--specdecode-baseline-url", server.url, "--specdecode-speculative-url", server.url,
        "--specdecode-trials", "2",
    )  # fmt: skip
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*--specdecode-baseline-url http://127.0.0.1:* speculates*"])
    assert server.requests == 0  # refused before anything was measured


def test_plugin_timeout_bounds_a_served_engines_first_request(
    pytester: pytest.Pytester, servers: Any
) -> None:
    base, spec = servers(speculating=False, delay=30), servers(delay=30)
    result = run_on(pytester, base, spec, "--specdecode-trials", "2", "--specdecode-timeout", "0.5")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*/v1/models: no answer within 0.5 s*"])


def test_urls_go_together(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_a(): pass")
    result = pytester.runpytest_inprocess("--specdecode-baseline-url", "http://127.0.0.1:1")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*go together*"])


def test_bench_on_two_servers_reports_the_servers_model_and_k(servers: Any) -> None:
    """A served Bench needs neither a target nor a speculative config: the servers have them;
    it owns its connections and closes them when its block ends."""
    from pytest_specdecode import Bench

    base, spec = servers(speculating=False), servers()
    with Bench(baseline_url=base.url, speculative_url=spec.url, progress=None, trials=2) as bench:
        result = bench.run(["a", "b"], max_tokens=8)
        engine = bench.engine("speculative")
    assert result.target == "tiny" and result.method == "served"
    assert result.num_speculative_tokens == engine.info["num_speculative_tokens"] > 0
    assert result.trials == 2 and result.num_drafts > 0


def test_a_conversation_on_two_servers_sends_token_ids_with_the_baselines_answers(
    servers: Any,
) -> None:
    """Turns are rendered here (the tokenizer named), sent as token ids (the completions API
    adds no special token to them), each turn carrying the baseline server's answer."""
    from transformers import AutoTokenizer

    from pytest_specdecode import Bench
    from pytest_specdecode.tiny import WEIGHTS_DIR

    folder = WEIGHTS_DIR / "target"
    base, spec = servers(speculating=False, cache=(10, 5)), servers(cache=(10, 5))
    with Bench(baseline_url=base.url, speculative_url=spec.url, progress=None, trials=2) as bench:
        first, second = bench.conversation([["hi", "more"]], max_tokens=4, tokenizer=folder)
    assert second.notes["first-send cache hit"] == "0.50 baseline, 0.50 speculative"
    prompts = [b["prompt"] for b in base.bodies]
    assert all(isinstance(p, list) and all(isinstance(t, int) for t in p) for p in prompts)
    assert [b["prompt"] for b in spec.bodies] == prompts  # the same history on both sides
    text = AutoTokenizer.from_pretrained(str(folder)).decode(prompts[-1])
    answer = first.baseline.texts[0]
    assert answer and text == f"user: hi\nassistant: {answer}\nuser: more\nassistant:"


def test_a_load_round_sends_each_request_at_its_arrival_and_times_it_from_there(
    server: FakeServer,
) -> None:
    engine = ServedEngine(server.url, CONFIG)
    arrivals = [0.0, 0.0, 0.2, 0.4]
    done = engine.load_round(["a", "b", "c", "d"], SAMPLING, arrivals)
    assert isinstance(done, LoadRound) and done.other_requests == 0
    assert [q.arrival for q in done.requests] == arrivals
    for q in done.requests:
        assert q.sent >= q.arrival  # a thread sleeps until the arrival
        assert q.output_tokens == 8 and len(q.itl) == 3  # 4 chunks of 2 tokens
        assert q.ttft is not None and q.sent - q.arrival <= q.ttft <= q.e2e
        assert q.e2e == pytest.approx(q.ttft + sum(q.itl))
        assert q.arrival + q.e2e <= done.elapsed
    assert sorted(b["prompt"] for b in server.bodies) == ["a", "b", "c", "d"]
    assert all(b["stream"] and b["max_tokens"] == 8 for b in server.bodies)
    for i, (method, port) in enumerate(server.connections):
        if method == "POST":  # connections opened before the clock started
            assert ("GET", port) in server.connections[:i]


def test_a_load_round_counts_other_traffic_and_fails_on_a_stream_error(servers: Any) -> None:
    server = servers(strangers=1)
    engine = ServedEngine(server.url, CONFIG)
    assert engine.load_round(["a", "b"], SAMPLING, [0.0, 0.01]).other_requests == 2
    with pytest.raises(EngineError, match="/v1/completions: .*boom"):
        engine.load_round(["a", "fail"], SAMPLING, [0.0, 0.0])
    with pytest.raises(ValueError, match="2 prompts but 1 arrival times"):
        engine.load_round(["a", "b"], SAMPLING, [0.0])


def test_a_baseline_whose_drafts_move_during_a_load_round_is_refused(servers: Any) -> None:
    base, spec = servers(speculating=False), servers()
    engine = ServedPool(base.url, spec.url, KEY).acquire(BASE_CONFIG)
    base.speculating = True
    with pytest.raises(ConfigError, match="vllm:spec_decode_num_drafts went from 0 to 4"):
        engine.load_round(["a"], SAMPLING, [0.0])
