"""Check a built sdist and wheel: ``python .ci/check_dist.py DIST_DIR``.

The wheel must carry every file of the tiny models, the JSON schemas, the standard prompt sets
(each with its ``LICENSE`` and ``SOURCE.md``), the model card and ``py.typed`` byte for byte as
in the source tree, the license, the version in
``pytest_specdecode/__init__.py`` and the pytest entry point; the sdist must carry the tests.
Exits 1 naming each missing or differing file.
"""

from __future__ import annotations

import ast
import sys
import tarfile
import zipfile
from email.parser import HeaderParser
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "pytest_specdecode"
#: Package data (pyproject's [tool.setuptools.package-data]): every file under these.
DATA = ("tiny/weights", "schemas", "data")
DATA_FILES = ("py.typed", "tiny/MODEL_CARD.md")


def _version() -> str:
    tree = ast.parse((PACKAGE / "__init__.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "__version__":
            return str(ast.literal_eval(node.value))
    raise SystemExit("no __version__ in pytest_specdecode/__init__.py")


#: Every standard prompt set (``pytest_specdecode/data/<set>/``) ships these beside its data.
SET_FILES = ("LICENSE", "SOURCE.md")


def _sets() -> list[Path]:
    """The standard sets' folders; a folder lacking its licence or source stops the check."""
    folders = sorted(p for p in (PACKAGE / "data").iterdir() if p.is_dir())
    for folder in folders:
        missing = [n for n in SET_FILES if not (folder / n).is_file()]
        if missing or not list(folder.glob("*.gz")):
            raise SystemExit(f"{folder}: a standard set needs {SET_FILES} and its .gz data")
    return folders


def _expected() -> list[Path]:
    _sets()
    files = [PACKAGE / name for name in DATA_FILES]
    for folder in DATA:
        files += sorted(
            p for p in (PACKAGE / folder).rglob("*") if p.is_file() and "__pycache__" not in p.parts
        )
    return files


def _one(dist: Path, pattern: str) -> Path:
    found = sorted(dist.glob(pattern))
    if len(found) != 1:
        raise SystemExit(f"expected one {pattern} in {dist}, found {[p.name for p in found]}")
    return found[0]


def check_wheel(wheel: Path, version: str) -> list[str]:
    problems = []
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        for source in _expected():
            name = source.relative_to(ROOT).as_posix()
            if name not in names:
                problems.append(f"{wheel.name} lacks {name}")
            elif zf.read(name) != source.read_bytes():
                problems.append(f"{wheel.name}: {name} differs from the source tree")
        info = f"pytest_specdecode-{version}.dist-info"
        meta = HeaderParser().parsestr(zf.read(f"{info}/METADATA").decode())
        entry_points = zf.read(f"{info}/entry_points.txt").decode()
        if f"{info}/licenses/LICENSE" not in names:
            problems.append(f"{wheel.name} lacks {info}/licenses/LICENSE")
        strays = sorted({n.split("/")[0] for n in names} - {"pytest_specdecode", info})
        if strays:
            problems.append(f"{wheel.name} holds more than the package: {strays}")
    expected = {
        "Version": version,
        "License-Expression": "Apache-2.0",
        "Description-Content-Type": "text/markdown",
    }
    problems += [
        f"{wheel.name} METADATA {key}: {meta.get(key)!r}, expected {value!r}"
        for key, value in expected.items()
        if meta.get(key) != value
    ]
    if "Framework :: Pytest" not in meta.get_all("Classifier", []):
        problems.append(f"{wheel.name} METADATA lacks the classifier Framework :: Pytest")
    if "specdecode = pytest_specdecode.plugin.hooks" not in entry_points:
        problems.append(f"{wheel.name} lacks the pytest11 entry point")
    return problems


def check_sdist(sdist: Path, version: str) -> list[str]:
    with tarfile.open(sdist) as tf:
        names = {n.split("/", 1)[1] for n in tf.getnames() if "/" in n}
    wanted = [
        "LICENSE", "README.md", "pyproject.toml", "tests/conftest.py", "tox.ini",
        "scripts/render_docs.py", "docs/data/example-suites.json", "benchmarks/start_order.py",
    ]  # fmt: skip
    wanted += [p.relative_to(ROOT).as_posix() for p in _expected()]
    return [f"{sdist.name} lacks {name}" for name in wanted if name not in names]


def main(dist: Path) -> int:
    version = _version()
    wheel = _one(dist, f"pytest_specdecode-{version}-py3-none-any.whl")
    sdist = _one(dist, f"pytest_specdecode-{version}.tar.gz")
    problems = check_wheel(wheel, version) + check_sdist(sdist, version)
    for problem in problems:
        print(problem, file=sys.stderr)
    if not problems:
        print(f"{wheel.name}: {len(_expected())} data files, metadata and entry point ok")
        print(f"{sdist.name}: tests, license and data files ok")
    return 1 if problems else 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    sys.exit(main(Path(sys.argv[1])))
