"""Measuring running vLLM servers (OpenAI-compatible) instead of starting engines.

Requests are streamed concurrently (``/v1/completions`` with ``stream``), so TTFT and TPOT are
per request; token ids come back with ``return_token_ids``. Acceptance and each side's
prefix-cache hit rate come from before/after deltas of the server's Prometheus ``/metrics``
(``vllm:spec_decode_*_total``, ``vllm:prefix_cache_*_total``), parsed with
``prometheus_client``'s text parser. Other traffic on a server during a round is detected from
its request counter and reported. A server started with ``--per-request-spec-decode-metrics``
also reports each request's acceptance (``metrics.speculative_decoding`` in the final usage
chunk of its stream), which the request's figures then carry.

Each server is driven through one pooled ``httpx.Client`` with keep-alive. Before the clock of
a round starts, as many connections as the round runs requests at once are opened (vLLM's
server closes a connection idle for 5 s, ``VLLM_HTTP_TIMEOUT_KEEP_ALIVE``), so connection
set-up does not land inside TTFT.

Before the first measurement the pool checks that it measures what it claims: both servers
serve the same model (``/v1/models``), the baseline server does not speculate and the
speculative one does (``/metrics``).

The API key is read from an environment variable (``SPECDECODE_API_KEY`` unless configured),
sent only to the server's own origin (a redirect elsewhere loses it) and replaced with ``***``
in every error message.
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
import urllib.parse
from collections.abc import Collection, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx

from ..errors import ConfigError, EngineError
from .config import EngineConfig
from .hardware import Device
from .protocol import (
    MAX_N_SEQUENCES,
    PREFIX_CACHE_COUNTERS,
    QUIET_S,
    REQUESTS_FINISHED,
    SPEC_COUNTERS,
    SPEC_PER_POSITION,
    Counters,
    LoadRound,
    Placement,
    PlainCalls,
    RequestFigures,
    Round,
    Timeline,
    check_arrivals,
    request_spec_fields,
    restarted,
    split_n,
)

if TYPE_CHECKING:
    from .protocol import EngineBackend, EngineSource


_TIMEOUT_FIX = "raise --specdecode-timeout or the marker's timeout="
_DETAIL_BYTES = 500  # of an error answer, shown in the message
#: seconds an idle connection is kept: below vLLM's default keep-alive (5 s), so the client
#: never sends on a connection the server is closing
_KEEPALIVE_S = 4.0
#: seconds to wait after a round for the server to count its requests as finished
_SETTLE_S = 5.0
#: the most bytes read of one answer (``/metrics``, ``/v1/models``, ...; a completion may
#: add :data:`_BYTES_PER_TOKEN` per token it asks for): an answer that never ends is cut off
_MAX_ANSWER_BYTES = 64 * 2**20
#: room per token asked for in a completion's answer (streamed chunks repeat the request's
#: id and model in each)
_BYTES_PER_TOKEN = 1024


@dataclass(frozen=True)
class ServerMetrics:
    """What a server's ``/metrics`` page tells."""

    counters: Counters
    requests: int  # finished requests (``vllm:request_success``), all reasons
    #: whether the page has speculative-decoding counters at all: vLLM registers them only on a
    #: server started with a speculative config (even before any draft)
    speculating: bool


#: The server process's start (``prometheus_client``'s process collector, on the page of a
#: vLLM server with one API server process; absent with several, ``PROMETHEUS_MULTIPROC_DIR``).
PROCESS_START = "process_start_time_seconds"


def _count(sample: Any) -> int:
    """A counter sample's value as a count: a ``ValueError`` naming the sample for a value no
    counter can have (negative, +Inf, NaN)."""
    value = float(sample.value)
    if not (math.isfinite(value) and value >= 0):
        labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
        raise ValueError(
            f"{sample.name}{{{labels}}} is {value:g}: a Prometheus counter is a finite count of "
            "0 or more (is this a vLLM server's /metrics?)"
        )
    return int(value)


def parse_metrics(text: str) -> ServerMetrics:
    """The speculative-decoding and prefix-cache counters (summed over labels, with the
    process start time where the page has it) and the finished-request count from a
    ``/metrics`` page. A counter we read whose value is negative, infinite or NaN is a
    ``ValueError``."""
    from prometheus_client.parser import text_string_to_metric_families

    totals = dict.fromkeys(SPEC_COUNTERS.values(), 0)
    cache = dict.fromkeys(PREFIX_CACHE_COUNTERS.values(), 0)
    per_pos: dict[int, int] = {}
    requests = 0
    speculating = False
    started: float | None = None
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == PROCESS_START and math.isfinite(sample.value):
                started = float(sample.value)
            if not sample.name.endswith("_total"):
                continue  # skip _created samples
            name = sample.name.removesuffix("_total")
            if name == SPEC_PER_POSITION:  # before SPEC_COUNTERS: one of them is its prefix
                position = int(sample.labels.get("position", 0))
                per_pos[position] = per_pos.get(position, 0) + _count(sample)
            elif name in SPEC_COUNTERS:
                totals[SPEC_COUNTERS[name]] += _count(sample)
                speculating = True
            elif name in PREFIX_CACHE_COUNTERS:
                cache[PREFIX_CACHE_COUNTERS[name]] += _count(sample)
            elif name == REQUESTS_FINISHED:
                requests += _count(sample)
    counters = Counters(
        totals["num_drafts"],
        totals["num_draft_tokens"],
        totals["num_accepted_tokens"],
        tuple(per_pos[i] for i in sorted(per_pos)),
        process_start=started,
        **cache,
    )
    return ServerMetrics(counters, requests, speculating)


def request_acceptance(answer: Any) -> dict[str, Any]:
    """The :class:`RequestFigures` speculative-decoding fields of a completion answer: its
    ``metrics.speculative_decoding``, which a server started with
    ``--per-request-spec-decode-metrics`` puts in the final usage chunk of a stream; ``{}``
    when the server does not report it."""
    metrics = answer.get("metrics") if isinstance(answer, dict) else None
    spec = metrics.get("speculative_decoding") if isinstance(metrics, dict) else None
    return request_spec_fields(spec)


def _origin(url: httpx.URL) -> tuple[str, str, int | None]:
    """Scheme, host and port (the default one filled in)."""
    return url.scheme, url.host.lower(), url.port or {"http": 80, "https": 443}.get(url.scheme)


class ServedEngine(PlainCalls):
    """A running OpenAI-compatible vLLM server, driven like an engine worker.

    ``role`` (``"baseline"`` or ``"speculative"``) only names the server in messages; the
    baseline one must not speculate (checked by the pool, and after every round). ``timeout``
    bounds every request as a whole, the first ones (``/v1/models``, ``/version``) included.
    ``api_key_env`` names the environment variable holding the API key, read at every request
    (None: no key is sent).
    """

    def __init__(
        self,
        url: str,
        config: EngineConfig,
        api_key_env: str | None = None,
        *,
        timeout: float = 900.0,
        model: str | None = None,
        role: str = "speculative",
    ) -> None:
        self.url = url.rstrip("/")
        self.config = config
        self.api_key_env = api_key_env
        self.timeout = timeout
        self.model = model
        self.role = role
        #: the model's path or name behind the id (``root`` in ``/v1/models``), where listed
        self.root: str | None = None
        #: the most completions one request asks for (the server's own limit is not visible:
        #: vLLM's default ``VLLM_MAX_N_SEQUENCES``)
        self.max_n = MAX_N_SEQUENCES
        self.placement = Placement({}, "served (memory set by the server)", {})
        self.info: dict[str, Any] = {}
        self._origin = _origin(httpx.URL(self.url))
        self._http: httpx.Client | None = None
        self._lock = threading.Lock()
        try:
            self._identify()
        except BaseException:
            self.close()
            raise

    def _identify(self) -> None:
        """The model id (from ``/v1/models`` unless given) and the server's vLLM version."""
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
        if self.role == "speculative":
            self.info["method"] = "served"
        try:
            self.info["vllm_version"] = str(self._get_json("/version")["version"])
        except (EngineError, KeyError, TypeError):
            pass  # an older server or a proxy without /version: the report leaves it out

    @property
    def option(self) -> str:
        return f"--specdecode-{self.role}-url"

    @property
    def alive(self) -> bool:
        return True

    @property
    def pid(self) -> int | None:
        """None: the server's processes are not ours."""
        return None

    # -- HTTP --------------------------------------------------------------------------
    def _client(self) -> httpx.Client:
        """The engine's one client (made again after :meth:`close`). No pool limit: a round's
        concurrency bounds the connections, and idle ones are kept for the next round."""
        with self._lock:
            if self._http is None:
                self._http = httpx.Client(
                    follow_redirects=True,
                    limits=httpx.Limits(
                        max_connections=None,
                        max_keepalive_connections=None,
                        keepalive_expiry=_KEEPALIVE_S,
                    ),
                    event_hooks={"request": [self._authorize]},
                )
            return self._http

    def _key(self) -> str | None:
        return (os.environ.get(self.api_key_env) or None) if self.api_key_env else None

    def _authorize(self, request: httpx.Request) -> None:
        """Runs on every request, each redirect included: the key goes to the server's own
        origin (scheme, host and port) and nowhere else."""
        key = self._key()
        if key and _origin(request.url) == self._origin:
            request.headers["Authorization"] = f"Bearer {key}"
        else:
            request.headers.pop("Authorization", None)

    def _redact(self, text: str) -> str:
        """``text`` with the API key (plain or URL-quoted) replaced by ``***``."""
        key = self._key()
        if key:
            for form in {key, urllib.parse.quote(key), urllib.parse.quote_plus(key)}:
                text = text.replace(form, "***")
        return text

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
        except httpx.TimeoutException:
            raise self._timed_out(path) from None
        except httpx.ConnectError as exc:
            raise EngineError(self._redact(f"{self.url}{path}: cannot connect ({exc})")) from None
        except (httpx.HTTPError, httpx.InvalidURL, OSError) as exc:
            raise EngineError(
                self._redact(f"{self.url}{path}: connection failed ({exc!r})")
            ) from None
        except (ValueError, UnicodeDecodeError) as exc:
            raise EngineError(
                self._redact(f"{self.url}{path}: unexpected answer ({exc})")
            ) from None

    @contextmanager
    def _open(self, path: str, body: Mapping[str, Any] | None = None) -> Iterator[Iterator[bytes]]:
        """A request to ``path`` (a POST of ``body`` as JSON, else a GET): yields its answer's
        body as it arrives, cut off with an :class:`EngineError` once ``timeout`` has passed
        since the request began or once it is larger than :meth:`_cap` allows. An HTTP error
        status is an :class:`EngineError`."""
        deadline = time.perf_counter() + self.timeout
        method = "GET" if body is None else "POST"
        cap = self._cap(body)

        def arriving(response: httpx.Response) -> Iterator[bytes]:
            read = 0
            for chunk in response.iter_bytes():
                if time.perf_counter() > deadline:  # a server that trickles: bound the whole call
                    raise self._timed_out(path)
                read += len(chunk)
                if read > cap:  # a server that never ends: bound the memory
                    raise EngineError(
                        self._redact(
                            f"{self.url}{path}: the answer is larger than {cap / 2**20:g} MiB, "
                            "the most read of it; cut off (a vLLM server's answer is far "
                            f"smaller: is {self.option} {self.url} a vLLM server?)"
                        )
                    )
                yield chunk

        with (
            self._errors(path),
            self._client().stream(method, self.url + path, json=body, timeout=self.timeout) as r,
        ):
            if r.status_code >= 400:
                detail = bytearray()
                for chunk in arriving(r):
                    detail += chunk
                    if len(detail) >= _DETAIL_BYTES:
                        break
                text = detail[:_DETAIL_BYTES].decode(errors="replace")
                hint = (
                    f" (set the API key in ${self.api_key_env})"
                    if self.api_key_env
                    else " (no API key: give the environment variable that holds one)"
                )
                hint = hint if r.status_code in (401, 403) else ""
                raise EngineError(
                    self._redact(f"{self.url}{path}: HTTP {r.status_code}{hint}: {text}")
                )
            yield arriving(r)

    @staticmethod
    def _cap(body: Mapping[str, Any] | None) -> int:
        """The most bytes read of the answer to ``body`` (None: a GET)."""
        if body is None:
            return _MAX_ANSWER_BYTES
        try:
            tokens = int(body.get("n") or 1) * int(body.get("max_tokens") or 0)
        except (TypeError, ValueError):
            tokens = 0
        return _MAX_ANSWER_BYTES + _BYTES_PER_TOKEN * max(0, tokens)

    def _call(self, path: str, body: Mapping[str, Any] | None = None) -> bytes:
        """The whole answer to a GET (or a POST of ``body``)."""
        with self._open(path, body) as arriving:
            return b"".join(arriving)

    def _get_json(self, path: str, body: Mapping[str, Any] | None = None) -> Any:
        data = self._call(path, body)
        with self._errors(path):
            return json.loads(data)

    # -- the engine boundary -----------------------------------------------------------
    def _body(
        self, prompt: Any, sampling: Mapping[str, Any], i: int, stream: bool
    ) -> dict[str, Any]:
        """The completions request for prompt ``i``: ``structured_outputs`` may be a list
        with one entry per prompt. A vLLM prompt dict goes as the completions API takes it:
        ``{"prompt_token_ids": [...]}`` as the list of token ids (to which the server adds no
        special token), ``{"prompt": "..."}`` as its text."""
        if isinstance(prompt, Mapping) and isinstance(prompt.get("prompt_token_ids"), list):
            prompt = list(prompt["prompt_token_ids"])
        elif isinstance(prompt, Mapping) and isinstance(prompt.get("prompt"), str):
            prompt = prompt["prompt"]
        body: dict[str, Any] = {"model": self.model, "prompt": prompt, "stream": stream}
        if stream:
            body["stream_options"] = {"include_usage": True}
        body["return_token_ids"] = True
        body.update((k, v) for k, v in sampling.items() if k != "structured_outputs")
        per_prompt = sampling.get("structured_outputs")
        structured = per_prompt[i] if isinstance(per_prompt, list) else per_prompt
        if structured is not None:
            body["structured_outputs"] = structured
        return body

    def _streamed(
        self, body: Mapping[str, Any]
    ) -> Iterator[tuple[float, list[int], str, dict[str, Any]]]:
        """One streamed completion's chunks as they arrive: when each came
        (``perf_counter``), its token ids and text (over its choices) and the whole chunk. Read
        to the end (past ``[DONE]``) so that the connection goes back to the pool."""
        path = "/v1/completions"
        buffer = b""
        with self._open(path, body) as arriving:
            for data in arriving:
                buffer += data
                *lines, buffer = buffer.split(b"\n")
                for raw in lines:
                    line = raw.decode().strip()
                    if not line.startswith("data:") or line[5:].strip() == "[DONE]":
                        continue
                    answer = json.loads(line[5:])
                    choices = self._choices(answer, path)
                    if any(not isinstance(c.get("token_ids"), list) for c in choices):
                        raise EngineError(
                            self._redact(
                                f"{self.url}{path}: a streamed chunk has no token_ids: the "
                                "server ignored return_token_ids (a vLLM without it, or a "
                                "proxy that drops fields). Token ids are what tokens are "
                                f"counted and outputs compared by: point {self.option} at a "
                                "vLLM server that returns them."
                            )
                        )
                    ids = [int(t) for c in choices for t in c.get("token_ids") or []]
                    text = "".join(c.get("text") or "" for c in choices)
                    yield time.perf_counter(), ids, text, answer

    def _stream(self, body: Mapping[str, Any]) -> RequestFigures:
        """One streamed completion, timed: TTFT from the first chunk that carries a token."""
        start = time.perf_counter()
        first: float | None = None
        token_ids: list[int] = []
        text: list[str] = []
        spec: dict[str, Any] = {}
        for at, ids, piece, answer in self._streamed(body):
            if (ids or piece) and first is None:
                first = at
            token_ids.extend(ids)
            text.append(piece)
            spec = spec or request_acceptance(answer)
        end = time.perf_counter()
        n = len(token_ids)
        return RequestFigures(
            tuple(token_ids),
            "".join(text),
            None if first is None else first - start,
            (end - first) / (n - 1) if first is not None and n > 1 else None,
            **spec,
        )

    def _choices(self, answer: Any, path: str) -> list[dict[str, Any]]:
        """The ``choices`` of an answer (a streamed chunk or a whole one); an ``error`` in it
        (vLLM reports failures met mid-stream that way) is an :class:`EngineError`."""
        if not isinstance(answer, dict):
            raise ValueError(f"expected a JSON object, got {type(answer).__name__}")
        if answer.get("error"):
            raise EngineError(self._redact(f"{self.url}{path}: {answer['error']}"))
        return [c for c in answer.get("choices") or [] if isinstance(c, dict)]

    def _connect_ahead(self, pool: ThreadPoolExecutor, n: int) -> None:
        """Start ``n`` threads of ``pool`` and open ``n`` connections (each thread holds its
        ``/health`` answer until all ``n`` have one) before a round's clock starts."""
        together = threading.Barrier(n, timeout=self.timeout)

        def hold() -> None:
            try:
                with self._client().stream("GET", self.url + "/health", timeout=self.timeout) as r:
                    together.wait()
                    r.read()
            except Exception:  # best effort: the round's own requests say what is wrong
                together.abort()

        for future in [pool.submit(hold) for _ in range(n)]:
            future.result()

    def generate_round(
        self, prompts: Sequence[Any], sampling: Mapping[str, Any], concurrency: int | None = None
    ) -> Round:
        """Stream every prompt, at most ``concurrency`` at once (default: all), timed."""
        before = self._metrics()
        bodies = [self._body(p, sampling, i, stream=True) for i, p in enumerate(prompts)]
        workers = max(1, min(concurrency or len(bodies), len(bodies)))
        with ThreadPoolExecutor(max_workers=workers) as pool:
            self._connect_ahead(pool, workers)
            start = time.perf_counter()
            requests = tuple(pool.map(self._stream, bodies))
            elapsed = time.perf_counter() - start
        return Round(elapsed, requests, self._others(before, len(bodies)))

    def load_round(
        self, prompts: Sequence[Any], sampling: Mapping[str, Any], arrivals: Sequence[float]
    ) -> LoadRound:
        """Stream each prompt from its arrival on (seconds after the round's start), each on
        a thread of its own that sleeps until then; every chunk with tokens is stamped. The
        connections are opened before the clock starts (one a request; a gap of more than
        the keep-alive between requests opens a fresh one, inside the request's TTFT)."""
        check_arrivals(arrivals, len(prompts))
        before = self._metrics()
        bodies = [self._body(p, sampling, i, stream=True) for i, p in enumerate(prompts)]
        timelines = [Timeline(float(t)) for t in arrivals]

        def send(i: int) -> None:
            timeline = timelines[i]
            time.sleep(max(0.0, start + timeline.arrival - time.perf_counter()))
            timeline.sent = time.perf_counter() - start
            for at, ids, _text, _answer in self._streamed(bodies[i]):
                timeline.chunk(at - start, len(ids))
            timeline.ended = time.perf_counter() - start

        with ThreadPoolExecutor(max_workers=max(1, len(bodies))) as pool:
            self._connect_ahead(pool, len(bodies))
            start = time.perf_counter()
            list(pool.map(send, range(len(bodies))))
        return LoadRound(
            max((q.end for q in timelines), default=0.0),
            tuple(q.timed() for q in timelines),
            self._others(before, len(bodies)),
        )

    def _others(self, before: ServerMetrics, sent: int) -> int:
        """Once the server counts a round's ``sent`` requests as finished: how many others
        it finished meanwhile. A baseline server that drafted meanwhile is a
        :class:`ConfigError`; a server that restarted meanwhile (a counter went down, another
        process start time) a :class:`~pytest_specdecode.errors.CounterResetError`."""
        after = self._settled(before, sent)
        where = self._redact(f"{self.option} {self.url}")
        if after.requests < before.requests:
            raise restarted(
                where, f"vllm:request_success went down from {before.requests} to {after.requests}"
            )
        after.counters.since(before.counters, where)
        if self.role == "baseline" and after.counters.num_drafts > before.counters.num_drafts:
            raise ConfigError(
                self._redact(
                    f"{self.option} {self.url} speculates: its vllm:spec_decode_num_drafts went "
                    f"from {before.counters.num_drafts} to {after.counters.num_drafts} during a "
                    "baseline round. Point it at a server of the same model started without "
                    "--speculative-config."
                )
            )
        return max(0, after.requests - before.requests - sent)

    def _settled(self, before: ServerMetrics, sent: int) -> ServerMetrics:
        """The metrics once the server counts the ``sent`` requests of a round as finished
        after ``before``: it counts a request a moment after its last chunk (waits at most
        ``_SETTLE_S``; not at all once it shows a restart)."""
        metrics = self._metrics()
        deadline = time.monotonic() + _SETTLE_S

        def waiting() -> bool:
            same = (
                metrics.requests >= before.requests
                and metrics.counters.process_start == before.counters.process_start
            )
            return same and metrics.requests < before.requests + sent

        while waiting() and time.monotonic() < deadline:
            time.sleep(0.05)
            metrics = self._metrics()
        return metrics

    def sample(self, prompts: Sequence[Any], sampling: Mapping[str, Any]) -> list[list[list[int]]]:
        """Every completion's token ids, per prompt: non-streamed requests per prompt for
        ``sampling["n"]`` completions (several when that is over vLLM's default
        ``VLLM_MAX_N_SEQUENCES``), the prompts concurrently."""
        parts = split_n(sampling, self.max_n)
        bodies = [
            (i, self._body(p, part, i, stream=False), int(part["n"]))
            for i, p in enumerate(prompts)
            for part in parts
        ]
        found: list[list[list[int]]] = [[] for _ in prompts]
        with ThreadPoolExecutor(max_workers=max(1, len(prompts))) as pool:
            answers = pool.map(lambda item: self._completions(item[1], item[2]), bodies)
            for (i, _, _), completions in zip(bodies, answers, strict=True):
                found[i].extend(completions)
        return found

    def _completions(self, body: Mapping[str, Any], n: int) -> list[list[int]]:
        path = "/v1/completions"
        answer = self._get_json(path, body)
        with self._errors(path):
            choices = sorted(self._choices(answer, path), key=lambda c: int(c.get("index") or 0))
            if len(choices) != n or any(c.get("token_ids") is None for c in choices):
                raise ValueError(
                    f"expected {n} completions with token_ids, got {len(choices)} "
                    f"({sum(c.get('token_ids') is not None for c in choices)} with token_ids)"
                )
            return [[int(t) for t in c["token_ids"]] for c in choices]

    def _metrics(self) -> ServerMetrics:
        data = self._call("/metrics")
        with self._errors("/metrics"):
            metrics = parse_metrics(data.decode())
        k = len(metrics.counters.accepted_per_position)
        if self.role == "speculative" and metrics.speculating and k:
            self.info["num_speculative_tokens"] = k  # the server's per-position counters
        return metrics

    def counters(self) -> Counters:
        """The server's cumulative speculative-decoding counters (all zero when it does not
        speculate) and prefix-cache counters."""
        return self._metrics().counters

    def describe(self) -> dict[str, Any]:
        """What the report records of this server: its URL and the model it serves."""
        described: dict[str, Any] = {"url": self.url, "model": self.model}
        if self.root and self.root != self.model:
            described["root"] = self.root
        return described

    def close(self) -> None:
        """Close the connections (the server is not ours to stop)."""
        with self._lock:
            http, self._http = self._http, None
        if http is not None:
            http.close()


class ServedPool:
    """Where engines come from in served mode: two fixed servers.

    Both servers are contacted on first use and checked together (same model, only the
    speculative one speculates) before anything is measured. ``timeout`` bounds every request,
    the first ones included; a test's own timeout replaces it for that test. The URLs come
    checked (the ``baseline_url`` and ``speculative_url`` settings); ``api_key_env`` names the
    environment variable holding the API key.
    """

    def __init__(
        self, baseline_url: str, speculative_url: str, api_key_env: str, timeout: float = 900.0
    ) -> None:
        self.urls = {"baseline": baseline_url, "speculative": speculative_url}
        self.api_key_env = api_key_env
        self.timeout = timeout
        self.max_engines = 2
        self.quiet_seconds = QUIET_S
        self.starts = self.restarts = 0  # servers are not started here
        self.start_seconds = self.stop_seconds = 0.0
        self.sequential_reasons: list[str] = []
        self._engines: dict[str, ServedEngine] = {}

    @property
    def device(self) -> Device:
        """The engines run elsewhere: their hardware is not visible from here."""
        return Device("served", "remote vLLM servers (hardware not visible from here)")

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

    def is_running(self, config: EngineConfig) -> bool:
        """Servers run whether or not this process has contacted them."""
        return True

    def plan(self, upcoming: Sequence[Collection[str]]) -> None:
        """Nothing to schedule: both servers stay up."""

    def memory_gib(self, engine: EngineBackend) -> float | None:
        """None: a server's processes are not ours to measure."""
        return None

    def _connect(self, config: EngineConfig, timeout: float) -> dict[str, ServedEngine]:
        """Contact both servers and check that they make a baseline/speculative pair."""
        engines: dict[str, ServedEngine] = {}
        try:
            for role in ("baseline", "speculative"):
                engines[role] = ServedEngine(
                    self.urls[role], config, self.api_key_env, timeout=timeout, role=role
                )
            self._check_pair(engines["baseline"], engines["speculative"])
        except BaseException:
            for engine in engines.values():
                engine.close()
            raise
        served = {role: engine.describe() for role, engine in engines.items()}
        for engine in engines.values():
            engine.info["served"] = served
        return engines

    @staticmethod
    def _check_pair(base: ServedEngine, spec: ServedEngine) -> None:
        same = base.model == spec.model or (base.root is not None and base.root == spec.root)
        if not same:
            raise ConfigError(
                f"the two servers serve different models: --specdecode-baseline-url {base.url} "
                f"serves {base.model!r}, --specdecode-speculative-url {spec.url} serves "
                f"{spec.model!r}. Point both at servers of the same target model."
            )
        same_url = " (both options give the same URL)" if base.url == spec.url else ""
        if base._metrics().speculating:
            raise ConfigError(
                f"--specdecode-baseline-url {base.url} speculates{same_url}: its /metrics has "
                "vllm:spec_decode_* counters, so it was started with --speculative-config. "
                f"Point it at a server of {base.model!r} started without speculative decoding."
            )
        if not spec._metrics().speculating:
            raise ConfigError(
                f"--specdecode-speculative-url {spec.url} does not speculate{same_url}: its "
                "/metrics has no vllm:spec_decode_* counters (started without "
                "--speculative-config, or with --disable-log-stats). Point it at a server of "
                f"{spec.model!r} started with speculative decoding and metrics."
            )

    def close(self) -> None:
        for engine in self._engines.values():
            engine.close()
        self._engines.clear()

    def __len__(self) -> int:
        return len(self._engines)


if TYPE_CHECKING:  # mypy proves that both implement the engine boundary exactly

    def _implements(engine: ServedEngine, pool: ServedPool) -> tuple[EngineBackend, EngineSource]:
        return engine, pool
