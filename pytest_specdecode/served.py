"""Measuring running vLLM servers (OpenAI-compatible) instead of starting engines.

Requests are streamed concurrently (``/v1/completions`` with ``stream``), so TTFT and TPOT are
per request; token ids come back with ``return_token_ids``. Acceptance comes from before/after
deltas of the server's Prometheus ``/metrics`` (``vllm:spec_decode_*_total``), parsed with
``prometheus_client``'s text parser. Other traffic on a server during a round is detected from
its request counter and reported.

The API key is read from an environment variable (``SPECDECODE_API_KEY`` unless configured) and
never printed.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from .engine import Placement
from .engine_config import EngineConfig
from .errors import ConfigError, EngineError

API_KEY_ENV = "SPECDECODE_API_KEY"

_SPEC = {
    "vllm:spec_decode_num_drafts": "num_drafts",
    "vllm:spec_decode_num_draft_tokens": "num_draft_tokens",
    "vllm:spec_decode_num_accepted_tokens": "num_accepted_tokens",
}
_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"
_REQUESTS = "vllm:request_success"


def parse_metrics(text: str) -> dict[str, Any]:
    """Speculative-decoding counters and the finished-request count from a /metrics page."""
    from prometheus_client.parser import text_string_to_metric_families

    counters: dict[str, Any] = {v: 0 for v in _SPEC.values()}
    per_pos: dict[int, int] = {}
    requests = 0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if not sample.name.endswith("_total"):
                continue  # skip _created samples
            name = sample.name.removesuffix("_total")
            if name == _PER_POS:  # before num_accepted_tokens: it is a prefix of this name
                position = int(sample.labels.get("position", 0))
                per_pos[position] = per_pos.get(position, 0) + int(sample.value)
            elif name in _SPEC:
                counters[_SPEC[name]] += int(sample.value)
            elif name == _REQUESTS:
                requests += int(sample.value)
    counters["accepted_per_position"] = [per_pos[i] for i in sorted(per_pos)]
    counters["requests"] = requests
    return counters


@dataclass
class ServedEngine:
    """A running OpenAI-compatible vLLM server, driven like an engine worker."""

    url: str
    config: EngineConfig
    api_key_env: str = API_KEY_ENV
    timeout: float = 900.0
    model: str | None = None
    other_traffic: int = 0
    placement: Placement = field(
        default_factory=lambda: Placement({}, "served (memory set by the server)", {})
    )
    info: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.url = self.url.rstrip("/")
        if self.model is None:
            models = self._get_json("/v1/models")
            try:
                self.model = str(models["data"][0]["id"])
            except (KeyError, IndexError, TypeError):
                raise EngineError(f"{self.url}/v1/models lists no model") from None
        self.info = {"served_url": self.url, "served_model": self.model}
        try:
            self.info["vllm_version"] = str(self._get_json("/version").get("version"))
        except (EngineError, ValueError, AttributeError):
            pass

    # -- HTTP --------------------------------------------------------------------------
    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json"}
        key = os.environ.get(self.api_key_env)
        if key:
            headers["Authorization"] = f"Bearer {key}"
        return headers

    def _open(self, path: str, body: dict[str, Any] | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, headers=self._headers())
        try:
            return urllib.request.urlopen(request, timeout=self.timeout)
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")[:500]
            hint = f" (set the API key in ${self.api_key_env})" if exc.code in (401, 403) else ""
            raise EngineError(f"{self.url}{path}: HTTP {exc.code}{hint}: {detail}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise EngineError(f"{self.url}{path}: cannot connect ({exc})") from None

    def _get_json(self, path: str) -> Any:
        with self._open(path) as response:
            return json.loads(response.read())

    # -- what run_paired uses ------------------------------------------------------------
    @property
    def alive(self) -> bool:
        return True

    def _request(self, prompt: Any, sampling: dict[str, Any]) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "prompt": prompt,
            "stream": True,
            "stream_options": {"include_usage": True},
            "return_token_ids": True,
            **sampling,
        }
        start = time.perf_counter()
        first: float | None = None
        token_ids: list[int] = []
        text: list[str] = []
        with self._open("/v1/completions", body) as response:
            for raw in response:
                line = raw.decode().strip()
                if not line.startswith("data:"):
                    continue
                payload = line[5:].strip()
                if payload == "[DONE]":
                    break
                chunk = json.loads(payload)
                for choice in chunk.get("choices") or []:
                    ids = choice.get("token_ids") or []
                    if (ids or choice.get("text")) and first is None:
                        first = time.perf_counter()
                    token_ids.extend(ids)
                    text.append(choice.get("text") or "")
        end = time.perf_counter()
        n = len(token_ids)
        return {
            "token_ids": token_ids,
            "text": "".join(text),
            "ttft": None if first is None else first - start,
            "tpot": (end - first) / (n - 1) if first is not None and n > 1 else None,
        }

    def generate(
        self, prompts: Sequence[Any], sampling: dict[str, Any], concurrency: int | None = None
    ) -> dict[str, Any]:
        before = self._metrics()["requests"]
        per_prompt = sampling.get("structured_outputs")
        bodies = []
        for i, prompt in enumerate(prompts):
            body = {k: v for k, v in sampling.items() if k != "structured_outputs"}
            structured = per_prompt[i] if isinstance(per_prompt, list) else per_prompt
            if structured is not None:
                body["structured_outputs"] = structured
            bodies.append((prompt, body))
        start = time.perf_counter()
        with ThreadPoolExecutor(max_workers=concurrency or len(prompts)) as pool:
            requests = list(pool.map(lambda pb: self._request(*pb), bodies))
        elapsed = time.perf_counter() - start
        # The server counts a request as finished a moment after its last chunk: wait for
        # ours to show up before reading what else it served.
        expected = before + len(prompts)
        after = self._metrics()["requests"]
        deadline = time.monotonic() + 5.0
        while after < expected and time.monotonic() < deadline:
            time.sleep(0.05)
            after = self._metrics()["requests"]
        if after > expected:
            self.other_traffic += after - expected
        return {"elapsed": elapsed, "requests": requests}

    def _metrics(self) -> dict[str, Any]:
        with self._open("/metrics") as response:
            return parse_metrics(response.read().decode())

    def spec_counters(self) -> dict[str, Any]:
        return self._metrics()

    def metrics(self) -> list[dict[str, Any]]:
        from prometheus_client.parser import text_string_to_metric_families

        with self._open("/metrics") as response:
            text = response.read().decode()
        return [
            {"type": f.type, "name": s.name, "labels": dict(s.labels), "value": s.value}
            for f in text_string_to_metric_families(text)
            for s in f.samples
            if s.name.startswith("vllm:")
        ]

    def close(self) -> None:
        """Nothing to stop: the server is not ours."""


class ServedPool:
    """Stands in for :class:`~pytest_specdecode.engine.EnginePool`: two fixed servers."""

    max_engines = 2
    starts = 0
    start_seconds = 0.0

    def __init__(self, baseline_url: str, speculative_url: str, api_key_env: str) -> None:
        for name, url in (("baseline", baseline_url), ("speculative", speculative_url)):
            if not url.startswith(("http://", "https://")):
                raise ConfigError(f"--specdecode-{name}-url: expected http(s)://..., got {url!r}")
        self.urls = {"baseline": baseline_url, "speculative": speculative_url}
        self.api_key_env = api_key_env
        self._engines: dict[str, ServedEngine] = {}

    def acquire(
        self,
        config: EngineConfig,
        *,
        keep: Sequence[EngineConfig] = (),
        timeout: float | None = None,
    ) -> ServedEngine:
        which = "baseline" if config.speculative_json is None else "speculative"
        engine = self._engines.get(which)
        if engine is None:
            engine = ServedEngine(self.urls[which], config, self.api_key_env)
            self._engines[which] = engine
        engine.config = config
        if timeout:
            engine.timeout = timeout
        return engine

    def close(self) -> None:
        self._engines.clear()

    def __len__(self) -> int:
        return len(self._engines)
