"""Issue 48: kill any writer at any moment, rerun the same command, and the output is the
uninterrupted run's, bit for bit, with nothing left beside it.

Every writer (extraction of text and of images, a torchrun extraction's ranks and index,
``whiten``, ``ica``, ``dictionary`` with its JSON report, ``import``, ``consolidate``, both
``export`` formats, ``transform_store`` of a dask array into shards, a saved SAE folder, an
SAE's codes store) runs in a process forked by ``tests/_kill_launcher.py`` (the ranks of a
torchrun extraction with the environment torchrun gives them) and is killed with SIGKILL by
the launcher, which polls every millisecond: the first moment any new path appears in the
output's folder, the first moment a path named after the output appears (its build, inside
the run's temporary folder), and at 30 % and 70 % of its work (samples written, for an
extraction; the CPU time an uninterrupted run takes to put its output in place, for the
others); a torchrun extraction also the first moment a shard appears and the moment its
index is being built. Then the same command runs again: exit 0, and the output's folder
holds exactly what the uninterrupted run's holds, byte for byte. The moments a path appears
again with another process spinning on a CPU; and 20 SIGTERMs at random moments under that
load each end the run with exit 143 and one line, and the rerun completes.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
ZOO = REPO / "data" / "zoo"
EPOCH = "1700000000"
LAYER = "x"  # the source store's layer (as tests/_kill_writers.py reads it)
ROWS = 8000  # its rows: enough work for a kill at 30 % of a writer's CPU time to land mid-run
BIG_ROWS = 32000  # the rows of the store the writers that only copy rows read
N_SIGTERMS = 20

pytestmark = pytest.mark.usefixtures("torch_one_thread")


def _extract_text(folder):
    return ["extract", str(ZOO / "pythia-tiny-seed0"), "--inputs", str(ZOO / "inputs" / "text.txt"), "--layers",
            "gpt_neox.layers.1", "--max-samples", str(EXTRACTED), "--batch-size", "2", "--checkpoint-every", "0",
            "--no-progress", "--out", str(Path(folder) / "o.h5")]


def _extract_images(folder):
    return ["extract", f"timm:local-dir:{ZOO / 'resnet-tiny-seed0'}", "--inputs", str(ZOO / "inputs" / "shapes.npy"),
            "--layers", "layer1", "--pool", "none", "--max-samples", str(EXTRACTED), "--batch-size", "2",
            "--checkpoint-every", "0", "--no-progress", "--out", str(Path(folder) / "o.h5")]


def _writers(src: Path, big: Path, npy: Path, sae: Path) -> dict:
    """name -> (the job's command or call for an output folder, the output's name, extra job keys).
    The writers whose fit is cheap read ``big`` (their 30 % and 70 % of CPU time must lie far
    enough apart to be seen); the others, ``src``."""
    analysis = ["--layer", LAYER, "--quiet", "--block-rows", "128"]
    return {
        "extract-text": (lambda f: {"argv": _extract_text(f)}, "o.h5", {}),
        "extract-images": (lambda f: {"argv": _extract_images(f)}, "o.h5", {}),
        "torchrun": (lambda f: {"argv": _extract_text(f)}, "o.h5", {"ranks": 2}),
        "whiten": (lambda f: {"argv": ["whiten", str(big), *analysis, "--out", f"{f}/o.h5"]}, "o.h5", {}),
        "ica": (lambda f: {"argv": ["ica", str(src), *analysis, "--max-iter", "50", "--out", f"{f}/o.h5"]},
                "o.h5", {}),
        "dictionary": (lambda f: {"argv": ["dictionary", str(src), *analysis, "--n-components", "8", "--k", "2",
                                           "--json", f"{f}/o.json", "--out", f"{f}/o.h5"]}, "o.h5", {}),
        "import": (lambda f: {"argv": ["import", str(npy), "--quiet", "--out", f"{f}/o.h5"]}, "o.h5", {}),
        "consolidate": (lambda f: {"argv": ["consolidate", str(big), "--out", f"{f}/o.h5"]}, "o.h5", {}),
        "export-parquet": (lambda f: {"argv": ["export", str(big), "--layer", LAYER, "--format", "parquet", "--quiet",
                                               "--out", f"{f}/o.parquet"]}, "o.parquet", {}),
        "export-hf": (lambda f: {"argv": ["export", str(big), "--layer", LAYER, "--format", "hf-datasets", "--quiet",
                                          "--out", f"{f}/o-hf"]}, "o-hf", {}),
        "dask-shards": (lambda f: {"call": "_kill_writers:dask_transform", "args": [str(big), f"{f}/o.h5"]},
                        "o.h5", {}),
        "save-sae": (lambda f: {"call": "_kill_writers:save_sae", "args": [str(src), f"{f}/sae"]}, "sae", {}),
        "sae-codes": (lambda f: {"call": "_kill_writers:sae_codes", "args": [str(big), str(sae), f"{f}/o.h5"]},
                      "o.h5", {}),
    }


#: the samples an extraction writes (``--max-samples``): its 30 % and 70 % are counted in samples
EXTRACTED = 24


def _kill_points(name: str, writer: str, ref: str) -> dict:
    """kill point -> the launcher's ``kill`` (SIGKILL) for a run writing ``name`` (an ``entry``
    or ``progress`` kill watches the run's folder): 30 % and 70 % of an extraction are counted
    in samples written (its cursors), of any other writer in CPU time."""
    points = {
        "first-entry": {"when": "entry"},
        "first-output": {"when": "entry", "match": rf"(^|/){re.escape(name)}[^/]*$"},
        "30%": {"when": "cpu", "fraction": 0.3, "of": ref},
        "70%": {"when": "cpu", "fraction": 0.7, "of": ref},
    }
    if writer in ("extract-text", "extract-images", "torchrun"):
        for point, fraction in (("30%", 0.3), ("70%", 0.7)):
            points[point] = {"when": "progress", "fraction": fraction, "total": EXTRACTED}
    if writer == "torchrun":  # a rank's shard at its creation; the index as rank 0 builds it
        points["first-shard"] = {"when": "entry", "match": r"^o\.h5\.shards/"}
        points["index"] = {"when": "entry", "match": r"^\.o\.h5\.[a-z0-9_]{8}\.partial/o\.h5$"}
    return points


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    """What the writers read: stores of mixed heavy-tailed sources (what ICA is for) of
    :data:`ROWS` and of :data:`BIG_ROWS` rows, the latter as an embedding matrix too, and an
    SAE saved from a dictionary fit on the first."""
    from actkit.store import LayerSpec, create_store

    root = tmp_path_factory.mktemp("sources")
    rng = np.random.default_rng(48)
    mixing = rng.normal(size=(48, 48))
    paths = []
    for name, rows in (("src.h5", ROWS), ("big.h5", BIG_ROWS)):
        X = (rng.laplace(size=(rows, 48)) @ mixing).astype(np.float32)
        writer = create_store(root / name, [LayerSpec(LAYER, rows, 48)], n_samples=rows, request={"kill": 48},
                              created_at="2023-11-14T22:13:20+00:00")
        writer.append(LAYER, X)
        writer.checkpoint(rows, force=True)
        paths.append(writer.finalize())
    np.save(root / "m.npy", X)
    sys.path.insert(0, str(Path(__file__).parent))
    try:
        from _kill_writers import save_sae
    finally:
        sys.path.pop(0)
    save_sae(str(paths[0]), str(root / "sae"))
    return paths[0], paths[1], root / "m.npy", root / "sae"


def _tree(folder: Path) -> dict:
    """Every path under ``folder`` (hidden ones too) -> sha256 of a file, ``"dir"`` of a folder."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(Path(folder).rglob("*"))}


def _launch(root: Path, jobs: list) -> dict:
    """Run ``jobs`` in tests/_kill_launcher.py; job name -> exit status, and ``"_detail"``."""
    (root / "jobs.json").write_text(json.dumps(jobs))
    env = dict(os.environ, SOURCE_DATE_EPOCH=EPOCH, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    env.pop("ACTKIT_FAULT", None)
    proc = subprocess.run([sys.executable, str(REPO / "tests" / "_kill_launcher.py"), str(root / "jobs.json"),
                           str(root / "results.json")], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=1200)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads((root / "results.json").read_text())


def _job(root: Path, writers: dict, writer: str, run: str, kill=None, **extra) -> dict:
    """The launcher's job ``WRITER/RUN``, writing in ``root/WRITER/RUN`` (the part of RUN
    before ``/``: a rerun writes where its killed run did)."""
    build, _, keys = writers[writer]
    folder = root / writer / run.split("/")[0]
    folder.mkdir(parents=True, exist_ok=True)
    (root / "logs").mkdir(exist_ok=True)
    job = {"name": f"{writer}/{run}", "stderr": str(root / "logs" / f"{writer}-{run.replace('/', '-')}"),
           **build(folder), **keys, **extra}
    if kill is not None:  # what the kill leaves is recorded before the rerun
        job.update(kill={**kill, "watch": str(folder)} if kill["when"] != "cpu" else kill, record=str(folder),
                   tries=TRIES, mark=_mark(folder, writers[writer][1]))
    return job


def _mark(folder: Path, name: str) -> dict:
    """The launcher's ``mark``: the output in place (the CPU time to it is the work a fraction counts)."""
    return {"watch": str(folder), "match": rf"^{re.escape(name)}$"}


#: runs of a kill point whose moment passed unseen (the launcher not scheduled in time) before
#: the test says it failed to kill there
TRIES = 5


def _jobs(root: Path, writers: dict, kills: list) -> list:
    """The launcher's jobs for ``kills`` (``(writer, point, kill, loaded)``): each writer's
    warm run (in the launcher) and uninterrupted run (``ref``), and each killed run with the
    rerun that follows it (``POINT/rerun``, in the killed run's folder)."""
    jobs, used = [], []
    for writer, _, _, _ in kills:
        if writer not in used:
            used.append(writer)
    for writer in used:
        _, name, keys = writers[writer]
        if not keys.get("ranks"):  # once, in the launcher: what a first run imports lazily
            jobs.append(_job(root / "warm", writers, writer, "warm", warm=True))
        # its CPU time until its output is in place: the work a fraction counts
        jobs.append(_job(root, writers, writer, "ref", mark=_mark(root / writer / "ref", name)))
    for writer, point, kill, loaded in kills:
        jobs.append(_job(root, writers, writer, point, kill=kill, after=[f"{writer}/ref"], load=loaded))
        jobs.append(_job(root, writers, writer, f"{point}/rerun", after=[f"{writer}/{point}"], load=loaded))
    return jobs


def _stderr(root: Path, job: str) -> str:
    return (root / "logs" / job.replace("/", "-")).read_text(errors="replace")


def _resumed(root: Path, results: dict, writer: str, point: str) -> str | None:
    """What is wrong with the rerun after ``WRITER/POINT``'s kill (None: exit 0, and the
    folder holds what the uninterrupted run's holds, byte for byte)."""
    job, rerun = f"{writer}/{point}", f"{writer}/{point}/rerun"
    left = results["_detail"][job].get("left")
    if results[rerun] != 0:
        return f"{rerun} (the kill left {left}): exit {results[rerun]}: {_stderr(root, rerun)[-600:]}"
    got, ref = _tree(root / writer / point), _tree(root / writer / "ref")
    if got != ref:
        return f"{rerun} (the kill left {left}): {sorted(got)} differs from the uninterrupted run's {sorted(ref)}"
    return None


def _sigkills(writers: dict, loaded: bool) -> list:
    """Every writer's kill points (``POINT``, under load ``POINT-loaded``: the moments a path
    appears; a moment of CPU time or of samples written is the same under load)."""
    return [(writer, point + "-loaded" * loaded, kill, loaded) for writer, (_, name, _) in writers.items()
            for point, kill in _kill_points(name, writer, f"{writer}/ref").items()
            if not (loaded and kill["when"] != "entry")]


def _sigterms(writers: dict, tmp_path: Path) -> list:
    """:data:`N_SIGTERMS` SIGTERMs at random moments (of the CPU time an uninterrupted run
    takes), under load, of the commands in turn; and three as a store is being laid out."""
    commands = [w for w, (build, _, _) in writers.items() if "argv" in build(tmp_path)]
    rng = np.random.default_rng(48)
    at_random = [(commands[i % len(commands)], f"term{i}",
                  {"signal": "TERM", "when": "cpu", "fraction": float(rng.uniform(0.05, 0.95)),
                   "of": f"{commands[i % len(commands)]}/ref"}, True) for i in range(N_SIGTERMS)]
    # and as a store is being laid out (h5py's file-object driver calls back into Python there)
    at_build = [(w, "term-build", {"signal": "TERM", "when": "entry", "match": r"\.partial/o\.h5\.partial$"}, True)
                for w in ("extract-text", "whiten", "import")]
    return at_random + at_build


#: what must not appear in a run's stderr after SIGTERM: a Python traceback, an exception a
#: finaliser swallowed, the exception's name (issue 48: ``actkit.cli.Terminated`` printed
#: inside another message, and the run went on to exit 0)
_NOT_AFTER_SIGTERM = ("Traceback", "Exception ignored", "Terminated")


def _terminated(root: Path, results: dict, writers: dict, writer: str, point: str, kill: dict) -> str | None:
    """What is wrong with ``WRITER/POINT``'s end after SIGTERM (None: exit 143, and every
    rank's stderr ends with the one line ``actkit: terminated (SIGTERM)...``, said once, with
    no traceback; what the run said before, its warnings and torch's log of a rendezvous the
    signal interrupted, may come before it)."""
    job = f"{writer}/{point}"
    log = root / "logs" / job.replace("/", "-")
    errs = [log.read_text()] + [Path(f"{log}.rank{r}").read_text()
                                for r in range(1, int(writers[writer][2].get("ranks", 1)))]
    if results[job] == 143 and all(_said_terminated(err) for err in errs):
        return None
    when = f"at {kill['fraction']:.0%}" if kill["when"] == "cpu" else f"as {kill['match']} appeared"
    return f"{job} {when}: exit {results[job]}, stderr {errs}"


def _said_terminated(err: str) -> bool:
    lines = err.strip().splitlines()
    return (bool(lines) and lines[-1].startswith("actkit: terminated (SIGTERM)")
            and err.count("actkit: terminated") == 1 and not any(word in err for word in _NOT_AFTER_SIGTERM))


def test_every_writer_killed_or_terminated_anywhere_resumes_bitwise(sources, tmp_path):
    """Every writer SIGKILLed at each kill point, idle and under load; 20 SIGTERMs at random
    moments under load; each followed by the same command. One launcher run for all (the runs
    share its imports, warm runs and uninterrupted runs)."""
    writers = _writers(*sources)
    sigkills = _sigkills(writers, loaded=False) + _sigkills(writers, loaded=True)
    sigterms = _sigterms(writers, tmp_path)
    results = _launch(tmp_path, _jobs(tmp_path, writers, sigkills + sigterms))
    _report(tmp_path, results)
    failures = []
    for writer, point, _, _ in sigkills:
        job = f"{writer}/{point}"
        assert results[f"{writer}/ref"] == 0, _stderr(tmp_path, f"{writer}/ref")[-2000:]
        if results[job] != -9 or not results["_detail"][job]["signalled"]:
            failures.append(f"{job}: not killed in {TRIES} tries (exit {results[job]}): "
                            f"{_stderr(tmp_path, job)[-600:]}")
        else:
            failures.append(_resumed(tmp_path, results, writer, point))
    for writer, point, kill, _ in sigterms:
        failures.append(_terminated(tmp_path, results, writers, writer, point, kill)
                        or _resumed(tmp_path, results, writer, point))
    failures = [f for f in failures if f]
    assert not failures, "\n".join(failures)


def _report(root: Path, results: dict) -> None:
    """Where the kills landed (what each left on disk) and the runs' times, in the log."""
    lines = [f"{name}: exit {results[name]}, cpu {d['cpu']:.2f} s, wall {d['wall']:.2f} s, tries {d['tries']}"
             + (f", left {d['left']}" if "left" in d else "") for name, d in sorted(results["_detail"].items())]
    (root / "report.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
