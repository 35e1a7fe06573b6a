"""Served deployments against a stand-in OpenAI-compatible server on loopback (no vLLM).

The same flow against two real ``vllm serve`` processes is in ``test_e2e_served.py``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from pytest_specdecode.engine_config import EngineConfig
from pytest_specdecode.errors import EngineError
from pytest_specdecode.served import ServedEngine, parse_metrics

METRICS = """# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
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
# TYPE vllm:request_success_total counter
vllm:request_success_total{{engine="0",finished_reason="length",model_name="m"}} {requests}
vllm:request_success_total{{engine="0",finished_reason="stop",model_name="m"}} 0
"""


def metrics_text(**values: int) -> str:
    defaults = {"drafts": 0, "draft_tokens": 0, "accepted": 0, "pos0": 0, "pos1": 0, "requests": 0}
    return METRICS.format(**{**defaults, **values})


def test_parse_metrics_sums_labels_and_orders_positions() -> None:
    counters = parse_metrics(
        metrics_text(drafts=10, draft_tokens=20, accepted=15, pos0=9, pos1=6, requests=4)
    )
    assert counters == {
        "num_drafts": 10,
        "num_draft_tokens": 20,
        "num_accepted_tokens": 15,
        "accepted_per_position": [9, 6],
        "requests": 4,
    }


class FakeServer:
    """Streams two tokens per chunk; counts requests; optionally requires an API key."""

    def __init__(self, api_key: str | None = None) -> None:
        self.requests = 0
        self.api_key = api_key
        self.seen_keys: list[str | None] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, code: int, body: bytes, ctype: str = "application/json") -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                if self.path == "/v1/models":
                    self._send(200, json.dumps({"data": [{"id": "tiny"}]}).encode())
                elif self.path == "/version":
                    self._send(200, b'{"version": "0.32.0"}')
                elif self.path == "/metrics":
                    n = server.requests
                    text = metrics_text(drafts=n * 4, draft_tokens=n * 8, accepted=n * 6,
                                        pos0=n * 4, pos1=n * 2, requests=n)  # fmt: skip
                    self._send(200, text.encode(), "text/plain")

            def do_POST(self) -> None:
                key = self.headers.get("Authorization")
                server.seen_keys.append(key)
                if server.api_key and key != f"Bearer {server.api_key}":
                    self._send(401, b'{"error": "bad key"}')
                    return
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                assert body["stream"] and body["return_token_ids"] and body["ignore_eos"]
                n = body["max_tokens"]
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                for i in range(0, n, 2):
                    chunk = {"choices": [{"text": "ab", "token_ids": [i, i + 1]}]}
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.write(b"data: [DONE]\n\n")
                server.requests += 1

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()


@pytest.fixture
def server() -> Iterator[FakeServer]:
    s = FakeServer()
    yield s
    s.close()


CONFIG = EngineConfig.create("tiny", {"method": "served"}, {})
SAMPLING = {"temperature": 0.0, "max_tokens": 8, "ignore_eos": True}


def test_generate_streams_concurrently_with_per_request_timing(server: FakeServer) -> None:
    engine = ServedEngine(server.url, CONFIG)
    assert engine.model == "tiny" and engine.info["vllm_version"] == "0.32.0"
    out = engine.generate(["a", "b", "c"], SAMPLING, concurrency=2)
    assert len(out["requests"]) == 3
    request = out["requests"][0]
    assert request["token_ids"] == list(range(8)) and request["text"] == "ab" * 4
    assert request["ttft"] is not None and request["tpot"] is not None
    assert engine.other_traffic == 0
    assert engine.spec_counters()["num_drafts"] == 12


def test_other_traffic_is_detected(server: FakeServer) -> None:
    engine = ServedEngine(server.url, CONFIG)
    original = engine._metrics
    calls = {"n": 0}

    def metrics_with_a_stranger() -> dict[str, Any]:
        calls["n"] += 1
        counters = original()
        if calls["n"] >= 2:  # after our round: someone else's request finished too
            counters["requests"] += 1
        return counters

    engine._metrics = metrics_with_a_stranger  # type: ignore[method-assign]
    engine.generate(["a"], SAMPLING)
    assert engine.other_traffic == 1


def test_api_key_from_environment_and_never_printed(monkeypatch: pytest.MonkeyPatch) -> None:
    server = FakeServer(api_key="s3cret")
    try:
        monkeypatch.delenv("SPECDECODE_API_KEY", raising=False)
        engine = ServedEngine(server.url, CONFIG)
        with pytest.raises(
            EngineError, match="HTTP 401 \\(set the API key in \\$SPECDECODE_API_KEY\\)"
        ) as info:
            engine.generate(["a"], SAMPLING)
        assert "s3cret" not in str(info.value)
        monkeypatch.setenv("SPECDECODE_API_KEY", "s3cret")
        engine.generate(["a"], SAMPLING)
        assert server.seen_keys[-1] == "Bearer s3cret"
    finally:
        server.close()


def test_unreachable_server_is_a_clear_error() -> None:
    with pytest.raises(EngineError, match="cannot connect"):
        ServedEngine("http://127.0.0.1:9", CONFIG)


SUITE = """
import pytest

@pytest.mark.specdecode("served")
def test_served(specdecode):
    r = specdecode.run(["a", "b"], max_tokens=8, concurrency=2)
    assert r.acceptance_rate == 0.75
    assert r.mean_acceptance_length == 2.5
    assert r.match_rate == 1.0
"""


def test_plugin_measures_two_servers(pytester: pytest.Pytester) -> None:
    base, spec = FakeServer(), FakeServer()
    try:
        pytester.makepyfile(test_served=SUITE)
        result = pytester.runpytest_inprocess(
            "--specdecode-baseline-url", base.url, "--specdecode-speculative-url", spec.url,
            "--specdecode-trials", "2", "--specdecode-report", "r.json",
        )  # fmt: skip
        result.assert_outcomes(passed=1)
        report = json.loads((pytester.path / "r.json").read_text())
        assert report["results"][0]["memory"].startswith("served")
        assert report["session"]["engine_starts"] == 0
    finally:
        base.close()
        spec.close()


def test_urls_go_together(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_a(): pass")
    result = pytester.runpytest_inprocess("--specdecode-baseline-url", "http://127.0.0.1:1")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*go together*"])
