"""Plugin behaviour through pytester, without starting any engine."""

import subprocess
import sys

import pytest

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestAssertRewriteWarning")

HEADER = """
import pytest
SPEC = {"method": "ngram", "num_speculative_tokens": 3}
"""


def test_importing_the_plugin_imports_nothing_heavy() -> None:
    code = (
        "import sys, pytest_specdecode, pytest_specdecode.plugin.hooks;"
        "print(','.join(m for m in ('vllm', 'torch', 'transformers', 'pynvml', 'numpy') "
        "if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_marker_is_registered(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--markers")
    result.stdout.fnmatch_lines(["*@pytest.mark.specdecode(category, *, target=None*"])


def test_plugin_can_be_disabled(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("-p", "no:specdecode", "--help")
    assert "--specdecode-target" not in result.stdout.str()
    result = pytester.runpytest("--help")
    result.stdout.fnmatch_lines(["*--specdecode-target*"])


def test_unknown_marker_keyword_errors_before_any_engine(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        HEADER
        + """
@pytest.mark.specdecode("structured", target="org/t", speculative_config=SPEC, min_sped=2)
def test_a(specdecode):
    raise AssertionError("must not run")

def test_unrelated():
    pass
"""
    )
    result = pytester.runpytest()
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["*::test_a: unknown keyword 'min_sped'*"])
    assert "must not run" not in result.stdout.str()


def test_bad_command_line_value_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_a(): pass")
    result = pytester.runpytest("--specdecode-speculative-config", "{not json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--specdecode-speculative-config: not valid JSON*"])


def test_category_option_deselects_other_specdecode_tests(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        HEADER
        + """
@pytest.mark.specdecode("structured", target="org/t", speculative_config=SPEC)
def test_structured():
    pass

@pytest.mark.specdecode(category="creative", target="org/t", speculative_config=SPEC)
def test_creative():
    pass

def test_plain():
    pass
"""
    )
    result = pytester.runpytest("--specdecode-category", "structured", "-v")
    result.assert_outcomes(passed=2, deselected=1)
    assert "test_creative" not in result.stdout.str().split("deselected")[0]
    pytester.makeini("[pytest]\nspecdecode_category = creative, other\n")
    result = pytester.runpytest()
    result.assert_outcomes(passed=2, deselected=1)


def test_missing_vllm_skips_with_install_hint(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pytest_specdecode.plugin.fixtures as fixtures

    monkeypatch.setattr(fixtures, "vllm_available", lambda: False)
    pytester.makepyfile(
        HEADER
        + """
@pytest.mark.specdecode("structured", target="org/t", speculative_config=SPEC)
def test_a(specdecode):
    raise AssertionError("must not run")

def test_plain():
    pass
"""
    )
    result = pytester.runpytest_inprocess("-rs")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["*vLLM is not installed*pytest-specdecode?cpu?*"])


def test_fixture_without_marker_explains(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
def test_a(specdecode):
    pass
"""
    )
    result = pytester.runpytest()
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*the specdecode fixtures need the marker*"])


def test_min_gpus_skips_or_fails_without_gpus(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pytest_specdecode.engines.hardware as platform

    monkeypatch.setattr(platform, "nvml_gpus", lambda: ())
    pytester.makepyfile(
        HEADER
        + """
@pytest.mark.specdecode("tp", target="org/t", speculative_config=SPEC, min_gpus=2,
                        engine_kwargs={"tensor_parallel_size": 2})
def test_tp(specdecode):
    raise AssertionError("must not run")
"""
    )
    result = pytester.runpytest_inprocess("-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*needs 2 GPU(s), NVML sees 0*"])
    result = pytester.runpytest_inprocess("--specdecode-require-gpu")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*--specdecode-require-gpu is set*"])
