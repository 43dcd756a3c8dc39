"""What users see of the analysis, recorded: the reference of ``tests/test_compare_recorded.py``.

A refactor of the analysis (the input-sample groups, compare's steps, the CLI, the matching,
the JSON helpers) must change nothing a user sees. This module computes what they see, on
fixed inputs, as plain JSON values (:func:`record_all`), and, run as a script, writes it::

    python tests/_compare_record.py            # tests/data/compare_recorded.json

The surfaces (each a key of the recording's ``results``):

- ``compare``: ``actkit.compare(...).to_dict()`` on two zoo pairs (Pythia-tiny's
  ``final_hidden`` on 40 texts: token rows grouped by text; ResNet-tiny's ``layer3`` on 128
  images, 4 rows each), with measures, permutations and bootstrap asked, plus the matched
  source correlations, the held-out rows and the printed table;
- ``compare_many``: the matrices and results of :func:`actkit.alignment.compare_many` over
  three Pythia stores (seed 0, seed 1 and a perturbed copy of seed 0), and the consensus ICA
  on a small planted pair;
- ``cli``: ``actkit compare``'s stdout, stderr and ``--json`` for two stores, three stores
  (``--metric`` rigid, ica_efficiency, linear_cka), ``--layer-matrix`` and its one-line
  errors;
- ``inference``: the records (p-values, null means and SDs, intervals) of every moment-based
  and row-based measure on a planted pair of unequal sample lengths, by the pair route and
  by the rows' product, and the draws, the chance pairing, the clustered standard error and
  the Gaussian check that build on the input-sample groups;
- ``stability``: the Hungarian matchings (``mcc``, the dictionary's, the ICA restarts'),
  ``dictionary_stability`` and the ``dictionary`` measure;
- ``json``: what the JSON writers make of numpy values.

Every input is made here (the zoo stores by :func:`actkit.extract` with the demo's
settings), so the recording needs nothing but the repository. ``inputs_sha256`` holds a
digest of the extracted rows: where the extraction itself changed, the test says so
instead of blaming the analysis.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import math
import platform
import sys
import time
import warnings
from pathlib import Path

RECORD = Path(__file__).resolve().parent / "data" / "compare_recorded.json"
COMMAND = "python tests/_compare_record.py"

# (zoo_pairs() index, inputs per model)
PAIRS = {"pythia": (0, 40), "resnet": (2, 128)}
KWARGS = dict(
    measures=["linear_cka", "mean_cca", "svcca", "procrustes", "rsa", "mutual_knn", "rbf_cka", "dcor"],
    permutations=9, bootstrap=40, max_rows=500, ica_restarts=2, ica_max_iter=1000, ica_max_rows=2000,
    random_state=0, ica_seed=0, threads=1, progress=False,
)
#: the ICA settings of the multi-store surfaces (API and CLI): fits of three sides stay quick
MANY_ICA = dict(ica_restarts=2, ica_max_iter=1000, ica_max_rows=2000)
# keys that measure time, not the result: never compared
VOLATILE_PREFIXES = ("seconds",)
# on another machine or other libraries: the keys that come from the FastICA fits (their optimum
# moves with 1e-7 noise, README "ICA alignment"), and the notes that report on those fits
ICA_FIT_PREFIXES = ("ica",)
ICA_FIT_NOTE_WORDS = ("ica_identifiable", "FastICA", "ica_efficiency", "ica is below rigid")
# on another machine or other libraries: numbers to this relative tolerance (BLAS rounding of
# another CPU moves the last few bits, never the sixth digit of these well-conditioned results),
# or within this absolute one: values that are rounding themselves (a store against itself:
# errors of 1e-8) and spreads of ill-conditioned nulls (mean CCA's null SD of 0.0035 moved by
# 6e-7 under SSE4.2 kernels) have no sixth digit to keep; every value here is a share, an error
# over a diameter or a correlation, printed to 3 digits
CROSS_MACHINE_RTOL = 1e-6
CROSS_MACHINE_ATOL = 1e-6
#: the threads every surface runs at (record_all's ``threads``)
THREADS = [1]


# ----------------------------------------------------------------------------- JSON values
def plain(x):
    """``x`` as JSON values: numpy arrays and scalars as lists and numbers, tuples as lists."""
    import numpy as np

    if isinstance(x, dict):
        return {str(k): plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [plain(v) for v in x]
    if isinstance(x, np.ndarray):
        return plain(x.tolist())
    if isinstance(x, np.generic):
        return x.item()
    return x


def _rows_digest(*layers) -> str:
    import numpy as np

    h = hashlib.sha256()
    for X in layers:
        h.update(np.ascontiguousarray(np.asarray(X[:])).tobytes())
    return h.hexdigest()


# ----------------------------------------------------------------------------- the stores
def zoo_stores(folder) -> dict:
    """The zoo stores of :data:`PAIRS` (``{pair: (path_a, path_b, layer)}``) and ``"pythia_c"``,
    a perturbed copy of Pythia-tiny seed 0 on the same texts, extracted into ``folder`` (reused
    where already there)."""
    import torch  # the extraction's forward passes: one thread, as recorded

    from actkit.demo import _extract, zoo_pairs
    from cli_helpers import perturbed_copy

    torch.set_num_threads(1)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    out = {}
    for name, (index, n_inputs) in PAIRS.items():
        pair = zoo_pairs()[index]
        layer_b = pair.layer_b or pair.layer
        out[name] = (_extract(pair.model_a, pair, pair.layer, folder, "", n_inputs, "cpu", False),
                     _extract(pair.model_b, pair, layer_b, folder, "", n_inputs, "cpu", False), pair.layer)
    pair = zoo_pairs()[0]
    copy = folder / "pythia-tiny-perturbed"
    if not copy.is_dir():
        copy.mkdir()
        perturbed_copy(Path(pair.model_a), copy)
    out["pythia_c"] = _extract(str(copy), pair, pair.layer, folder, "", PAIRS["pythia"][1], "cpu", False)
    return out


def _quiet():
    stack = contextlib.ExitStack()
    stack.enter_context(warnings.catch_warnings())
    warnings.simplefilter("ignore")   # the notes are in to_dict()["notes"]
    return stack


def compare_surface(stores) -> dict:
    """``{pair: {...}}``: ``to_dict()``, the matched and source correlations, the held-out rows
    and the text table of ``compare(A, B, **KWARGS)``."""
    import actkit
    from actkit.report import format_table

    out = {}
    for name in PAIRS:
        path_a, path_b, layer = stores[name]
        A, B = actkit.open_store(path_a)[layer], actkit.open_store(path_b)[layer]
        with _quiet():
            res = actkit.compare(A, B, **{**KWARGS, "threads": THREADS[0]})
        out[name] = {"to_dict": res.to_dict(), "matched_correlations": plain(res.matched_correlations),
                     "source_correlation": plain(res.source_correlation), "heldout_rows": plain(res.heldout_rows),
                     "table": format_table([res], [layer])}
    return out


def compare_many_surface(stores) -> dict:
    """compare_many over three Pythia stores (every method; the metric rigid), the matrix of
    ``linear_cka`` and of ``ica_efficiency``, and the consensus ICA on a planted pair."""
    import numpy as np

    import actkit
    from actkit.alignment import compare_many

    path_a, path_b, layer = stores["pythia"]
    layers = [actkit.open_store(p)[layer] for p in (path_a, path_b, stores["pythia_c"])]
    kw = dict(max_rows=500, threads=THREADS[0], progress=False, random_state=0, **MANY_ICA)
    out = {}
    with _quiet():
        matrix, results = compare_many(layers, metric="rigid", methods=("permutation", "rigid", "linear", "ica"),
                                       **kw)
        out["rigid"] = {"matrix": plain(matrix), "results": {f"{i},{j}": r.to_dict() for (i, j), r in results.items()}}
        for metric in ("linear_cka", "ica_efficiency", "rsa"):
            matrix, _ = compare_many(layers, metric=metric, **kw)
            out[metric] = plain(matrix)
    rng = np.random.default_rng(7)
    S = rng.laplace(size=(2400, 4))
    groups = np.repeat(np.arange(600), 4)
    A = S @ rng.normal(size=(4, 4))
    B = S @ rng.normal(size=(4, 5)) + 0.1 * rng.normal(size=(2400, 5))
    with _quiet():
        res = actkit.compare(A, B, groups=groups, ica_method="consensus", ica_restarts=3, threads=THREADS[0],
                             progress=False, bootstrap=40, permutations=9)
    out["consensus"] = {"to_dict": res.to_dict(), "matched_correlations": plain(res.matched_correlations)}
    return out


# ----------------------------------------------------------------------------- the command line
def _cli(argv) -> dict:
    """``actkit ARGV`` in this process, in the recording's folder (paths relative to it): exit
    code, stdout, stderr, and the JSON it wrote (``<json>`` in ``argv``)."""
    from actkit.cli import main

    json_path = Path("work", "out.json")
    if json_path.exists():
        json_path.unlink()
    argv = [str(json_path) if a == "<json>" else str(a) for a in argv]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), _quiet():
        code = main(argv)
    doc = json.loads(json_path.read_text(encoding="utf-8")) if json_path.exists() else None
    return {"code": code, "stdout": out.getvalue(), "stderr": err.getvalue(), "json": doc}


def cli_surface(stores, root) -> dict:
    """``actkit compare`` as a user runs it, in ``root`` (the stores named by their paths relative
    to it, as a user in that folder names them): two stores, three stores, the layer map, errors."""
    def rel(p):
        return Path(p).resolve().relative_to(Path(root).resolve())

    a, b, _ = (rel(p) if i < 2 else p for i, p in enumerate(stores["pythia"]))
    c = rel(stores["pythia_c"])
    r = rel(stores["resnet"][0])
    ica = ["--ica-restarts", "2", "--ica-max-iter", "1000", "--ica-max-rows", "2000"]
    common = ["--quiet", "--threads", str(THREADS[0])]
    runs = {
        "two": ["compare", a, b, "--measures", "rsa,svcca", "--permutations", "9", "--bootstrap", "40",
                "--max-rows", "500", *ica, "--json", "<json>", *common],
        "two_compact": ["compare", a, b, "--methods", "permutation,rigid", "--bootstrap", "40", "--compact",
                        "--json", "<json>", *common],
        "three_rigid": ["compare", a, b, c, "--json", "<json>", *common],
        "three_ica_efficiency": ["compare", a, b, c, "--metric", "ica_efficiency", *ica, "--json", "<json>",
                                 *common],
        "three_linear_cka": ["compare", a, b, c, "--metric", "linear_cka", "--json", "<json>", *common],
        "layer_matrix": ["compare", a, b, "--layer-matrix", "--permutations", "9", "--json", "<json>", *common],
        "error_other_inputs": ["compare", a, r, *common],
        "error_other_inputs_three": ["compare", a, b, r, *common],
        "error_layer_matrix_inputs": ["compare", a, r, "--layer-matrix", *common],
        "error_bootstrap": ["compare", a, b, "--bootstrap", "3", *common],
        "error_permutations": ["compare", a, b, "--permutations", "-1", *common],
        "error_confidence": ["compare", a, b, "--bootstrap", "40", "--confidence", "1.5", *common],
        "error_interval": ["compare", a, b, "--interval", "bca", *common],
        "error_metric": ["compare", a, b, c, "--metric", "bogus", *common],
        "error_metric_methods": ["compare", a, b, c, "--metric", "ica", "--methods", "rigid", *common],
        "error_method": ["compare", a, b, "--methods", "rigid,affine", *common],
        "error_few_samples": ["compare", a, b, "--permutations", "9", "--eval-fraction", "0.999", *common],
    }
    with contextlib.chdir(root):
        return {name: _cli(argv) for name, argv in runs.items()}


# ----------------------------------------------------------------------------- the inference
def _planted(seed=51):
    """A planted pair in rows of unequal sample lengths (one sample alone in its length,
    samples of one row), rows of a sample not contiguous, sample ids not 0..G-1."""
    import numpy as np

    rng = np.random.default_rng(seed)
    lengths = np.r_[np.full(14, 3), np.full(9, 4), [6], np.full(7, 1), np.full(5, 2)]
    groups = np.repeat(np.arange(lengths.size) * 7 + 3, lengths)
    groups = groups[rng.permutation(groups.size)]
    n = groups.size
    A = rng.normal(size=(n, 6))
    B = A @ rng.normal(size=(6, 5)) * 0.5 + rng.normal(size=(n, 5)) + np.sin(groups)[:, None]
    return A, B, groups


def inference_surface() -> dict:
    """Records of every resampled measure on :func:`_planted`, by both permutation routes,
    and what builds on the input-sample groups."""
    import numpy as np

    from actkit.alignment._sides import chance_cross_scatter, chance_pairing
    from actkit.alignment._uncertainty import error_records, similarity_records
    from actkit.ica._gaussianity import gaussianity
    from actkit.inference import Samples, bootstrap_draws, infer, permutation_draws
    from actkit.inference import _pairs
    from actkit.measures import parse_measures

    A, B, groups = _planted()
    chosen = parse_measures(["svcca", "pwcca", "procrustes", "shape_metric:alpha=0.5", "bures", "rsa",
                             "mutual_knn:k=5", "jaccard_knn:k=5", "cknna:k=5", "dcor", "rbf_cka"])
    out = {}
    gain = _pairs.PAIR_GAIN
    try:
        for route, value in (("pairs", 0.0), ("rows", math.inf)):
            _pairs.PAIR_GAIN = value
            for dtype, interval, conf in ((np.float64, "basic", 0.9), (np.float32, "percentile", 0.95)):
                records, info = similarity_records(
                    A, B, groups, chosen, permutations=25, bootstrap=40, confidence=conf, interval=interval,
                    random_state=3, dtype=dtype, max_rows=90, progress=False)
                key = f"{route}_{np.dtype(dtype).name}"
                out[key] = {"records": {k: r.as_dict() for k, r in records.items()}, "info": plain(info)}
    finally:
        _pairs.PAIR_GAIN = gain
    samples = Samples(A, B, None)
    recs, info = infer(samples, {"trace": (lambda m: float(np.trace(m.Sab[:5, :5])), "similarity")},
                       permutations=12, bootstrap=40, random_state=1)
    out["rows_alone"] = {"records": {k: r.as_dict() for k, r in recs.items()}, "info": plain(info)}
    S = Samples(A, B, groups)
    perms, movable = permutation_draws(S.n_s, 6, 2)
    out["draws"] = {"n_s": plain(S.n_s), "perms": plain(perms), "movable": movable,
                    "boot": plain(bootstrap_draws(S.G, 5, 2)), "row_order": plain(S.row_order(perms[1]))}
    out["chance_pairing"] = [plain(chance_pairing(groups, 4, w)) for w in range(2)]
    out["chance_cross_scatter"] = plain(chance_cross_scatter(A, B, 4, groups=groups))
    d = np.random.default_rng(2).normal(size=groups.size)
    from actkit._groups import clustered_se

    out["ratio_se"] = [clustered_se(d, groups), clustered_se(d, None)]
    errs = {"rigid": np.abs(d), "permutation": np.abs(d) + 0.5}
    recs, G = error_records(errs, groups, 3.0, {"rigid": 0.3, "permutation": 0.4}, bootstrap=40, confidence=0.9,
                            interval="basic", random_state=5)
    out["error_records"] = {"G": G, "records": {k: r.as_dict() for k, r in recs.items()}}
    rng = np.random.default_rng(3)
    Z = rng.laplace(size=(3000, 4)) @ rng.normal(size=(4, 4))
    out["gaussianity"] = {"rows": gaussianity(Z), "by_sample": gaussianity(Z, np.repeat(np.arange(1000), 3)),
                          "within": gaussianity(Z, np.repeat(np.arange(30), 100)),
                          "gaussian": gaussianity(rng.normal(size=(2500, 3)), np.arange(2500) // 5)}
    return out


# ----------------------------------------------------------------------------- matching, JSON
def stability_surface() -> dict:
    """The Hungarian matchings of ``mcc``, the dictionary and the ICA restarts, and what builds on them."""
    import numpy as np

    import actkit
    from actkit.alignment._ica_best import shared_sources
    from actkit.alignment._ica_consensus import identified_sources, pair_sources
    from actkit.dictionary._stability import match_atoms, match_codes
    from actkit.metrics import mcc

    rng = np.random.default_rng(11)
    Z = rng.laplace(size=(300, 6))
    Ze = Z[:, [3, 1, 0, 5, 2, 4]] * np.array([1, -2, 3, -1, 1, 0.5]) + 0.3 * rng.normal(size=(300, 6))
    score, (r, c) = mcc(Z, Ze, return_matching=True)
    out = {"mcc": [score, plain(r), plain(c)], "mcc_wide": mcc(Z, Ze[:, :4])}
    D = rng.normal(size=(8, 5))
    D /= np.linalg.norm(D, axis=1, keepdims=True)
    fits = []
    for s in range(4):
        E = D[np.random.default_rng(s).permutation(8)] * np.where(np.arange(8) % 2, -1, 1)[:, None]
        fits.append(E + 0.05 * np.random.default_rng(10 + s).normal(size=E.shape))
    out["match_atoms"] = plain(match_atoms(*(F / np.linalg.norm(F, axis=1, keepdims=True) for F in fits[:2])))
    out["match_codes"] = plain(match_codes(Z, Ze))
    X = rng.normal(size=(200, 5))
    out["dictionary_stability"] = actkit.dictionary_stability(fits, random_state=0).to_dict()
    rot = [np.linalg.qr(np.random.default_rng(s).normal(size=(5, 5)))[0] for s in range(3)]
    rot[1] = rot[0][[2, 0, 1, 4, 3]] * np.array([1, -1, 1, 1, -1])[:, None]
    U, versions = identified_sources(rot[:2])
    out["identified_sources"] = [plain(U), plain(versions)]
    out["pair_sources"] = plain(pair_sources(rot))
    out["shared_sources"] = [shared_sources(rot[0], rot[1]), shared_sources(rot[0], rot[2])]
    with _quiet():
        out["dictionary_measure"] = actkit.alignment.measure(X, X @ rng.normal(size=(5, 5)), "dictionary")
    return out


def json_surface(folder) -> dict:
    """What the JSON writers make of numpy values (NaN as Python float and as numpy scalar)."""
    import numpy as np

    from actkit._atomic import write_json_atomic
    from actkit.pages._render import page_json
    from actkit.synthetic._result import Claim, ExperimentResult

    values = {"f32": np.float32(1.5), "i64": np.int64(3), "b": np.bool_(True), "arr": np.arange(3.0),
              "nan": float("nan"), "tuple": (1, 2.5), 4: "key"}
    res = ExperimentResult("x", "t", ["a"], [{"a": np.float64(0.25), "n": float("nan")}],
                           [Claim("c", np.bool_(True), "d")], settings={"s": np.int32(2)}, extra=values)
    path = Path(folder) / "w.json"
    write_json_atomic(path, {k: v for k, v in values.items() if k != "nan"}, indent=1)
    return {"experiment": res.to_dict(), "page_json": page_json({"v": values, "t": "</script>"}),
            "write_json_atomic": path.read_text(encoding="utf-8")}


def record_all(folder, timings=None, threads=1) -> dict:
    """Every surface, the stores extracted into ``folder``, computed at ``threads`` threads (the
    recording's 1; the results are the same at any number)."""
    import actkit
    from actkit._threads import use_threads

    folder = Path(folder)
    stores = zoo_stores(folder / "stores")
    work = folder / "work"
    work.mkdir(parents=True, exist_ok=True)
    surfaces = {"compare": lambda: compare_surface(stores), "compare_many": lambda: compare_many_surface(stores),
                "cli": lambda: cli_surface(stores, folder), "inference": inference_surface,
                "stability": stability_surface, "json": lambda: json_surface(work)}
    results = {}
    THREADS[0] = int(threads)
    with use_threads(threads):
        for name, make in surfaces.items():
            t0 = time.perf_counter()
            results[name] = make()
            if timings is not None:
                timings[name] = time.perf_counter() - t0
    layers = [(a, b, la) for a, b, la in (stores["pythia"], stores["resnet"])]
    digest = _rows_digest(*(actkit.open_store(p)[la] for a, b, la in layers for p in (a, b)),
                          actkit.open_store(stores["pythia_c"])[stores["pythia"][2]])
    return {"inputs_sha256": digest, "results": json.loads(json.dumps(plain(results)))}


# ----------------------------------------------------------------------------- comparing
def differences(recorded, fresh, rtol=1e-12, path="", atol=0.0) -> list:
    """Where ``fresh`` departs from ``recorded`` (JSON values): one line per difference.

    Dicts must have the same keys (those starting with :data:`VOLATILE_PREFIXES` aside),
    lists the same length; numbers agree to ``rtol`` relative or ``atol`` absolute (``|a - b|
    <= max(rtol max(|a|, |b|), atol)``; NaN equals NaN), strings, booleans and None exactly; a bool is never a number.
    """
    where = path or "(top)"
    if isinstance(recorded, dict) and isinstance(fresh, dict):
        keep = lambda d: {k: v for k, v in d.items() if not str(k).startswith(VOLATILE_PREFIXES)}  # noqa: E731
        recorded, fresh = keep(recorded), keep(fresh)
        out = [f"{where}: key {k!r} is gone" for k in recorded if k not in fresh]
        out += [f"{where}: new key {k!r}" for k in fresh if k not in recorded]
        for k in recorded:
            if k in fresh:
                out += differences(recorded[k], fresh[k], rtol, f"{path}.{k}" if path else str(k), atol)
        return out
    if isinstance(recorded, list) and isinstance(fresh, list):
        if len(recorded) != len(fresh):
            return [f"{where}: {len(fresh)} items, recorded {len(recorded)}"]
        return [d for i, (a, b) in enumerate(zip(recorded, fresh)) for d in differences(a, b, rtol, f"{where}[{i}]", atol)]
    numbers = (int, float)
    if isinstance(recorded, numbers) and isinstance(fresh, numbers) \
            and not isinstance(recorded, bool) and not isinstance(fresh, bool):
        a, b = float(recorded), float(fresh)
        if (math.isnan(a) and math.isnan(b)) or a == b or abs(a - b) <= max(rtol * max(abs(a), abs(b)), atol):
            return []
        return [f"{where}: {fresh!r}, recorded {recorded!r} (relative difference "
                f"{abs(a - b) / max(abs(a), abs(b)):.3g} > {rtol:g}" + (f", absolute {abs(a - b):.3g} > {atol:g}" if atol else "")
                + ")"]
    if type(recorded) is type(fresh) and recorded == fresh:
        return []
    if isinstance(recorded, str) and isinstance(fresh, str):
        return [f"{where}: text differs:\n--- recorded\n{recorded}\n--- now\n{fresh}"]
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


def float_kernels() -> str:
    """The instruction sets the float code runs on: torch's CPU capability and each BLAS's
    core type (threadpoolctl), with ``MKL_ENABLE_INSTRUCTIONS`` where set. Two CPUs of one
    model name (``AMD EPYC`` on a cloud machine) may differ here, and so may one CPU told to
    use other kernels (``ATEN_CPU_CAPABILITY``, ``OPENBLAS_CORETYPE``): the last bits differ."""
    import os

    import torch
    from threadpoolctl import threadpool_info

    parts = [f"torch {torch.backends.cpu.get_cpu_capability()}"]
    parts += sorted({f"{i.get('internal_api')} {i.get('architecture')}" for i in threadpool_info()
                     if i.get("user_api") == "blas"})
    if os.environ.get("MKL_ENABLE_INSTRUCTIONS"):
        parts.append(f"MKL_ENABLE_INSTRUCTIONS={os.environ['MKL_ENABLE_INSTRUCTIONS']}")
    return "; ".join(parts)


def recorded_environment() -> dict:
    """What a recording's values to 1e-12 depend on: the library versions, Python, the CPU and
    the kernels it runs (:func:`float_kernels`)."""
    import actkit
    from actkit._versions import library_versions

    return {"actkit": actkit.__version__, **library_versions(), "python": platform.python_version(),
            "machine": platform.machine(), "cpu": cpu_model(), "kernels": float_kernels()}


def same_environment(recorded_with: dict) -> bool:
    """Whether this process runs where ``recorded_with`` (a recording's ``recorded_with``) was
    made: the same library versions, Python and CPU model (the command aside)."""
    here = recorded_environment()
    return {k: v for k, v in recorded_with.items() if k != "command"} == here


def _drop_ica(d):
    if isinstance(d, dict):
        out = {k: _drop_ica(v) for k, v in d.items() if not str(k).startswith(ICA_FIT_PREFIXES)}
        if isinstance(out.get("notes"), list):
            out["notes"] = [n for n in out["notes"] if not any(w in str(n) for w in ICA_FIT_NOTE_WORDS)]
        return out
    if isinstance(d, list):
        return [_drop_ica(v) for v in d]
    return d


def without_ica_fits(results: dict) -> dict:
    """``results`` less what comes from the FastICA fits: at any depth, the keys starting with
    :data:`ICA_FIT_PREFIXES` and the notes naming :data:`ICA_FIT_NOTE_WORDS`; the printed
    text, whose lines carry ICA numbers, and the surfaces that are FastICA fits (the
    consensus run, the ``ica_efficiency`` matrices) left out."""
    out = _drop_ica(results)
    for name in ("compare", "cli"):
        for entry in out.get(name, {}).values():
            for key in ("table", "stdout", "stderr", "json", "matched_correlations", "source_correlation"):
                entry.pop(key, None)
    many = out.get("compare_many", {})
    for key in ("consensus", "ica_efficiency"):
        many.pop(key, None)
    return out


def record(out=RECORD, folder=None) -> Path:
    """Run :func:`record_all` and write it, with what it was recorded with, to ``out``."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        fresh = record_all(folder or tmp)
    doc = {"recorded_with": {"command": COMMAND, **recorded_environment()},
           "pairs": {k: list(v) for k, v in PAIRS.items()}, "kwargs": KWARGS, **fresh}
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(RECORD), help="where to write the JSON (default: %(default)s)")
    parser.add_argument("--folder", help="extract the stores here (kept; default: a temporary folder)")
    args = parser.parse_args(argv)
    print(record(args.out, args.folder))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))   # cli_helpers, as the tests import it
    sys.exit(main())
