"""The engine worker: a spawned process that holds one ``vllm.LLM`` and answers commands.

One process per engine isolates vLLM's process-global metrics, makes freeing accelerator memory
certain (the process exits) and keeps an engine crash from taking the test session down. The
worker leads its own process group, so the parent can kill it together with vLLM's children.

Protocol over a ``multiprocessing`` pipe: the worker first sends ``("ready", info)`` or
``("error", text)``; then for each ``(command, kwargs)`` it answers ``("ok", value)`` or
``("error", text)``. Everything sent is plain data (no pickled vLLM objects).
"""

from __future__ import annotations

import os
import sys
import threading
import time
import traceback
from collections.abc import Sequence
from multiprocessing.connection import Connection
from typing import Any

SPEC_COUNTERS = (
    "vllm:spec_decode_num_drafts",
    "vllm:spec_decode_num_draft_tokens",
    "vllm:spec_decode_num_accepted_tokens",
)
SPEC_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"


def _watch_parent(parent_pid: int) -> None:
    """Kill this process group when the parent (pytest) disappears without saying goodbye."""
    while True:
        time.sleep(1.0)
        if os.getppid() != parent_pid:
            os.killpg(os.getpgid(0), 9)


def _redirect_output(log_path: str) -> None:
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def _build_sampling(sampling: dict[str, Any], n: int) -> list[Any]:
    """One ``SamplingParams`` per prompt; ``structured_outputs`` may be one dict or one per
    prompt."""
    from vllm import SamplingParams
    from vllm.sampling_params import StructuredOutputsParams

    sampling = dict(sampling)
    structured = sampling.pop("structured_outputs", None)
    per_prompt = structured if isinstance(structured, list) else [structured] * n
    params = []
    for spec in per_prompt:
        kwargs: dict[str, Any] = dict(sampling)
        if spec is not None:
            kwargs["structured_outputs"] = StructuredOutputsParams(**spec)
        params.append(SamplingParams(**kwargs))
    return params


def _request_figures(output: Any) -> dict[str, Any]:
    completion = output.outputs[0]
    token_ids = list(completion.token_ids)
    figures: dict[str, Any] = {
        "token_ids": token_ids,
        "text": completion.text,
        "ttft": None,
        "tpot": None,
    }
    stats = getattr(output, "metrics", None)
    if stats is not None:
        first = getattr(stats, "first_token_latency", None)
        figures["ttft"] = float(first) if first else None
        first_ts = getattr(stats, "first_token_ts", 0.0)
        last_ts = getattr(stats, "last_token_ts", 0.0)
        n = getattr(stats, "num_generation_tokens", len(token_ids))
        if n > 1 and last_ts > first_ts > 0:
            figures["tpot"] = (last_ts - first_ts) / (n - 1)
    return figures


class _Engine:
    def __init__(self, llm: Any) -> None:
        self.llm = llm

    def generate(
        self, prompts: Sequence[Any], sampling: dict[str, Any], concurrency: int | None
    ) -> dict[str, Any]:
        params = _build_sampling(sampling, len(prompts))
        batch = concurrency or len(prompts)
        outputs: list[Any] = []
        start = time.perf_counter()
        for i in range(0, len(prompts), batch):
            chunk = list(prompts[i : i + batch])
            outputs.extend(self.llm.generate(chunk, params[i : i + batch], use_tqdm=False))
        elapsed = time.perf_counter() - start
        return {"elapsed": elapsed, "requests": [_request_figures(o) for o in outputs]}

    def sample(self, prompts: Sequence[Any], sampling: dict[str, Any]) -> list[list[list[int]]]:
        """Every completion's token ids, per prompt (``sampling`` usually has ``n`` > 1)."""
        params = _build_sampling(sampling, len(prompts))
        outputs = self.llm.generate(list(prompts), params, use_tqdm=False)
        return [[list(c.token_ids) for c in o.outputs] for o in outputs]

    def spec_counters(self) -> dict[str, Any]:
        """The speculative-decoding counters, summed over ``engine`` labels (data parallel)."""
        totals = dict.fromkeys(SPEC_COUNTERS, 0)
        per_pos: list[int] = []
        for metric in self.llm.get_metrics():
            if metric.name in totals:
                totals[metric.name] += int(metric.value)
            elif metric.name == SPEC_PER_POS:
                values = list(metric.values)
                if len(per_pos) < len(values):
                    per_pos.extend([0] * (len(values) - len(per_pos)))
                for i, v in enumerate(values):
                    per_pos[i] += int(v)
        return {
            "num_drafts": totals[SPEC_COUNTERS[0]],
            "num_draft_tokens": totals[SPEC_COUNTERS[1]],
            "num_accepted_tokens": totals[SPEC_COUNTERS[2]],
            "accepted_per_position": per_pos,
        }

    def metrics(self) -> list[dict[str, Any]]:
        """Every ``vllm:*`` metric as plain dicts."""
        return [
            {"type": type(m).__name__, **{k: v for k, v in vars(m).items()}}
            for m in self.llm.get_metrics()
        ]

    def shutdown(self) -> None:
        shutdown = getattr(self.llm, "shutdown", None)
        if shutdown is None:
            engine_core = getattr(getattr(self.llm, "llm_engine", None), "engine_core", None)
            shutdown = getattr(engine_core, "shutdown", None)
        if shutdown is not None:
            shutdown()


def main(conn: Connection, target: str, engine_kwargs: dict[str, Any], log_path: str) -> None:
    """Entry point of the spawned worker."""
    os.setpgid(0, 0)
    threading.Thread(target=_watch_parent, args=(os.getppid(),), daemon=True).start()
    _redirect_output(log_path)
    os.environ.setdefault("VLLM_WORKER_MULTIPROC_METHOD", "spawn")
    try:
        start = time.perf_counter()
        import torch
        import vllm

        llm = vllm.LLM(target, **engine_kwargs)
        engine = _Engine(llm)
        kv_tokens: int | None = None
        try:
            cache: Any = llm.llm_engine.vllm_config.cache_config
            kv_tokens = int(cache.num_gpu_blocks) * int(cache.block_size)
        except (AttributeError, TypeError, ValueError):
            pass
        conn.send(
            (
                "ready",
                {
                    "pid": os.getpid(),
                    "start_seconds": time.perf_counter() - start,
                    "vllm_version": getattr(vllm, "__version__", "unknown"),
                    "torch_version": torch.__version__,
                    "kv_cache_tokens": kv_tokens,
                },
            )
        )
    except BaseException:
        conn.send(("error", traceback.format_exc()))
        sys.stdout.flush()
        os._exit(3)
    while True:
        try:
            command, kwargs = conn.recv()
        except (EOFError, OSError):
            break
        if command == "shutdown":
            try:
                engine.shutdown()
            finally:
                conn.send(("ok", None))
            break
        try:
            value = getattr(engine, command)(**kwargs)
        except BaseException:
            conn.send(("error", traceback.format_exc()))
            continue
        conn.send(("ok", value))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
