"""Extract-then-compare: two or more checkpoints on the same inputs, straight to results.

The steps a researcher chains by hand (``actkit extract`` per model, then ``actkit compare``)
as one call; ``actkit compare MODEL_A MODEL_B --inputs PATH --layers L`` is a thin shell over
:func:`extract_stores` and the comparison. This module sits above both rooms (extraction and
analysis), like the CLI: the analysis packages never import it.
"""

from __future__ import annotations

import os
import tempfile
from typing import Sequence

from actkit.alignment import compare
from actkit.errors import ActkitError
from actkit.extractors.extract import extract
from actkit.store import open_store


def _store_name(i: int, model: str) -> str:
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in str(model))[-60:]
    return f"{i}_{safe}.h5"


def extract_stores(models: Sequence[str], inputs, folder, *, layers, echo=None, **extract_kwargs) -> list[str]:
    """Extract ``layers`` of every model on the same ``inputs`` into stores under ``folder``.

    Parameters
    ----------
    models : sequence of str
        Model ids or folders, as for :func:`actkit.extract`.
    inputs : path
        The inputs, shared by every model (so rows pair up across the stores).
    folder : path
        Existing or new folder; store ``i`` is ``folder/{i}_{model}.h5``. A store that is
        already complete for the same request is reused (extraction is a no-op).
    layers : sequence of str
    echo : callable, optional
        Called with one line per model before its extraction (the CLI prints it).
    **extract_kwargs
        Passed to :func:`actkit.extract` (``pool``, ``batch_size``, ``device``, ...).

    Returns
    -------
    list of str
        The store paths, in the order of ``models``.
    """
    if not layers:
        raise ActkitError("extract-then-compare needs layers (see `actkit layers MODEL`)")
    if len(models) < 2:
        raise ActkitError(f"compare needs at least two models, got {len(models)}")
    os.makedirs(folder, exist_ok=True)
    paths = []
    for i, model in enumerate(models):
        out = os.path.join(str(folder), _store_name(i, model))
        if echo is not None:
            echo(f"extracting {model} -> {out}")
        extract(model, inputs, out, layers=list(layers), **extract_kwargs)
        paths.append(out)
    return paths


def compare_models(model_a: str, model_b: str, inputs, *, layers, work_dir=None, extract_kwargs=None,
                   **compare_kwargs) -> dict:
    """Extract ``layers`` of two models on the same inputs and compare them layer by layer.

    Parameters
    ----------
    model_a, model_b : str
        Model ids or folders (``model_b``'s layer ``L`` is compared with ``model_a``'s ``L``).
    inputs : path
    layers : sequence of str
    work_dir : path, optional
        Keep the stores here (a rerun then reuses them); default a temporary folder, deleted
        afterwards.
    extract_kwargs : dict, optional
        Passed to :func:`actkit.extract`.
    **compare_kwargs
        Passed to :func:`actkit.compare` (``methods``, ``random_state``, ...).

    Returns
    -------
    dict of str -> CompareResult
        One result per layer, in the order of ``layers``.
    """
    tmp = None
    if work_dir is None:
        tmp = tempfile.TemporaryDirectory(prefix="actkit-compare-")
        work_dir = tmp.name
    try:
        path_a, path_b = extract_stores([model_a, model_b], inputs, work_dir, layers=layers,
                                        **(extract_kwargs or {}))
        with open_store(path_a) as sa, open_store(path_b) as sb:
            return {name: compare(sa[name], sb[name], **compare_kwargs) for name in layers}
    finally:
        if tmp is not None:
            tmp.cleanup()
