"""Run by tests/test_torture.py inside its own mount namespace, with a real tmpfs mounted at
the folder of ``--out``: the extraction of issue 20's report, the disk filled once a trigger
file appears, then a rerun after the space is freed.

Usage: python _full_disk_run.py SPEC.json RESULTS.json

``SPEC.json``: ``{"argv", "disk", "trigger"}`` (``argv`` without ``--out``; the store is
``disk/r.h5``). ``RESULTS.json`` (written outside the tmpfs, which vanishes with the
namespace): the first run's exit status and stderr, whether ``r.h5`` existed after it, the
rerun's exit status and stderr, the store's sha256 and the folder's listing after the rerun.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path


def _fill(folder: Path) -> None:
    """Write a file into ``folder`` until its filesystem has no byte left."""
    with open(folder / "filler", "wb", buffering=0) as fh:
        for chunk in (1 << 16, 1 << 12, 1):
            while True:
                try:
                    fh.write(b"\0" * chunk)
                except OSError:
                    break


def main(spec_path: str, results_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    disk = Path(spec["disk"])
    out = disk / "r.h5"
    argv = spec["argv"] + ["--out", str(out)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    trigger = disk / spec["trigger"]
    while not trigger.exists() and proc.poll() is None:
        pass  # busy: the filler must win the race against the first writes
    _fill(disk)
    _, err = proc.communicate(timeout=600)
    first = {"returncode": proc.returncode, "stderr": err, "out_exists": out.exists()}
    (disk / "filler").unlink()
    again = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    sha = hashlib.sha256(out.read_bytes()).hexdigest() if out.exists() else None
    Path(results_path).write_text(json.dumps({
        "first": first, "again": {"returncode": again.returncode, "stderr": again.stderr},
        "sha": sha, "listing": sorted(p.name for p in disk.iterdir())}))


if __name__ == "__main__":
    main(*sys.argv[1:3])
