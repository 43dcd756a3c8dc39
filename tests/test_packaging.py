"""actkit installs like a library (issue 30).

The sdist and the wheel built from it hold every package folder (``actkit/`` and
``extractors/``, the latter as ``actkit.extractors``) and the shipped zoo (``data/zoo`` as
package data ``actkit/zoo/data``), so a subpackage cannot be forgotten; the wheel installed
non-editable into a fresh environment works from a folder outside the checkout; and each
extra installs and imports what it names. ``.ci/run`` (through ``.ci/installed``) also runs
``actkit demo --quick`` from such an installation, from the wheel and from the sdist.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
import sys
import tarfile
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# where each source folder lands in the wheel
FOLDERS = {"actkit": "actkit", "extractors": "actkit/extractors", "data/zoo": "actkit/zoo/data"}
# the pages' templates (actkit/pages/templates): package data the pages read at run time
TEMPLATES = (".html", ".css", ".js")


def _source_files() -> dict[str, str]:
    """``{path in the repository: path in the wheel}``: every ``.py`` of the package folders
    (a folder holding one must be a package) and every file of the zoo."""
    out = {}
    for folder, dest in FOLDERS.items():
        for p in sorted((REPO / folder).rglob("*")):
            rel = p.relative_to(REPO / folder).as_posix()
            if not p.is_file() or "__pycache__" in p.parts:
                continue
            if folder == "data/zoo" or p.suffix == ".py" or (p.parent.name == "templates" and p.suffix in TEMPLATES):
                out[p.relative_to(REPO).as_posix()] = f"{dest}/{rel}"
    return out


def _fresh_clone(where: Path) -> Path:
    """The checkout's files as a fresh clone has them (tracked and new, not ignored): a build
    from the checkout itself would also pick up a stale ``actkit.egg-info``, whose file list
    once smuggled forgotten subpackages into the wheel as "data"."""
    import shutil

    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True, check=True, timeout=120).stdout.decode().split("\0")
    for rel in filter(None, listed):
        src = REPO / rel
        if src.is_file():
            (where / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, where / rel)
    return where


@pytest.fixture(scope="module")
def dist(tmp_path_factory):
    """``python -m build`` in a fresh copy: the sdist, then the wheel built from the unpacked sdist."""
    out = tmp_path_factory.mktemp("dist")
    source = _fresh_clone(tmp_path_factory.mktemp("clone"))
    proc = subprocess.run([sys.executable, "-m", "build", "--outdir", str(out), str(source)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    (wheel,), (sdist,) = out.glob("actkit-*.whl"), out.glob("actkit-*.tar.gz")
    return wheel, sdist


def test_the_wheel_holds_every_package_folder_and_the_zoo(dist):
    wheel, _ = dist
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = _source_files()
    assert any(p.startswith("actkit/runners/") for p in expected.values())  # the ones once forgotten
    assert any(p.startswith("actkit/stats/") for p in expected.values())
    assert any(p.startswith("actkit/zoo/data/pythia-tiny-seed0/") for p in expected.values())
    assert "actkit/pages/templates/common.js" in expected.values()
    missing = sorted(src for src, dest in expected.items() if dest not in names)
    assert missing == [], f"not in the wheel: {missing[:20]}"
    # nothing lands outside the actkit package (no top-level extractors/ or data/)
    tops = {n.split("/")[0] for n in names}
    assert tops == {"actkit", f"{wheel.name.split('-')[0]}-{wheel.name.split('-')[1]}.dist-info"}, tops
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "actkit = actkit.cli:main" in zipfile.ZipFile(wheel).read(entry_points).decode()


def test_the_sdist_holds_the_sources_the_wheel_is_built_from(dist):
    _, sdist = dist
    with tarfile.open(sdist) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    wanted = {"setup.py", "pyproject.toml", "README.md", "LICENSE", *_source_files()}
    assert sorted(wanted - names) == []


def _fresh_env(where: Path) -> Path:
    """A virtual environment that reuses the heavy dependencies of this one (``torch`` ...)
    but not its actkit: the current interpreter's site-packages through a ``.pth`` file."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True, timeout=300)
    python = where / "bin" / "python"
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    outer = [p for p in sys.path if p.endswith(("site-packages", "dist-packages"))]
    Path(site, "_outer_site.pth").write_text("\n".join(outer) + "\n")
    return python


def _clean_env() -> dict:
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "ACTKIT_ZOO", "VIRTUAL_ENV")}


@pytest.mark.slow
def test_the_installed_wheel_works_from_any_folder(dist, tmp_path):
    """Installed non-editable into a fresh environment: actkit, its subpackages and the zoo
    come from that environment's site-packages, run from a folder outside the checkout."""
    wheel, _ = dist
    python = _fresh_env(tmp_path / "venv")
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    # this pip, told to install into the fresh environment's site-packages (no pip of its own)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-compile",
                    "--target", site, str(wheel)], check=True, timeout=300, capture_output=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    code = ("import actkit, actkit.runners, actkit.stats, actkit.extractors\n"
            "from actkit import zoo\n"
            "print(actkit.__file__, actkit.runners.__file__, actkit.extractors.__file__, zoo.zoo_dir(), sep='\\n')\n"
            "print(*(m['spec'] for m in zoo.list_models()), sep='\\n')\n")
    proc = subprocess.run([python, "-c", code], cwd=elsewhere, capture_output=True, text=True, env=_clean_env(),
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    for line in lines[:4]:
        assert Path(line).resolve().is_relative_to(Path(site).resolve()), (line, site)
    assert Path(lines[3]).resolve() == (Path(site) / "actkit" / "zoo" / "data").resolve()
    specs = lines[4:]
    assert len(specs) == 8 and all(Path(re.sub(r"^timm:local-dir:", "", s)).is_dir() for s in specs), specs
    cli = subprocess.run([python, "-m", "actkit", "info", "--help"], cwd=elsewhere, capture_output=True, text=True,
                         env=_clean_env(), timeout=300)
    assert cli.returncode == 0 and cli.stdout.startswith("usage: actkit info"), cli.stderr[-2000:]
    page = subprocess.run([python, "-c", "from actkit.pages import render_page; import actkit.pages as p; "
                           "print(p.__file__); print(len(render_page('compare', {}, 't')))"],
                          cwd=elsewhere, capture_output=True, text=True, env=_clean_env(), timeout=300)
    assert page.returncode == 0, page.stderr[-2000:]     # the templates came with the wheel
    assert Path(page.stdout.split()[0]).resolve().is_relative_to(Path(site).resolve()) and int(page.stdout.split()[1]) > 5000


# ----------------------------------------------------------------------------- the extras
def _pyproject_extras() -> dict:
    import tomllib

    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]


# what a requirement's own extra adds to import, beyond the distribution's top-level module
_EXTRA_MODULES = {("dask", "array"): ["dask.array"]}


def _requirements(extra: str):
    from packaging.requirements import Requirement

    reqs = [Requirement(r) for r in metadata.requires("actkit") or []]
    return [r for r in reqs if r.marker is not None and r.marker.evaluate({"extra": extra})]


@functools.cache
def _packages_distributions() -> dict[str, list[str]]:
    """``metadata.packages_distributions()`` read once (it reads every installed distribution's
    file list, about a second here; the environment does not change while the tests run)."""
    return metadata.packages_distributions()


def _module_of(dist_name: str) -> str:
    """The top-level module a distribution provides (``python-picard`` -> ``picard``)."""
    provided = sorted(m for m, dists in _packages_distributions().items()
                      if any(_norm(d) == _norm(dist_name) for d in dists) and not m.startswith("_"))
    if _norm(dist_name).replace("-", "_") in provided:
        return _norm(dist_name).replace("-", "_")
    assert len(provided) == 1, (dist_name, provided)
    return provided[0]


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@pytest.mark.parametrize("extra", ["dask", "bench", "test"])
def test_each_extra_installs_and_imports_what_it_names(extra):
    """Every requirement of ``actkit[extra]`` (from the installed metadata) is installed at a
    version it allows, with its own extras' requirements, and its modules import."""
    assert extra in _pyproject_extras()
    from packaging.requirements import Requirement

    declared = {_norm(Requirement(r).name) for r in _pyproject_extras()[extra]}
    reqs = _requirements(extra)
    assert {_norm(r.name) for r in reqs} == declared, \
        "the installed metadata is stale against pyproject.toml: reinstall actkit (pip install -e .)"
    modules = []
    for req in reqs:
        if _norm(req.name) == "actkit":  # actkit[bench,dask] inside [test]: those extras are checked by their own case
            assert req.extras <= set(_pyproject_extras()), req
            continue
        version = metadata.version(req.name)
        assert req.specifier.contains(version, prereleases=True), (str(req), version)
        for sub in req.extras:  # e.g. dask[array]: what dask's "array" extra requires is installed too
            for inner in (metadata.requires(req.name) or []):
                r = Requirement(inner)
                if r.marker is not None and r.marker.evaluate({"extra": sub}):
                    assert r.specifier.contains(metadata.version(r.name), prereleases=True), (str(req), str(r))
            assert (req.name, sub) in _EXTRA_MODULES, f"add what {req.name}[{sub}] imports to _EXTRA_MODULES"
            modules += _EXTRA_MODULES[(req.name, sub)]
        modules.append(_module_of(req.name))
    proc = subprocess.run([sys.executable, "-c", "import " + ", ".join(modules)], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, (modules, proc.stderr[-2000:])
