"""What identifies an engine: target, speculative config and the other ``vllm.LLM`` arguments."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from .errors import ConfigError


def _canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


@dataclass(frozen=True)
class EngineConfig:
    """The full configuration of one engine; equal configurations share one engine."""

    target: str
    speculative_json: str | None
    engine_kwargs_json: str

    @classmethod
    def create(
        cls, target: str, speculative_config: dict[str, Any] | None, engine_kwargs: dict[str, Any]
    ) -> EngineConfig:
        return cls(
            target=target,
            speculative_json=None if speculative_config is None else _canonical(speculative_config),
            engine_kwargs_json=_canonical(engine_kwargs),
        )

    @property
    def speculative_config(self) -> dict[str, Any] | None:
        return None if self.speculative_json is None else json.loads(self.speculative_json)

    @property
    def engine_kwargs(self) -> dict[str, Any]:
        result: dict[str, Any] = json.loads(self.engine_kwargs_json)
        return result

    @property
    def method(self) -> str:
        spec = self.speculative_config
        if spec is None:
            return "none"
        method = spec.get("method")
        if method:
            return str(method)
        return "ngram" if spec.get("model") == "ngram" else "draft_model"

    @property
    def num_speculative_tokens(self) -> int:
        spec = self.speculative_config or {}
        return int(spec.get("num_speculative_tokens") or 0)

    @property
    def draft(self) -> str | None:
        spec = self.speculative_config or {}
        model = spec.get("model")
        return None if model in (None, "ngram") else str(model)

    @property
    def key(self) -> str:
        return _canonical([self.target, self.speculative_json, self.engine_kwargs_json])

    def describe(self) -> str:
        if self.speculative_json is None:
            return f"baseline engine ({self.target})"
        draft = f", draft {self.draft}" if self.draft else ""
        return (
            f"speculative engine ({self.target}, {self.method} "
            f"k={self.num_speculative_tokens}{draft})"
        )

    def check_speculative_config(self, source: str) -> None:
        """Checks that need no vLLM import: the shape of the speculative config."""
        spec = self.speculative_config
        if spec is None:
            return
        k = spec.get("num_speculative_tokens")
        if k is None:
            raise ConfigError(
                f'{source}: num_speculative_tokens is missing; add e.g. "num_speculative_tokens": 4'
            )
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ConfigError(
                f"{source}: num_speculative_tokens must be an integer >= 1, got {k!r}"
            )
        if not spec.get("method") and not spec.get("model"):
            raise ConfigError(
                f'{source}: no proposer: give "method" (e.g. "ngram" or "draft_model" with "model")'
            )
