"""Run by tests/test_output_probe.py inside a mount namespace of its own, with a real read-only
tmpfs mounted at ``DISK``: each command of ``SPEC.json`` run in this process (``actkit.cli.main``)
with ``{DISK}`` in its arguments replaced by the mount point.

Usage: python _readonly_run.py DISK SPEC.json RESULTS.json

``SPEC.json``: a list of argument lists. ``RESULTS.json`` (written outside the tmpfs): for each
command its exit status, stdout, stderr and seconds, and the mount's listing after all of them.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
import time
from pathlib import Path

from actkit.cli import main as actkit_main


def main(disk: str, spec_path: str, results_path: str) -> None:
    results = []
    for argv in json.loads(Path(spec_path).read_text()):
        out, err = io.StringIO(), io.StringIO()
        t0 = time.perf_counter()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = actkit_main([a.replace("{DISK}", disk) for a in argv])
        results.append({"argv": argv, "returncode": code, "stdout": out.getvalue(), "stderr": err.getvalue(),
                        "seconds": time.perf_counter() - t0})
    Path(results_path).write_text(json.dumps({"runs": results,
                                              "listing": sorted(p.name for p in Path(disk).iterdir())}))


if __name__ == "__main__":
    main(*sys.argv[1:4])
