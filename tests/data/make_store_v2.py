"""Writes tests/data/store_v2.h5 with the actkit-store/2 code (sha256 block checksums).

    mkdir /tmp/old && git archive ec29ba5 actkit | tar -x -C /tmp/old
    python tests/data/make_store_v2.py tests/data/store_v2.h5 /tmp/old && gzip -9n tests/data/store_v2.h5

The store itself is uncompressed (as actkit writes by default); the file is gzipped for the
repository and unzipped by the test.
"""
import sys
sys.path.insert(0, sys.argv[2])  # a checkout of actkit-store/2 code: git archive ec29ba5 actkit
import numpy as np
from actkit.store import create_store, LayerSpec, FORMAT

assert FORMAT == "actkit-store/2"

def rows_a(n):  # low-entropy values: the gzipped fixture stays small
    i, j = np.mgrid[:n, :1024]
    return (((i * 7 + j) % 13) / 13).astype(np.float16)

a, b = rows_a(600), (np.arange(40 * 16).reshape(40, 16) / 8).astype(np.float32)
w = create_store(sys.argv[1], [LayerSpec("a", 600, 1024, "float16"), LayerSpec("b", 40, 16, "float32")],
                 n_samples=40, request={"model": "fixture-v2"}, params={"mean": np.arange(16.0)},
                 created_at="2026-01-01T00:00:00+00:00")
for s in range(0, 600, 100):
    w.append("a", a[s:s + 100])
w.append("b", b)
w.checkpoint(40, force=True)
w.finalize()
