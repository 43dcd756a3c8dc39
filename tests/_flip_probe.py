"""Run by tests/test_torture.py in a subprocess (so a hang inside libhdf5 is a timeout, not a
frozen test run): flip bytes of a store one at a time and record what reading it does.

Usage: python _flip_probe.py STORE OUT.json OFFSET[,OFFSET...]

For each offset the byte is XORed with 0xFF in a copy, the copy is opened with
``open_store(verify=True)`` and every layer, index, parameter and ``info()`` is read.
Outcomes: ``same`` (everything reads as in the intact store), ``error`` (a StoreError),
``different`` (reads succeed with other values: a corruption that went unnoticed) or
``crash:<type>: <message>`` (any other exception). Each record has the seconds it took.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np


def snapshot(path):
    from actkit.store import open_store

    with open_store(path, verify=True) as st:
        info = st.info()
        info.pop("path")
        out = {"info": json.dumps(info, sort_keys=True, default=str)}
        for name in st.layers:
            out[name] = (np.asarray(st[name]).tobytes(), st[name].index.tobytes())
        for key, value in st.params.items():
            out["param:" + key] = value.tobytes()
    return out


def main():
    from actkit.errors import StoreError

    store, result, offsets = Path(sys.argv[1]), Path(sys.argv[2]), [int(x) for x in sys.argv[3].split(",")]
    data = bytearray(store.read_bytes())
    intact = snapshot(store)
    work = store.with_name("flipped.h5")
    records = []
    for off in offsets:
        data[off] ^= 0xFF
        work.write_bytes(data)
        data[off] ^= 0xFF
        t = time.perf_counter()
        try:
            outcome = "same" if snapshot(work) == intact else "different"
        except StoreError:
            outcome = "error"
        except Exception as exc:  # noqa: BLE001 - what we are looking for
            outcome = f"crash:{type(exc).__name__}: {exc}"
        records.append({"offset": off, "outcome": outcome, "seconds": time.perf_counter() - t})
    result.write_text(json.dumps(records))


if __name__ == "__main__":
    main()
