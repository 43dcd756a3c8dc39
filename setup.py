"""Which files the actkit distribution installs (its metadata is in pyproject.toml).

Found, not listed: every package under ``actkit/`` and under ``extractors/`` (which stays at
the top of the repository but installs as ``actkit.extractors``: a top-level ``extractors``
package would collide with another distribution's name), and the shipped zoo ``data/zoo``,
installed as package data ``actkit/zoo/data`` (``actkit.zoo.zoo_dir`` finds it there through
``importlib.resources``), and the pages' templates (HTML, CSS, JavaScript) in
``actkit/pages/templates``. tests/test_packaging.py checks the wheel against these folders.
"""

from pathlib import Path

from setuptools import find_packages, setup

ROOT = Path(__file__).resolve().parent
ZOO = "actkit.zoo.data"  # the shipped zoo, as package data of actkit.zoo

packages = find_packages(include=["actkit", "actkit.*"])
packages += ["actkit." + name for name in find_packages(include=["extractors", "extractors.*"])]
zoo_files = sorted(p.relative_to(ROOT / "data" / "zoo").as_posix()
                   for p in (ROOT / "data" / "zoo").rglob("*") if p.is_file())

setup(
    packages=[*packages, ZOO],
    package_dir={"actkit.extractors": "extractors", ZOO: "data/zoo"},
    package_data={ZOO: zoo_files, "actkit.pages": ["templates/*.html", "templates/*.css", "templates/*.js"]},
    include_package_data=False,
)
