"""What identifies an engine: target, speculative config and the other ``vllm.LLM`` arguments."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from ..names import display_name
from .dynamic_sd import SCHEDULE_KEY, check_schedule, check_schedule_support
from .methods import NO_MODEL, draft_model, implied_method, method_facts, model_placeholder
from .model_folder import check_model_path

if TYPE_CHECKING:
    from .hardware import Device


def _canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


@dataclass(frozen=True)
class EngineConfig:
    """The full configuration of one engine; equal configurations share one engine."""

    target: str
    speculative_json: str | None
    engine_kwargs_json: str
    #: what the engine is for, in progress lines (not part of its identity)
    role: str = field(default="", compare=False)

    @classmethod
    def create(
        cls,
        target: str,
        speculative_config: dict[str, Any] | None,
        engine_kwargs: dict[str, Any],
        role: str = "",
    ) -> EngineConfig:
        return cls(
            target=target,
            speculative_json=None if speculative_config is None else _canonical(speculative_config),
            engine_kwargs_json=_canonical(engine_kwargs),
            role=role,
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
        if not spec:
            return "unknown"  # a served engine whose configuration is the server's
        return implied_method(spec)

    @property
    def num_speculative_tokens(self) -> int:
        spec = self.speculative_config or {}
        return int(spec.get("num_speculative_tokens") or 0)

    @property
    def draft(self) -> str | None:
        return draft_model(self.speculative_config)

    @property
    def key(self) -> str:
        return _canonical([self.target, self.speculative_json, self.engine_kwargs_json])

    def describe(self) -> str:
        if self.role:
            return f"{self.role} ({display_name(self.target)})"
        if self.speculative_json is None:
            return f"baseline engine ({display_name(self.target) if self.target else 'served'})"
        if not self.target:
            return "speculative engine (served)"
        draft = f", draft {display_name(self.draft)}" if self.draft else ""
        schedule = (self.speculative_config or {}).get(SCHEDULE_KEY)
        k = (
            f"k by batch size {json.dumps(schedule)}"
            if schedule
            else f"k={self.num_speculative_tokens}"
        )
        return f"speculative engine ({display_name(self.target)}, {self.method} {k}{draft})"

    def check_speculative_config(self, source: str) -> None:
        """Checks that need no vLLM import: the shape of the speculative config, the packages
        its method imports, the models it names."""
        from .compat import check_requirement

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
        self._check_against_vllm(spec, source)
        check_requirement(self.method, source)
        if spec.get(SCHEDULE_KEY) is not None:
            check_schedule(spec[SCHEDULE_KEY], k, source)
            check_schedule_support(self.method, self.engine_kwargs, source)
        self._check_models(spec, source)

    def _check_against_vllm(self, spec: dict[str, Any], source: str) -> None:
        """Keys and method the installed vLLM knows (read from its source, not imported)."""
        from .vllm_schema import closest, installed_schema

        schema = installed_schema()
        if schema is None:
            return
        _refuse_unknown(
            spec, schema.fields, lambda _: source, "unknown key",
            f"the installed vLLM's SpeculativeConfig has no such field ({schema.source})",
        )  # fmt: skip
        method = spec.get("method")
        if method is not None and schema.methods and method not in schema.methods:
            raise ConfigError(
                f"{source}: unknown method {method!r}{closest(str(method), schema.methods)}; "
                f"the installed vLLM accepts: {', '.join(sorted(schema.methods))}"
            )
        if isinstance(method, str) and not spec.get("model") and schema.needs_model(method):
            _refuse_missing_model(method, source, schema.source)

    def _check_models(self, spec: dict[str, Any], source: str) -> None:
        """Local folders exist; a draft or head fits the target (``compat``)."""
        from .compat import check_compatibility, check_mtp_target

        check_model_path(self.target, source.replace("speculative_config", "target"))
        if method_facts(self.method).standalone and not spec.get("model"):  # also without vLLM
            _refuse_missing_model(self.method, source, None)
        check_mtp_target(self.target, spec, self.engine_kwargs, self.method, source)
        draft = self.draft
        if draft is None:
            return
        check_model_path(draft, f"{source}: model")
        check_compatibility(self.target, spec, self.engine_kwargs, self.method, source)


def _refuse_missing_model(method: str, source: str, schema_source: str | None) -> None:
    """A method whose proposer is loaded from ``model``, given none. vLLM 0.32's
    ``SpeculativeConfig.__post_init__`` (``if self.model is None and
    self.num_speculative_tokens is not None``) fills ``model`` in only for ngram, ngram_gpu,
    suffix, extract_hidden_states (no weights), mtp (and its aliases such as deepseek_mtp) and
    dspark (layers shipped inside the target: ``model`` becomes the target); custom_class
    raises, and every other method (draft_model, eagle, eagle3, dflash, medusa,
    mlp_speculator) raises "num_speculative_tokens was provided but without speculative
    model", which surfaces only once the engine starts. Which methods need it is read from
    the installed vLLM (:meth:`~.vllm_schema.SpeculativeSchema.needs_model`)."""
    what = model_placeholder(method)
    why = f" (read from {schema_source})" if schema_source else ""
    raise ConfigError(
        f'{source}: method "{method}" needs "model": the installed vLLM loads its proposer '
        f'from it and starts no {method} engine without one{why}; add "model": '
        f'"{what}", or choose a method that needs no model '
        f"({', '.join(sorted(NO_MODEL))}; mtp uses the target's own MTP layers)"
    )


def check_engine_kwargs(engine_kwargs: Mapping[str, Any], where: Callable[[str], str]) -> None:
    """Every key must be an argument the installed vLLM's ``LLM()`` accepts (read from its
    source, not imported); ``where(key)`` names the setting the key came from."""
    from .vllm_schema import installed_engine_args

    schema = installed_engine_args()
    if schema is None:
        return
    _refuse_unknown(
        engine_kwargs, schema.names, where, "engine_kwargs: unknown argument",
        f"the installed vLLM's LLM() and EngineArgs accept no such argument ({schema.source})",
    )  # fmt: skip


def _refuse_unknown(
    keys: Iterable[str],
    known: Collection[str],
    where: Callable[[str], str],
    what: str,
    why: str,
) -> None:
    """A ConfigError for the first key not in ``known``, with a "did you mean"."""
    from .vllm_schema import closest

    for key in keys:
        if key not in known:
            raise ConfigError(f"{where(key)}: {what} {key!r}{closest(key, known)}; {why}")


def engine_pair(
    target: str | os.PathLike[str] | None,
    speculative_config: Mapping[str, Any] | None,
    engine_kwargs: Mapping[str, Any],
    *,
    served: bool,
    where: Callable[[str], str],
    hint: str,
) -> tuple[EngineConfig, EngineConfig]:
    """The baseline and speculative engine configurations of one target, validated without
    vLLM: a target and a speculative config are required (a served pair may leave both to its
    servers), engine_kwargs hold neither, and local ones name arguments and folders the
    installed vLLM accepts. ``where(name)`` says where a value came from; ``hint`` is how to
    give a missing one, with ``{option}`` and ``{name}`` filled in. A target may be a path
    object (``pathlib.Path``)."""
    if isinstance(target, os.PathLike):
        target = os.fspath(target)
    for name, value, example in (
        ("target", target, ""),
        ("speculative_config", speculative_config,
         ', e.g. {"method": "draft_model", "model": "/models/draft", "num_speculative_tokens": 4}'),
    ):  # fmt: skip
        if not value and not served:
            how = hint.format(option=name.replace("_", "-"), name=name)
            what = "target model" if name == "target" else "speculative config"
            raise ConfigError(f"{where(name)}: no {what}: give {name}= {how}{example}")
    for forbidden in ("model", "speculative_config"):
        if forbidden in engine_kwargs:
            raise ConfigError(
                f"{where('engine_kwargs')}: engine_kwargs must not contain {forbidden!r}; use "
                f"{'target' if forbidden == 'model' else 'speculative_config'}= instead"
            )
    baseline = EngineConfig.create(target or "", None, dict(engine_kwargs))
    speculative = EngineConfig.create(
        target or "", dict(speculative_config or {}), dict(engine_kwargs)
    )
    if not served:  # a served deployment's configuration is the server's business
        check_engine_kwargs(engine_kwargs, where)
        speculative.check_speculative_config(where("speculative_config"))
    return baseline, speculative


#: vLLM's rejection-sampling method that accepts draft tokens at forced rates
#: (``synthetic_acceptance_length`` or ``synthetic_acceptance_rates``) instead of verifying them.
SYNTHETIC = "synthetic"
#: vLLM's own words for why its CPU sampler cannot run it (``vllm/utils/cpu_triton_utils.py``).
SYNTHETIC_ON_CPU = "Synthetic acceptance not supported with CPU sampling"


def lossy(speculative_config: Mapping[str, Any] | None) -> str | None:
    """Why the speculative engine's outputs are not the target's, for a config whose drafts
    are not verified (synthetic acceptance); None for a lossless one."""
    spec = speculative_config or {}
    if spec.get("rejection_sample_method") != SYNTHETIC:
        return None
    forced = next(
        (f"{key}={spec[key]!r}" for key in ("synthetic_acceptance_length",
                                             "synthetic_acceptance_rates") if key in spec),
        "a forced acceptance",
    )  # fmt: skip
    return (
        f'lossy: rejection_sample_method "{SYNTHETIC}" accepts draft tokens at forced rates '
        f"({forced}) instead of verifying them, so the speculative outputs are not the "
        "target's; the equivalence gates (min_match_rate, assert_outputs_equivalent, "
        "sample_equivalence) do not apply"
    )


def check_on_device(config: EngineConfig, device: Device, source: str) -> None:
    """Refuse, before any engine starts, a speculative config this device cannot run:
    synthetic acceptance on CPU, where vLLM's CPU sampler asserts at the first step and the
    engine core dies."""
    spec = config.speculative_config or {}
    if device.kind == "cpu" and spec.get("rejection_sample_method") == SYNTHETIC:
        raise ConfigError(
            f'{source}: rejection_sample_method "{SYNTHETIC}" cannot run on CPU '
            f'({device.name}): "{SYNTHETIC_ON_CPU}" (vLLM\'s CPU sampler, '
            "vllm/utils/cpu_triton_utils.py), so the engine core would die at its first step; "
            "run it on a GPU, or remove rejection_sample_method and "
            "synthetic_acceptance_length / synthetic_acceptance_rates to measure the real "
            "acceptance"
        )
