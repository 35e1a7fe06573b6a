"""Run the test suite as CI does (``tox -e py``), in two parts.

    python scripts/run_tests.py              # the whole suite, in the two parts below
    python scripts/run_tests.py ARGS...      # plain ``pytest ARGS...`` instead

1. The tests not marked ``slow`` (simulated engines, pytester, renderers) over two
   pytest-xdist workers: none of them times anything, so they may share the machine.
2. The tests marked ``slow`` (real vLLM engines) in one process, one after another, so that
   the engines they share start once and nothing else runs while they measure.

The exit status is the first part's when it failed, else the second's.
"""

from __future__ import annotations

import subprocess
import sys

PARTS = (
    ["-n", "2", "-m", "not slow", "--durations", "10", "tests"],
    ["-m", "slow", "--durations", "25", "tests"],
)


def main(argv: list[str]) -> int:
    pytest = [sys.executable, "-m", "pytest"]
    if argv:
        return subprocess.call([*pytest, *argv])
    status = 0
    for part in PARTS:
        print(f"run_tests: pytest {' '.join(part)}", flush=True)
        code = subprocess.call([*pytest, *part])
        status = status or code
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
