"""The recorded comparison of issue 43: ``actkit.compare(...).to_dict()`` on zoo stores.

``compare()`` is to be split into named steps with nothing changing for users: its
``to_dict()`` on the zoo stores, with measures, permutations and bootstrap asked, must keep
the same keys and values (to 1e-12 relative) as before the split. This module makes the
comparisons (:func:`zoo_compare_dicts`) for ``tests/test_compare_recorded.py`` and, run as a
script, records them before the change (on main, just before compare() is split)::

    python tests/_compare_record.py

which writes ``tests/data/compare_before_split.json`` (``--out PATH`` writes elsewhere).

Two zoo pairs, seed 0 -> seed 1, extracted here through the demo's own settings (layer,
pooling, inputs): Pythia-tiny's ``final_hidden`` on 40 texts (token rows, grouped by text:
the split and the resampling go by input sample) and ResNet-tiny's ``layer3`` on 128 images
(4 rows per image: FastICA on fewer components than features, by the rows rule).
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import warnings
from pathlib import Path

RECORD = Path(__file__).resolve().parent / "data" / "compare_before_split.json"
COMMAND = "python tests/_compare_record.py"

# (zoo_pairs() index, inputs per model)
PAIRS = {"pythia": (0, 40), "resnet": (2, 128)}
KWARGS = dict(
    measures=["linear_cka", "mean_cca", "svcca", "procrustes", "rsa", "mutual_knn", "rbf_cka", "dcor"],
    permutations=9, bootstrap=40, max_rows=500, ica_restarts=2, ica_max_iter=1000, ica_max_rows=2000,
    random_state=0, ica_seed=0, threads=1, progress=False,
)
# keys that measure time, not the result: never compared
VOLATILE_PREFIXES = ("seconds",)
# on another machine or other libraries: the keys that come from the FastICA fits (their optimum
# moves with 1e-7 noise, README "ICA alignment"), and the notes that report on those fits
ICA_FIT_PREFIXES = ("ica",)
ICA_FIT_NOTE_WORDS = ("ica_identifiable", "FastICA", "ica_efficiency", "ica is below rigid")
# on another machine or other libraries: numbers to this relative tolerance (BLAS rounding of
# another CPU moves the last few bits, never the sixth digit of these well-conditioned results)
CROSS_MACHINE_RTOL = 1e-6


def zoo_compare_dicts(folder) -> dict:
    """``{pair: compare(A, B, **KWARGS).to_dict()}`` for each of :data:`PAIRS`, the stores
    extracted into ``folder`` (reused where already there)."""
    import torch  # the extraction's forward passes: one thread, as recorded

    import actkit
    from actkit.demo import _extract, zoo_pairs

    torch.set_num_threads(1)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    out = {}
    for name, (index, n_inputs) in PAIRS.items():
        pair = zoo_pairs()[index]
        layer_b = pair.layer_b or pair.layer
        path_a = _extract(pair.model_a, pair, pair.layer, folder, "", n_inputs, "cpu", False)
        path_b = _extract(pair.model_b, pair, layer_b, folder, "", n_inputs, "cpu", False)
        A, B = actkit.open_store(path_a)[pair.layer], actkit.open_store(path_b)[layer_b]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")   # the notes are in to_dict()["notes"]
            out[name] = actkit.compare(A, B, **KWARGS).to_dict()
    return out


def differences(recorded, fresh, rtol=1e-12, path="") -> list:
    """Where ``fresh`` departs from ``recorded`` (JSON values): one line per difference.

    Dicts must have the same keys (those starting with :data:`VOLATILE_PREFIXES` aside),
    lists the same length; numbers agree to ``rtol`` relative (``|a - b| <= rtol max(|a|,
    |b|)``; NaN equals NaN), strings, booleans and None exactly; a bool is never a number.
    """
    where = path or "(top)"
    if isinstance(recorded, dict) and isinstance(fresh, dict):
        keep = lambda d: {k: v for k, v in d.items() if not str(k).startswith(VOLATILE_PREFIXES)}  # noqa: E731
        recorded, fresh = keep(recorded), keep(fresh)
        out = [f"{where}: key {k!r} is gone" for k in recorded if k not in fresh]
        out += [f"{where}: new key {k!r}" for k in fresh if k not in recorded]
        for k in recorded:
            if k in fresh:
                out += differences(recorded[k], fresh[k], rtol, f"{path}.{k}" if path else str(k))
        return out
    if isinstance(recorded, list) and isinstance(fresh, list):
        if len(recorded) != len(fresh):
            return [f"{where}: {len(fresh)} items, recorded {len(recorded)}"]
        return [d for i, (a, b) in enumerate(zip(recorded, fresh)) for d in differences(a, b, rtol, f"{where}[{i}]")]
    numbers = (int, float)
    if isinstance(recorded, numbers) and isinstance(fresh, numbers) \
            and not isinstance(recorded, bool) and not isinstance(fresh, bool):
        a, b = float(recorded), float(fresh)
        if (math.isnan(a) and math.isnan(b)) or a == b or abs(a - b) <= rtol * max(abs(a), abs(b)):
            return []
        return [f"{where}: {fresh!r}, recorded {recorded!r} (relative difference "
                f"{abs(a - b) / max(abs(a), abs(b)):.3g} > {rtol:g})"]
    if type(recorded) is type(fresh) and recorded == fresh:
        return []
    return [f"{where}: {fresh!r}, recorded {recorded!r}"]


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``'s ``model name``; else ``platform.processor()``):
    BLAS kernels, and so the last bits of a float, differ between CPU models."""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def recorded_environment() -> dict:
    """What a recording's values to 1e-12 depend on: the library versions, Python, the CPU."""
    import actkit
    from actkit._versions import library_versions

    return {"actkit": actkit.__version__, **library_versions(), "python": platform.python_version(),
            "machine": platform.machine(), "cpu": cpu_model()}


def same_environment(recorded_with: dict) -> bool:
    """Whether this process runs where ``recorded_with`` (a recording's ``recorded_with``) was
    made: the same library versions, Python and CPU model (the command aside)."""
    here = recorded_environment()
    return {k: v for k, v in recorded_with.items() if k != "command"} == here


def without_ica_fits(results: dict) -> dict:
    """``results`` (``{pair: to_dict()}``) less what comes from the FastICA fits: the keys
    starting with :data:`ICA_FIT_PREFIXES` and the notes naming :data:`ICA_FIT_NOTE_WORDS`."""
    out = {}
    for name, d in results.items():
        d = {k: v for k, v in d.items() if not str(k).startswith(ICA_FIT_PREFIXES)}
        if isinstance(d.get("notes"), list):
            d["notes"] = [n for n in d["notes"] if not any(w in str(n) for w in ICA_FIT_NOTE_WORDS)]
        out[name] = d
    return out


def record(out=RECORD, folder=None) -> Path:
    """Run :func:`zoo_compare_dicts` and write them, with what they were recorded with, to ``out``."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        results = zoo_compare_dicts(folder or tmp)
    doc = {
        "recorded_with": {"command": COMMAND, **recorded_environment()},
        "pairs": {k: list(v) for k, v in PAIRS.items()},
        "kwargs": KWARGS,
        "results": results,
    }
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(RECORD), help="where to write the JSON (default: %(default)s)")
    args = parser.parse_args(argv)
    print(record(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
