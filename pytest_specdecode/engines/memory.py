"""What an engine holds in memory: its process group's RSS on a CPU, its GPU memory through
NVML on a GPU (never through CUDA in this process). Processes are read with psutil."""

from __future__ import annotations

import os

import psutil

from .hardware import nvml

_GONE = (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)


def group_pids(pgid: int) -> list[int]:
    """Running processes whose process group is ``pgid`` (an engine worker leads its own
    group); zombies (dead, not yet reaped) are left out."""
    pids = []
    for proc in psutil.process_iter(["status"]):
        try:
            if proc.info["status"] not in _GONE and os.getpgid(proc.pid) == pgid:
                pids.append(proc.pid)
        except (ProcessLookupError, psutil.Error):
            continue
    return pids


def process_titles(pids: list[int]) -> dict[int, str]:
    """Each running process's title: its command line as shown by ``ps`` (vLLM names its own
    processes ``VLLM::EngineCore``, ``VLLM::Worker`` ...)."""
    titles = {}
    for pid in pids:
        try:
            titles[pid] = " ".join(psutil.Process(pid).cmdline()).strip()
        except psutil.Error:
            continue
    return titles


def rss_gib(pids: list[int]) -> float:
    """Resident memory of ``pids`` together, in GiB."""
    total = 0
    for pid in pids:
        try:
            total += psutil.Process(pid).memory_info().rss
        except psutil.Error:
            continue
    return total / 2**30


def gpu_gib(pids: list[int]) -> float | None:
    """GPU memory used by ``pids`` on every visible GPU (NVML), or None without NVML."""
    with nvml() as pynvml:
        if pynvml is None:
            return None
        try:
            wanted, used = set(pids), 0
            for i in range(pynvml.nvmlDeviceGetCount()):
                handle = pynvml.nvmlDeviceGetHandleByIndex(i)
                for proc in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
                    if proc.pid in wanted and proc.usedGpuMemory:
                        used += proc.usedGpuMemory
            return used / 2**30
        except Exception:
            return None


def engine_memory_gib(pgid: int, kind: str) -> float | None:
    """Memory an engine worker's process group holds: GPU memory on a GPU, else RSS."""
    pids = group_pids(pgid)
    if not pids:
        return None
    return gpu_gib(pids) if kind == "gpu" else rss_gib(pids)
