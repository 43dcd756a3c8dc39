"""The Python-API writers that tests/test_kill_anywhere.py kills (run by tests/_kill_launcher.py
as ``"call": "_kill_writers:NAME"``): each writes one output from a source store and returns
the exit status, as a command would."""

from __future__ import annotations

LAYER = "x"  # the layer of the source store (tests/test_kill_anywhere.py)


def dask_transform(src: str, out: str) -> int:
    """``transform_store`` of a dask array: the sharded writer (shards in a temporary folder,
    moved into place, then the virtual index), tasks run in this process."""
    import actkit

    with actkit.open_store(src) as store:
        layer = store[LAYER]
        whitener = actkit.Whitener(n_components=8).fit(layer)
        actkit.transform_store(whitener, layer.to_dask(1024), out, progress=False)
    return 0


def _dictionary(src: str):
    import actkit

    with actkit.open_store(src) as store:
        return actkit.SparseDictionary(8, k=2, random_state=0, batch_size=1024).fit(store[LAYER])


def save_sae(src: str, out: str) -> int:
    """A dictionary fit saved as a SAELens folder (``overwrite``: the rerun replaces the
    folder of a run killed after its rename)."""
    import actkit

    actkit.save_sae(_dictionary(src), out, hook_name=LAYER, overwrite=True)
    return 0


def sae_codes(src: str, sae: str, out: str) -> int:
    """An SAE's codes of every row of a layer: the sparse codes store."""
    import actkit

    with actkit.open_store(src) as store:
        actkit.transform_store(actkit.load_sae(sae), store[LAYER], out, progress=False)
    return 0
