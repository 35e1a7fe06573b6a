"""The how-to page (docs/howto-eagle3-gpu.md, issue 49 item 1) says what the tool does: its
ini parses into the settings the table lists, its workflow blocks are the GPU recipe (or edits
of it that still lint), its arithmetic is recomputed from the inputs it states, and every
command on it runs here on simulated engines (an 8B model on an H100 cannot): the saving run,
the upgrade pull request's comparison with the environment warning, the re-save, the
two-environment and new-head checks with the offline ``compare``, the CPU box's collect and
skip, the tiny models' ini and the timing probe."""

from __future__ import annotations

import configparser
import json
import math
import re
import runpy
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from pytest_specdecode import prompts
from pytest_specdecode.__main__ import EXIT_OK
from pytest_specdecode.__main__ import main as cli_main
from pytest_specdecode.settings import BY_NAME, MIN_BASELINE_ROUNDS, SETTINGS

from ..fakes import FakeSource, use_fake
from ..unit.test_ci_recipes import jactionlint, zizmor
from ..unit.test_workloads import QWEN3_STYLE, _tokenizer_folder

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "howto-eagle3-gpu.md"
RECIPE = ROOT / "examples" / "ci" / "github-gpu.yml"
SUITE = "gpu_tests"
NODEID = "test_qwen3_eagle3.py::test_qwen3_eagle3_mt_bench"

FENCE = re.compile(r"^( *)```(\w+)\n(.*?)^\1```\n", re.M | re.S)


def blocks(language: str) -> list[str]:
    """The page's fenced blocks of ``language``, dedented (a block in a list item is indented)."""
    text = PAGE.read_text(encoding="utf-8")
    return [textwrap.dedent(m.group(3)) for m in FENCE.finditer(text) if m.group(2) == language]


def page_commands() -> list[str]:
    """Every command of the page's bash blocks, in order: a line ending in a backslash, or
    one inside an open quote, goes on with the next."""
    commands: list[str] = []
    for block in blocks("bash"):
        pending = ""
        for line in block.splitlines():
            if line.rstrip().endswith("\\"):
                pending += line.rstrip()[:-1]
                continue
            pending += line + "\n"
            try:
                shlex.split(pending)
            except ValueError:  # no closing quotation yet
                continue
            if pending.strip():
                commands.append(pending.strip())
            pending = ""
        assert not pending.strip(), f"unfinished command: {pending!r}"
    return commands


def ini() -> dict[str, str]:
    (block,) = blocks("ini")
    parser = configparser.ConfigParser(interpolation=None)
    parser.read_string(block)
    return dict(parser["pytest"])


def recipe_env() -> dict[str, Any]:
    data: Any = yaml.safe_load(RECIPE.read_text(encoding="utf-8"))
    return dict(data["env"])


def diffs() -> list[tuple[list[str], list[str]]]:
    """Each diff block's removed and added lines (without their - and +)."""
    out = []
    for block in blocks("diff"):
        lines = block.splitlines()
        assert all(line[:1] in "-+" for line in lines), block
        out.append(([x[1:] for x in lines if x[0] == "-"], [x[1:] for x in lines if x[0] == "+"]))
    return out


# --- the page's place and its static parts ------------------------------------------------


def test_the_page_is_first_after_getting_started_in_the_nav() -> None:
    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))["nav"]
    pages = [next(iter(entry.values())) for entry in nav]
    assert pages[pages.index("getting-started.md") + 1] == PAGE.name


def test_the_ini_names_qwen3_8b_its_eagle3_head_and_vllms_k() -> None:
    """Every key is a setting of the configuration table, each value parses as the plugin
    parses it, and target, head and k are those of vLLM's acceptance test for Qwen3-8B (the
    recipe's row)."""
    from pytest_specdecode.engines.methods import is_head

    values = ini()
    known = {s.ini_name for s in SETTINGS}
    assert set(values) <= known, set(values) - known
    config_page = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert all(f"ini `{key}`" in config_page for key in values)
    spec = BY_NAME["speculative_config"].parse(values["specdecode_speculative_config"], "ini")
    kwargs = BY_NAME["engine_kwargs"].parse(values["specdecode_engine_kwargs"], "ini")
    assert set(spec) == {"method", "model", "num_speculative_tokens"}
    assert spec["method"] == "eagle3" and is_head(spec["method"])
    assert "gpu_memory_utilization" not in kwargs  # the plugin's split applies
    recipe = runpy.run_path(str(ROOT / "examples" / "test_acceptance_length.py"))
    (row,) = [c for c in recipe["VLLM_CONFIGS"] if c.id == "qwen3-8b-eagle3"]
    assert values["specdecode_target"] == row.target == "Qwen/Qwen3-8B"
    assert spec["model"] == row.drafter
    assert spec["num_speculative_tokens"] == recipe["NUM_SPEC_TOKENS"] == 3
    assert row.acceptance_length == 2.26  # the figure section 6 quotes, from the recipe
    assert row.per_position == (0.6541, 0.3993, 0.2020)


def test_vllm_accepts_the_ini_s_speculative_config_keys() -> None:
    """The keys are fields of the installed vLLM's SpeculativeConfig and the method one of
    its methods, as the plugin reads them before any engine starts."""
    from pytest_specdecode.engines import vllm_schema

    spec = json.loads(ini()["specdecode_speculative_config"])
    schema = vllm_schema.installed_schema()
    if schema is None:
        pytest.skip("vLLM's SpeculativeConfig could not be read here")
    assert set(spec) <= schema.fields
    assert spec["method"] in schema.methods


def test_the_workflow_excerpt_is_the_recipe() -> None:
    """The yaml block is the recipe's lines as they are (its pin included)."""
    (block,) = blocks("yaml")
    lines = RECIPE.read_text(encoding="utf-8").splitlines()
    excerpt = block.splitlines()
    starts = [i for i, line in enumerate(lines) if line == excerpt[0]]
    assert any(lines[i : i + len(excerpt)] == excerpt for i in starts), block


def _edited_recipe() -> str:
    """The recipe with the page's edits applied: each removed line replaced by its added one."""
    (removed, added), _ = diffs()
    text = RECIPE.read_text(encoding="utf-8")
    for old, new in zip(removed, added, strict=True):
        assert f"\n{old}\n" in f"\n{text}", f"not a line of the recipe: {old!r}"
        text = re.sub(rf"(?m)^{re.escape(old)}$", lambda _m, new=new: new, text)
    return text


def test_the_workflow_edits_name_the_suite_models_and_package(tmp_path: Path) -> None:
    """The edited workflow runs the page's suite, caches the ini's models, installs the
    package from PyPI with the pinned vLLM in both jobs, and still passes both linters."""
    text = _edited_recipe()
    data: Any = yaml.safe_load(text)
    assert data["env"]["SUITE"] == SUITE
    spec = json.loads(ini()["specdecode_speculative_config"])
    assert data["env"]["MODELS"].split() == [ini()["specdecode_target"], spec["model"]]
    installs = [s["run"] for job in data["jobs"].values() for s in job["steps"]
                if "pip install" in str(s.get("run", ""))]  # fmt: skip
    install = "python -m pip install 'pytest-specdecode[gpu]' \"vllm==${VLLM_VERSION}\""
    assert installs == [install] * 2
    path = tmp_path / "specdecode-gpu.yml"
    path.write_text(text)
    for lint in (jactionlint, zizmor):
        done = lint(path)
        assert done.returncode == 0, done.stdout + done.stderr


def test_the_upgrade_diff_moves_the_recipe_s_pin_forward() -> None:
    from packaging.version import Version

    _, ((removed,), (added,)) = diffs()
    pin = recipe_env()["VLLM_VERSION"]
    assert removed == f'  VLLM_VERSION: "{pin}"'
    new = re.fullmatch(r'  VLLM_VERSION: "(\d+\.\d+\.\d+)"', added)
    assert new and Version(new.group(1)) > Version(pin)


# --- the arithmetic, recomputed from the inputs the page states --------------------------


def _input(name: str) -> str:
    row = re.search(rf"^\| `{name}` \| ([^|]+) \|", PAGE.read_text(encoding="utf-8"), re.M)
    assert row, name
    return row.group(1).strip()


def _has(*figures: str) -> None:
    """Each figure, as written on the page (line breaks read as spaces)."""
    text = " ".join(PAGE.read_text(encoding="utf-8").split())
    missing = [f for f in figures if " ".join(f.split()) not in text]
    assert not missing, f"the page does not show {missing}"


def test_the_memory_arithmetic_follows_from_the_stated_inputs() -> None:
    from pytest_specdecode.engines.placement import GPU_MEMORY_BUDGET

    h, layers = int(_input("hidden_size")), int(_input("num_hidden_layers"))
    heads, kv_heads = int(_input("num_attention_heads")), int(_input("num_key_value_heads"))
    head_dim, inter = int(_input("head_dim")), int(_input("intermediate_size"))
    vocab = int(_input("vocab_size"))
    assert _input("tie_word_embeddings") == "false" and _input("torch_dtype").startswith("bfloat16")
    share = GPU_MEMORY_BUDGET / BY_NAME["max_engines"].default
    assert f"{share:.2f}" == "0.45"
    card = 80 * 10**9
    _has("80 GB = 80 × 10⁹ bytes")
    prompts_sent = len(prompts.standard("mt-bench"))  # the page's test sends them all at once
    assert prompts_sent == 80
    qo, kv = h * heads * head_dim, h * kv_heads * head_dim
    mlp, norms = 3 * h * inter, 2 * h + 2 * head_dim
    layer = 2 * qo + 2 * kv + mlp + norms
    body = layers * layer + h
    params = body + 2 * vocab * h
    weights = 2 * params
    budget = share * card
    left = budget - weights
    per_token = 2 * layers * kv_heads * head_dim * 2
    tokens = math.floor(left / per_token)
    _has(f"{qo:,}", f"{kv:,}", f"{mlp:,}", f"{norms:,}", f"{layer:,}", f"{body:,}",
         f"{2 * vocab * h:,}", f"{params:,}", f"{weights:,} bytes, {weights / 1e9:.2f} GB",
         f"{budget / 1e9:.2f} GB", f"2 × {budget / 1e9:.2f} = {2 * budget / 1e9:.2f} GB",
         f"2 × {weights / 1e9:.2f} = {2 * weights / 1e9:.2f} GB",
         f"{budget / 1e9:.2f} − {weights / 1e9:.2f} = **{left / 1e9:.2f} GB** ({left:,.0f} bytes)",
         f"**{per_token:,} bytes** ({per_token // 1024} KiB)", f"**at most {tokens:,}",
         f"{tokens:,} / {prompts_sent} = {tokens // prompts_sent:,} tokens",
         f"4096 × {per_token:,} =",
         f"{4096 * per_token:,} bytes, {4096 * per_token / 1e9:.2f} GB",
         f"10⁹ / {per_token:,} = {10**9 // per_token:,} fewer")  # fmt: skip
    # the model card's totals, which the inputs reproduce
    assert f"{params / 1e9:.1f}B" == "8.2B" and f"{body / 1e9:.2f}B" == "6.95B"
    _has('"8.2B" parameters and "6.95B" without embeddings')
    # the weights do not fit the repository's cache (ci.md's 10 GB)
    assert weights / 1e9 > 10 and "A repository keeps 10 GB of caches" in (
        ROOT / "docs" / "ci.md"
    ).read_text(encoding="utf-8")


def test_the_k_bound_follows_from_vllms_per_position_figures() -> None:
    per_position = (0.6541, 0.3993, 0.2020)
    length = 1 + sum(per_position)
    assert f"{length:.2f}" == "2.26"  # the acceptance-test page's mean acceptance length
    _has(f"1 + 0.6541 + 0.3993 + 0.2020 = {length:.4f}",
         f"at most {per_position[-1] / length:.1%} more (0.2020 / {length:.4f})")  # fmt: skip
    acceptance_page = (ROOT / "docs" / "acceptance-test.md").read_text(encoding="utf-8")
    assert "| 2.26 | 0.6541, 0.3993, 0.2020 |" in acceptance_page


def test_the_gpu_time_table_follows_from_the_settings() -> None:
    """Rounds from the settings and the rule's constants; the illustration's sums from its
    stated assumptions."""
    from pytest_specdecode.measure.detectable import compared_rounds
    from pytest_specdecode.measure.sequential import MIN_ROUNDS

    most = BY_NAME["baseline_max_trials"].default
    cap = BY_NAME["compare_max_trials"].default
    first = BY_NAME["trials"].default
    assert (MIN_BASELINE_ROUNDS, most, cap, first, MIN_ROUNDS) == (20, 90, 40, 5, 3)
    assert compared_rounds(MIN_BASELINE_ROUNDS, cap) == 20 and compared_rounds(most, cap) == cap
    warmup = 1
    rows = {
        "saving": (warmup + MIN_BASELINE_ROUNDS, warmup + most),
        "comparing": (warmup + MIN_ROUNDS, warmup + cap),
    }
    _has(f"| 1 + {MIN_BASELINE_ROUNDS} to 1 + {most} | 2S + {rows['saving'][0]}r to 2S + "
         f"{rows['saving'][1]}r |", f"| 1 + {MIN_ROUNDS} to 1 + {cap} | 2S + "
         f"{rows['comparing'][0]}r to 2S + {rows['comparing'][1]}r |",
         f"| 1 + {first} | 2S + {warmup + first}r |")  # fmt: skip
    start, round_s = 120, 10
    _has(f"S = {start} s and r = {round_s} s are **assumptions, not measurements**")
    for low, high in rows.values():
        a, b = 2 * start + low * round_s, 2 * start + high * round_s
        _has(
            f"2 × {start} + {low} × {round_s} = {a:,} s to 2 × {start} + {high} × {round_s} = "
            f"{b:,} s ({a / 60:.1f} to {b / 60:.1f} minutes)"
        )


# --- every command on the page, run ----------------------------------------------------------

#: The page's commands, in its order: a command added, changed or dropped there fails
#: test_every_command_on_the_page_is_run_here until a test below runs it.
INSTALL, SAVE, COMPARE, VENV_OLD, VENV_NEW, SAVE_OLD, SAVE_NEW, OFFLINE = range(8)
HEAD_OLD, HEAD_NEW, HEAD_COMPARE, COLLECT, SKIP, TINY, PROBE, PROBE_READ = range(8, 16)
NEW_HEAD = "heads/qwen3-8b-eagle3-v2"


def test_every_command_on_the_page_is_run_here() -> None:
    commands = page_commands()
    assert len(commands) == PROBE_READ + 1, commands
    assert commands[SAVE].startswith(f"pytest {SUITE} ") and "--specdecode-save" in commands[SAVE]
    assert "--specdecode-compare baselines/h100.json" in commands[COMPARE]
    assert commands[HEAD_COMPARE] == "python -m pytest_specdecode compare old.json new.json"
    assert commands[OFFLINE] == f"new/bin/{commands[HEAD_COMPARE]}"
    assert NEW_HEAD in commands[HEAD_NEW]
    assert commands[TINY] == "python -m pytest_specdecode.tiny --ini > pytest.ini"
    assert commands[PROBE_READ].startswith('python -c "')
    # no command on the page refuses the upgrade's own comparison
    assert not any("--specdecode-strict-environment" in c for c in commands)
    options = {s.option for s in SETTINGS}
    used = {o for c in commands for o in re.findall(r"--specdecode-[a-z-]+", c)}
    assert used <= options, used - options


def test_the_install_commands_pin_vllm_as_the_workflow_does() -> None:
    """Not run (no GPU, no network): each installs the package's gpu extra and an exact vLLM
    the extra allows: the workflow's pin, and for the candidate the upgrade diff's."""
    import tomllib

    from packaging.requirements import Requirement

    commands = page_commands()
    pin = recipe_env()["VLLM_VERSION"]
    _, ((_,), (added,)) = diffs()
    candidate = added.split('"')[1]
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())
    (allowed,) = [Requirement(r) for r in extra["project"]["optional-dependencies"]["gpu"]]
    for index, venv, version in ((INSTALL, None, pin), (VENV_OLD, "old", pin),
                                 (VENV_NEW, "new", candidate)):  # fmt: skip
        argv = shlex.split(commands[index])
        if venv is not None:
            assert argv[:6] == ["python", "-m", "venv", venv, "&&", f"{venv}/bin/pip"], argv
            argv = ["python", "-m", "pip", *argv[6:]]
        assert argv[:4] == ["python", "-m", "pip", "install"], argv
        package, vllm = (Requirement(r) for r in argv[4:])
        assert package.name == "pytest-specdecode" and package.extras == {"gpu"}
        assert vllm.name == "vllm" and str(vllm.specifier) == f"=={version}"
        assert allowed.specifier.contains(version)


def qwen3_config() -> dict[str, Any]:
    """A ``config.json`` of the page's inputs (section 3), as Qwen/Qwen3-8B's."""
    names = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
             "head_dim", "intermediate_size", "vocab_size")  # fmt: skip
    return {
        "_name_or_path": ini()["specdecode_target"],
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        **{name: int(_input(name)) for name in names},
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }


@pytest.fixture(scope="module")
def chat_loaded(tmp_path_factory: pytest.TempPathFactory) -> None:
    """``prompts.chat`` run once before any ``pytester`` exists: pytester drops the modules
    first imported while it lives, and the tokenizer's extension modules cannot be imported
    twice in one process (tests/conftest.py)."""
    target = _tokenizer_folder(tmp_path_factory.mktemp("chat"), QWEN3_STYLE)
    (rendered,) = prompts.chat(target, prompts.standard("mt-bench")[:1], enable_thinking=False)
    assert rendered.endswith("<think>\n\n</think>\n\n")
    prompts.chat(target, ["hi"], tokenize=True, enable_thinking=False)


@pytest.fixture
def suite(
    chat_loaded: None, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> FakeSource:
    """The page's two files in ``gpu_tests/`` on simulated engines on one (simulated) GPU; the
    target is a local folder with the target's tokenizer and a Qwen3-style chat template, so
    ``prompts.chat(..., enable_thinking=False)`` renders as it would for Qwen3-8B."""
    import pytest_specdecode.engines.hardware as hardware

    gpu = hardware.Gpu(0, "NVIDIA H100 80GB HBM3", 80.0, 80.0)
    monkeypatch.setattr(hardware, "nvml_gpus", lambda: (gpu,))
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    engines = use_fake(pytester, monkeypatch)
    (pytester.path / "models").mkdir()
    target = _tokenizer_folder(pytester.path / "models", QWEN3_STYLE)
    (target / "config.json").write_text(json.dumps(qwen3_config()))
    (pytester.path / SUITE).mkdir()
    (pytester.path / "baselines").mkdir()
    (ini_block,) = blocks("ini")
    page_target = ini()["specdecode_target"]
    (pytester.path / SUITE / "pytest.ini").write_text(ini_block.replace(page_target, str(target)))
    (test_file,) = blocks("python")
    (pytester.path / SUITE / "test_qwen3_eagle3.py").write_text(test_file)
    head = pytester.path / NEW_HEAD
    head.mkdir(parents=True)
    (head / "config.json").write_text(json.dumps({  # a speculators EAGLE-3 checkpoint's
        "architectures": ["Eagle3Speculator"],
        "speculators_config": {"algorithm": "eagle3", "verifier": {
            "name_or_path": "Qwen/Qwen3-8B", "architectures": ["Qwen3ForCausalLM"]}},
        "transformer_layer_config": {"hidden_size": int(_input("hidden_size"))},
    }))  # fmt: skip
    return engines


def run_pytest(pytester: pytest.Pytester, command: str, *extra: str) -> pytest.RunResult:
    """A page command line ``pytest ...`` (or ``old/bin/pytest ...``), in process."""
    argv = shlex.split(command)
    assert argv[0] in ("pytest", "old/bin/pytest", "new/bin/pytest"), argv
    return pytester.runpytest_inprocess(*argv[1:], *extra)


def run_cli(command: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    argv = shlex.split(command)
    assert argv[0] in ("python", "new/bin/python"), argv
    assert argv[1:3] == ["-m", "pytest_specdecode"], argv
    status = cli_main(argv[3:])
    out, err = capsys.readouterr()
    return status, out + err


def versions() -> tuple[str, str]:
    """The workflow's pin and the upgrade diff's version."""
    _, ((_,), (added,)) = diffs()
    return recipe_env()["VLLM_VERSION"], added.split('"')[1]


def test_the_upgrade_gate_saves_compares_with_a_warning_and_saves_again(
    pytester: pytest.Pytester, suite: FakeSource
) -> None:
    commands = page_commands()
    old, new = versions()
    baseline = pytester.path / "baselines" / "h100.json"

    suite.vllm_version = old  # 1. a push to main saves on the pinned vLLM
    run_pytest(pytester, commands[SAVE]).assert_outcomes(passed=1)
    (saved,) = json.loads(baseline.read_text())["results"]
    assert saved["nodeid"] == NODEID and saved["environment"]["vllm"] == old
    assert saved["method"] == "eagle3" and saved["num_speculative_tokens"] == 3
    assert len(saved["ratios"]) >= MIN_BASELINE_ROUNDS and len(saved["sessions"]) == 1
    assert (pytester.path / "specdecode-report.json").is_file()
    run_pytest(pytester, commands[SAVE]).assert_outcomes(passed=1)  # the next push to main
    (saved,) = json.loads(baseline.read_text())["results"]
    assert len(saved["sessions"]) == 2  # each later push adds a saving session

    suite.vllm_version = new  # 3. the upgrade's pull request compares on the new vLLM
    result = run_pytest(pytester, commands[COMPARE])
    result.assert_outcomes(passed=1)
    warning = (f"WARNING: the baseline comes from another environment: vllm {old} -> {new} "
               f"({NODEID})")  # fmt: skip
    assert warning in result.stdout.str()
    _has(f"`WARNING: the baseline comes from another environment: vllm {old} -> {new} (...)`")
    # what the page warns against: the same comparison refused
    strict = run_pytest(pytester, commands[COMPARE], "--specdecode-strict-environment")
    assert strict.ret != 0
    assert "not compared: its baseline entry was measured in another environment" in (
        strict.stdout.str()
    )

    run_pytest(pytester, commands[SAVE]).assert_outcomes(passed=1)  # 4. the merge saves again
    (again,) = json.loads(baseline.read_text())["results"]
    assert again["environment"]["vllm"] == new and len(again["sessions"]) == 1
    result = run_pytest(pytester, commands[COMPARE])  # later pull requests: no warning
    result.assert_outcomes(passed=1)
    assert "another environment" not in result.stdout.str()


def test_two_environments_compared_offline(
    pytester: pytest.Pytester, suite: FakeSource, capsys: pytest.CaptureFixture[str]
) -> None:
    commands = page_commands()
    old, new = versions()
    suite.vllm_version = old
    run_pytest(pytester, commands[SAVE_OLD]).assert_outcomes(passed=1)
    suite.vllm_version = new
    run_pytest(pytester, commands[SAVE_NEW]).assert_outcomes(passed=1)
    capsys.readouterr()
    status, out = run_cli(commands[OFFLINE], capsys)
    assert status == EXIT_OK, out
    warning = f"WARNING: the two runs come from different environments: vllm {old} -> {new}"
    assert warning in out
    _has(f"`{warning} (...)`")
    assert "speedup" in out
    # why both runs save: a report of 5 rounds is refused as the baseline
    run_pytest(pytester, "pytest gpu_tests --specdecode-report old.json").assert_outcomes(passed=1)
    status, out = run_cli(commands[OFFLINE], capsys)
    assert status == 2 and f"needs at least {MIN_BASELINE_ROUNDS} stored rounds" in out


def test_a_new_head_compared_offline(
    pytester: pytest.Pytester, suite: FakeSource, capsys: pytest.CaptureFixture[str]
) -> None:
    commands = page_commands()
    run_pytest(pytester, commands[HEAD_OLD]).assert_outcomes(passed=1)
    run_pytest(pytester, commands[HEAD_NEW]).assert_outcomes(passed=1)
    (result,) = json.loads((pytester.path / "new.json").read_text())["results"]
    assert result["draft"] == NEW_HEAD and result["method"] == "eagle3"
    capsys.readouterr()
    status, out = run_cli(commands[HEAD_COMPARE], capsys)
    assert status == EXIT_OK, out
    old_head = json.loads(ini()["specdecode_speculative_config"])["model"]
    assert "WARNING: the two runs are of different configurations: " in out
    assert f"draft {old_head} -> {NEW_HEAD}" in out


def test_a_cpu_box_collects_checks_and_skips(
    pytester: pytest.Pytester, suite: FakeSource, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pytest_specdecode.engines.hardware as hardware

    monkeypatch.setattr(hardware, "nvml_gpus", lambda: ())
    commands = page_commands()
    collected = run_pytest(pytester, commands[COLLECT])
    assert collected.ret == 0
    assert f"{NODEID}" in collected.stdout.str()
    skipped = run_pytest(pytester, commands[SKIP])
    skipped.assert_outcomes(skipped=1)
    skipped.stdout.fnmatch_lines(["SKIPPED [[]1[]] *: needs 1 GPU(s), NVML sees 0"])
    _has("`SKIPPED [1] ...: needs 1 GPU(s), NVML sees 0`")
    # the configuration is checked all the same: a method the installed vLLM lacks is an
    # error, not a skip
    ini_path = pytester.path / SUITE / "pytest.ini"
    ini_path.write_text(ini_path.read_text().replace('"eagle3"', '"eagle_3"'))
    broken = run_pytest(pytester, commands[SKIP])
    broken.assert_outcomes(errors=1)
    message = "unknown method 'eagle_3' (did you mean 'eagle3'?)"
    assert message in broken.stdout.str()
    _has(f"`{message}`")


def test_the_tiny_models_ini_command(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``python -m pytest_specdecode.tiny --ini > pytest.ini``: a pytest.ini of the settings
    the page's own ini sets (the tiny models' folders, faked here: building them is slow)."""
    from pytest_specdecode.tiny import TinyModels
    from pytest_specdecode.tiny import __main__ as tiny_cli

    argv = shlex.split(page_commands()[TINY])
    assert argv[:3] == ["python", "-m", "pytest_specdecode.tiny"]
    assert argv[4:] == [">", "pytest.ini"]
    models = TinyModels(*(Path(f"/m/{n}") for n in ("t", "d", "w", "u", "e", "m")))
    monkeypatch.setattr(tiny_cli, "tiny_models", lambda: models)
    tiny_cli.main([argv[3]])
    out, err = capsys.readouterr()
    parser = configparser.ConfigParser(interpolation=None)
    parser.read_string(out)
    assert set(parser["pytest"]) >= set(ini())
    assert "do not commit it" in err
    _has("for that machine only: do not commit the file")


def test_the_timing_probe_reads_starts_and_rounds(
    pytester: pytest.Pytester, suite: FakeSource
) -> None:
    commands = page_commands()
    run_pytest(pytester, commands[PROBE]).assert_outcomes(passed=1)
    (result,) = json.loads((pytester.path / "report.json").read_text())["results"]
    assert result["trials"] == BY_NAME["trials"].default  # the table's first-run row
    argv = shlex.split(commands[PROBE_READ])
    done = subprocess.run([sys.executable, *argv[1:]], cwd=pytester.path, capture_output=True,
                          text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    time = json.loads((pytester.path / "report.json").read_text())["session"]["time"]
    assert time["engine_starts"] == 2  # the table's 2 starts
    start, round_s = time["start_seconds"] / 2, time["round_seconds"] / result["trials"]
    assert done.stdout == f"S = {start:.0f} s, r = {round_s:.1f} s\n", done.stdout
