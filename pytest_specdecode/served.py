"""Measuring running vLLM servers (OpenAI-compatible) instead of starting engines.

Requests are streamed concurrently (``/v1/completions`` with ``stream``), so TTFT and TPOT are
per request; token ids come back with ``return_token_ids``. Acceptance comes from before/after
deltas of the server's Prometheus ``/metrics`` (``vllm:spec_decode_*_total``), parsed with
``prometheus_client``'s text parser. Other traffic on a server during a round is detected from
its request counter and reported.

Before the first measurement the pool checks that it measures what it claims: both servers
serve the same model (``/v1/models``), the baseline server does not speculate and the
speculative one does (``/metrics``).

The API key is read from an environment variable (``SPECDECODE_API_KEY`` unless configured),
sent only to the server's own origin (a redirect elsewhere loses it) and replaced with ``***``
in every error message.
"""

from __future__ import annotations

import http.client
import json
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import IO, Any

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
_TIMEOUT_FIX = "raise --specdecode-timeout or the marker's timeout="


def parse_metrics(text: str) -> dict[str, Any]:
    """Speculative-decoding counters and the finished-request count from a /metrics page.

    ``speculating`` says whether the page has speculative-decoding counters at all: vLLM
    registers them only on a server started with a speculative config (even before any draft).
    """
    from prometheus_client.parser import text_string_to_metric_families

    counters: dict[str, Any] = {v: 0 for v in _SPEC.values()}
    per_pos: dict[int, int] = {}
    requests = 0
    speculating = False
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
                speculating = True
            elif name == _REQUESTS:
                requests += int(sample.value)
    counters["accepted_per_position"] = [per_pos[i] for i in sorted(per_pos)]
    counters["requests"] = requests
    counters["speculating"] = speculating
    return counters


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urllib.parse.urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port or {"http": 80, "https": 443}.get(scheme)
    except ValueError:
        port = None
    return scheme, (parts.hostname or "").lower(), port


class _SameOriginAuth(urllib.request.HTTPRedirectHandler):
    """Follows redirects, but drops the ``Authorization`` header when one leaves the origin
    (scheme, host and port) the request was made to."""

    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: IO[bytes],
        code: int,
        msg: str,
        headers: http.client.HTTPMessage,
        newurl: str,
    ) -> urllib.request.Request | None:
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None and _origin(req.full_url) != _origin(new.full_url):
            new.remove_header("Authorization")
        return new


_OPENER = urllib.request.build_opener(_SameOriginAuth)


@dataclass
class ServedEngine:
    """A running OpenAI-compatible vLLM server, driven like an engine worker.

    ``role`` (``"baseline"`` or ``"speculative"``) only names the server in messages; the
    baseline one must not speculate (checked by the pool, and after every round).
    """

    url: str
    config: EngineConfig
    api_key_env: str = API_KEY_ENV
    timeout: float = 900.0
    model: str | None = None
    role: str = "speculative"
    other_traffic: int = 0
    placement: Placement = field(
        default_factory=lambda: Placement({}, "served (memory set by the server)", {})
    )
    info: dict[str, Any] = field(default_factory=dict)
    #: the model's path or name behind the id (``root`` in ``/v1/models``), where listed
    root: str | None = None

    def __post_init__(self) -> None:
        self.url = self.url.rstrip("/")
        if self.model is None:
            models = self._get_json("/v1/models")
            try:
                entry = models["data"][0]
                self.model = str(entry["id"])
            except (KeyError, IndexError, TypeError):
                raise EngineError(self._redact(f"{self.url}/v1/models lists no model")) from None
            if isinstance(entry, dict) and entry.get("root"):
                self.root = str(entry["root"])
        self.info = {"served_url": self.url, "served_model": self.model}
        try:
            self.info["vllm_version"] = str(self._get_json("/version").get("version"))
        except (EngineError, AttributeError):
            pass

    @property
    def option(self) -> str:
        return f"--specdecode-{self.role}-url"

    # -- HTTP --------------------------------------------------------------------------
    def _key(self) -> str | None:
        return os.environ.get(self.api_key_env) or None

    def _redact(self, text: str) -> str:
        """``text`` with the API key (plain or URL-quoted) replaced by ``***``."""
        key = self._key()
        if key:
            for form in {key, urllib.parse.quote(key), urllib.parse.quote_plus(key)}:
                text = text.replace(form, "***")
        return text

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json"}
        key = self._key()
        if key:
            headers["Authorization"] = f"Bearer {key}"
        return headers

    def _timed_out(self, path: str) -> EngineError:
        return EngineError(
            self._redact(f"{self.url}{path}: no answer within {self.timeout:g} s ({_TIMEOUT_FIX})")
        )

    @contextmanager
    def _errors(self, path: str) -> Iterator[None]:
        """Turn what a request and the reading of its answer may raise into an
        :class:`EngineError` that names the URL and never shows the API key."""
        try:
            yield
        except EngineError:
            raise
        except urllib.error.HTTPError as exc:
            try:
                detail = exc.read().decode(errors="replace")[:500]
            except (OSError, http.client.HTTPException):
                detail = ""
            hint = f" (set the API key in ${self.api_key_env})" if exc.code in (401, 403) else ""
            raise EngineError(
                self._redact(f"{self.url}{path}: HTTP {exc.code}{hint}: {detail}")
            ) from None
        except TimeoutError:
            raise self._timed_out(path) from None
        except urllib.error.URLError as exc:
            if isinstance(exc.reason, TimeoutError):
                raise self._timed_out(path) from None
            raise EngineError(
                self._redact(f"{self.url}{path}: cannot connect ({exc.reason})")
            ) from None
        except (OSError, http.client.HTTPException) as exc:
            raise EngineError(
                self._redact(f"{self.url}{path}: connection failed ({exc!r})")
            ) from None
        except (ValueError, UnicodeDecodeError) as exc:
            raise EngineError(
                self._redact(f"{self.url}{path}: unexpected answer ({exc})")
            ) from None

    def _open(self, path: str, body: dict[str, Any] | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, headers=self._headers())
        return _OPENER.open(request, timeout=self.timeout)

    def _get(self, path: str) -> bytes:
        with self._errors(path), self._open(path) as response:
            data: bytes = response.read()
            return data

    def _get_json(self, path: str) -> Any:
        data = self._get(path)
        with self._errors(path):
            return json.loads(data)

    # -- what run_paired uses ------------------------------------------------------------
    @property
    def alive(self) -> bool:
        return True

    def _request(self, prompt: Any, sampling: dict[str, Any]) -> dict[str, Any]:
        path = "/v1/completions"
        body: dict[str, Any] = {
            "model": self.model,
            "prompt": prompt,
            "stream": True,
            "stream_options": {"include_usage": True},
            "return_token_ids": True,
            **sampling,
        }
        start = time.perf_counter()
        deadline = start + self.timeout
        first: float | None = None
        token_ids: list[int] = []
        text: list[str] = []
        with self._errors(path), self._open(path, body) as response:
            for raw in response:
                if time.perf_counter() > deadline:  # a server that trickles: bound the whole call
                    raise self._timed_out(path)
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
        counters = self._metrics()
        before, drafts = counters["requests"], counters["num_drafts"]
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
        counters = self._metrics()
        deadline = time.monotonic() + 5.0
        while counters["requests"] < expected and time.monotonic() < deadline:
            time.sleep(0.05)
            counters = self._metrics()
        if counters["requests"] > expected:
            self.other_traffic += counters["requests"] - expected
        if self.role == "baseline" and counters["num_drafts"] > drafts:
            raise ConfigError(
                self._redact(
                    f"{self.option} {self.url} speculates: its vllm:spec_decode_num_drafts "
                    f"went from {drafts} to {counters['num_drafts']} during a baseline round. "
                    "Point it at a server of the same model started without "
                    "--speculative-config."
                )
            )
        return {"elapsed": elapsed, "requests": requests}

    def _metrics(self) -> dict[str, Any]:
        data = self._get("/metrics")
        with self._errors("/metrics"):
            return parse_metrics(data.decode())

    def spec_counters(self) -> dict[str, Any]:
        return self._metrics()

    def metrics(self) -> list[dict[str, Any]]:
        from prometheus_client.parser import text_string_to_metric_families

        data = self._get("/metrics")
        with self._errors("/metrics"):
            return [
                {"type": f.type, "name": s.name, "labels": dict(s.labels), "value": s.value}
                for f in text_string_to_metric_families(data.decode())
                for s in f.samples
                if s.name.startswith("vllm:")
            ]

    def describe(self) -> dict[str, Any]:
        """What the report records of this server: its URL and the model it serves."""
        described: dict[str, Any] = {"url": self.url, "model": self.model}
        if self.root and self.root != self.model:
            described["root"] = self.root
        return described

    def close(self) -> None:
        """Nothing to stop: the server is not ours."""


class ServedPool:
    """Stands in for :class:`~pytest_specdecode.engine.EnginePool`: two fixed servers.

    Both servers are contacted on first use and checked together (same model, only the
    speculative one speculates) before anything is measured. ``timeout`` bounds every request,
    the first ones included; a test's own timeout replaces it for that test.
    """

    max_engines = 2
    starts = 0
    start_seconds = 0.0

    def __init__(
        self, baseline_url: str, speculative_url: str, api_key_env: str, timeout: float = 900.0
    ) -> None:
        from .settings import BY_NAME

        self.urls = {
            role: BY_NAME[f"{role}_url"].parse(url, f"--specdecode-{role}-url")
            for role, url in (("baseline", baseline_url), ("speculative", speculative_url))
        }
        self.api_key_env = api_key_env
        self.timeout = timeout
        self._engines: dict[str, ServedEngine] = {}

    def acquire(
        self,
        config: EngineConfig,
        *,
        keep: Sequence[EngineConfig] = (),
        timeout: float | None = None,
    ) -> ServedEngine:
        which = "baseline" if config.speculative_json is None else "speculative"
        if not self._engines:
            self._engines = self._connect(config, timeout or self.timeout)
        engine = self._engines[which]
        engine.config = config
        engine.timeout = timeout or self.timeout
        return engine

    def _connect(self, config: EngineConfig, timeout: float) -> dict[str, ServedEngine]:
        """Contact both servers and check that they make a baseline/speculative pair."""
        engines = {
            role: ServedEngine(
                self.urls[role],
                config,
                self.api_key_env,
                timeout=timeout,
                role=role,
            )
            for role in ("baseline", "speculative")
        }
        base, spec = engines["baseline"], engines["speculative"]
        same = base.model == spec.model or (base.root is not None and base.root == spec.root)
        if not same:
            raise ConfigError(
                f"the two servers serve different models: --specdecode-baseline-url {base.url} "
                f"serves {base.model!r}, --specdecode-speculative-url {spec.url} serves "
                f"{spec.model!r}. Point both at servers of the same target model."
            )
        same_url = " (both options give the same URL)" if base.url == spec.url else ""
        if base._metrics()["speculating"]:
            raise ConfigError(
                f"--specdecode-baseline-url {base.url} speculates{same_url}: its /metrics has "
                "vllm:spec_decode_* counters, so it was started with --speculative-config. "
                f"Point it at a server of {base.model!r} started without speculative decoding."
            )
        if not spec._metrics()["speculating"]:
            raise ConfigError(
                f"--specdecode-speculative-url {spec.url} does not speculate{same_url}: its "
                "/metrics has no vllm:spec_decode_* counters (started without "
                "--speculative-config, or with --disable-log-stats). Point it at a server of "
                f"{spec.model!r} started with speculative decoding and metrics."
            )
        served = {role: engine.describe() for role, engine in engines.items()}
        for engine in engines.values():
            engine.info["served"] = served
        return engines

    def close(self) -> None:
        self._engines.clear()

    def __len__(self) -> int:
        return len(self._engines)
