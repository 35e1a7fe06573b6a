"""What an engine holds in memory: its process group's RSS on a CPU, its GPU memory through
NVML on a GPU (never through CUDA in this process)."""

from __future__ import annotations

import os
from pathlib import Path


def group_pids(pgid: int) -> list[int]:
    """Running processes whose process group is ``pgid`` (an engine worker leads its own
    group); zombies (dead, not yet reaped) are left out. Empty without ``/proc``."""
    pids = []
    try:
        entries = list(Path("/proc").iterdir())
    except OSError:
        return []
    for entry in entries:
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # the command name may hold spaces and parentheses: split after its closing ")"
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            pids.append(int(entry.name))
    return pids


def process_titles(pids: list[int]) -> dict[int, str]:
    """Each running process's title: its command line as shown by ``ps`` (vLLM names its own
    processes ``VLLM::EngineCore``, ``VLLM::Worker`` ...)."""
    titles = {}
    for pid in pids:
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        titles[pid] = cmdline.replace(b"\0", b" ").decode(errors="replace").strip()
    return titles


def rss_gib(pids: list[int]) -> float:
    """Resident memory of ``pids`` together, in GiB."""
    total_kib = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total_kib += int(line.split()[1])
                    break
        except OSError:
            continue
    return total_kib / 2**20


def gpu_gib(pids: list[int]) -> float | None:
    """GPU memory used by ``pids`` on every visible GPU (NVML), or None without NVML."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:
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
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


def engine_memory_gib(pgid: int, kind: str) -> float | None:
    """Memory an engine worker's process group holds: GPU memory on a GPU, else RSS."""
    pids = group_pids(pgid)
    if not pids:
        return None
    if kind == "gpu":
        return gpu_gib(pids)
    return rss_gib(pids) if os.path.isdir("/proc") else None
