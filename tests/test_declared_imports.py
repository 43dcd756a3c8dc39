"""Every package that actkit or its test suite imports is declared (issue 39).

CI installs exactly what the README says (``pip install ... -e ".[test]"``) into a fresh virtual
environment, so a package that the code imports but pyproject.toml does not declare fails
there, or worse, passes only because it came along with something else. These tests read every
import of ``actkit/``, ``extractors/`` and ``tests/`` from the source (imports inside functions,
``pytest.importorskip("x")`` and ``importlib.import_module("x")`` with a literal name count),
map each top-level module to the distribution that installs it, and check that the distribution
is declared by name: the package's imports among the core dependencies or an extra, the
suite's among the core dependencies and the ``test`` extra (with the extras it names).
"""

from __future__ import annotations

import ast
import functools
import re
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]

# modules of this repository that are imported by their own name, not installed (and
# ``toy_measure``, which tests/test_measures.py writes into a temporary folder to import it)
LOCAL = ({"actkit", "extractors", "tests", "conftest", "toy_measure"}
         | {p.stem for p in (REPO / "tests").glob("*.py")})


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def imported_modules(folder: str) -> dict[str, str]:
    """Top-level module -> the first file:line that imports it, over every .py under folder."""
    found: dict[str, str] = {}
    for path in sorted((REPO / folder).rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                  and node.func.attr in ("importorskip", "import_module") and node.args
                  and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
                names = [node.args[0].value]
            for name in names:
                top = name.split(".")[0]
                if top and top not in sys.stdlib_module_names and top not in LOCAL:
                    found.setdefault(top, f"{path.relative_to(REPO)}:{node.lineno}")
    return found


def declared(*extras: str) -> set[str]:
    """Distributions declared by the core dependencies and the given extras (an extra may name
    ``actkit[other]``: its requirements count too)."""
    names, todo, seen = set(), list(extras), set()
    reqs = [Requirement(r) for r in PYPROJECT["dependencies"]]
    while todo:
        extra = todo.pop()
        if extra in seen:
            continue
        seen.add(extra)
        for r in map(Requirement, PYPROJECT["optional-dependencies"][extra]):
            if _norm(r.name) == "actkit":
                todo += sorted(r.extras)
            else:
                reqs.append(r)
    for r in reqs:
        names.add(_norm(r.name))
    return names


@functools.cache
def _packages_distributions() -> dict[str, list[str]]:
    """Top-level module -> distributions, read once: ``metadata.packages_distributions()``
    reads every installed distribution's file list (about a second here), and the environment
    does not change while the tests run."""
    return metadata.packages_distributions()


def distributions_of(module: str) -> set[str]:
    return {_norm(d) for d in _packages_distributions().get(module, [])}


def _undeclared(modules: dict[str, str], allowed: set[str]) -> list[str]:
    missing = []
    for module, where in sorted(modules.items()):
        dists = distributions_of(module)
        if not dists:
            missing.append(f"{module} ({where}): not installed by any distribution in this environment")
        elif not dists & allowed:
            missing.append(f"{module} ({where}): installed by {sorted(dists)}, which pyproject.toml does not declare")
    return missing


def test_every_package_the_library_imports_is_a_declared_dependency():
    modules = {**imported_modules("actkit"), **imported_modules("extractors")}
    assert {"torch", "h5py", "sklearn"} <= set(modules)  # the scan sees the real imports
    allowed = declared(*PYPROJECT["optional-dependencies"])
    assert not _undeclared(modules, allowed), "\n".join(_undeclared(modules, allowed))


def test_every_package_the_test_suite_imports_is_installed_by_the_readme_command():
    """The README installs ``.[test]``: the suite may import only what that declares."""
    readme = (REPO / "README.md").read_text()
    assert 'pip install torch==2.14.1 torchvision==0.29.1 -e ".[test]"' in readme
    modules = imported_modules("tests")
    assert {"pytest", "torch", "dcor"} <= set(modules)
    allowed = declared("test")
    assert not _undeclared(modules, allowed), "\n".join(_undeclared(modules, allowed))


def test_every_extra_the_tests_check_is_in_what_the_readme_installs():
    """tests/test_packaging.py checks the dask and bench extras import: the test extra names them."""
    assert {"dask", "bench"} <= {e for r in map(Requirement, PYPROJECT["optional-dependencies"]["test"])
                                 if _norm(r.name) == "actkit" for e in r.extras}


@pytest.mark.parametrize("source", ["import dask.array", "from numpy import linalg",
                                    "def f():\n    import pandas\n", "pytest.importorskip('sae_lens.x')"])
def test_the_scan_sees_each_kind_of_import(tmp_path, monkeypatch, source):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "m.py").write_text(source)
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    assert len(imported_modules("pkg")) == 1


def test_the_suite_does_not_skip_on_a_missing_package():
    """A declared test dependency is imported, not ``importorskip``-ed: a missing one is red."""
    hits = [f"{p.name}:{i}" for p in sorted((REPO / "tests").glob("*.py")) if p.name != Path(__file__).name
            for i, line in enumerate(p.read_text().splitlines(), 1) if "importorskip(" in line]
    assert not hits, hits
