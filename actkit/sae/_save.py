"""``save_sae``: a :class:`~actkit.SparseDictionary` fit as a folder SAELens loads.

A SparseDictionary codes a row by orthogonal matching pursuit (top-k) or the lasso (L1),
which no SAELens encoder computes; the folder holds the SAELens encoder whose first step
those codes start from, with the fit's atoms as the decoder (``W_dec = dictionary_``,
``b_dec = 0``, ``apply_b_dec_to_input = False``, no normalisation):

* non-negative top-k (``positive=True``): ``topk`` with the fit's ``k``, ``W_enc =
  dictionary_.T``, ``b_enc = 0``: the ``k`` atoms most correlated with the row (OMP's first
  choice), coded by their correlation (no least-squares refit);
* signed top-k: ``topk`` over ``2 n_components`` latents, latent ``i`` the atom ``d_i`` and
  latent ``n_components + i`` its negation ``-d_i``: the ``k`` atoms of largest ``|x . d_i|``,
  a negative code carried by the negated twin;
* L1 (``code="l1"``): ``standard`` with ``b_enc = -alpha`` (one soft-threshold step of
  ISTA from zero), doubled the same way for signed codes.

So the SAELens codes are not ``SparseDictionary.transform``'s (no refit); the atoms are the
fit's, and ``actkit sae-eval`` reports how well this encoder reconstructs.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

from actkit._atomic import Temporary, move_into_place
from actkit._params import check_fitted
from actkit.errors import InputError, ValidationError

__all__ = ["save_sae"]

# the SAELens config layout written (6.x: top-level architecture, version in metadata)
_SAELENS_VERSION = "6.0.0"


def save_sae(dictionary, path, *, hook_name=None, overwrite=False):
    """Save a fitted :class:`~actkit.SparseDictionary` as a SAELens SAE folder.

    Parameters
    ----------
    dictionary : SparseDictionary
        Fitted.
    path : str or os.PathLike
        The folder to write: ``cfg.json`` + ``sae_weights.safetensors``, which
        ``sae_lens.SAE.load_from_disk(path)`` loads (and :func:`actkit.load_sae`).
    hook_name : str, optional
        Recorded in ``metadata.hook_name`` (e.g. the store layer's name).
    overwrite : bool, default=False
        Replace an existing SAE folder at ``path``.

    Returns
    -------
    pathlib.Path

    Notes
    -----
    Non-negative top-k codes become ``architecture: topk`` with the fit's ``k``; signed
    top-k codes a ``topk`` SAE of ``2 n_components`` latents (each atom and its negation);
    L1 codes a ``standard`` SAE with ``b_enc = -alpha``. See the module docs: the encoder is
    the first step of the fit's coding, not its refitted codes.
    """
    if type(dictionary).__name__ != "SparseDictionary":
        raise ValidationError(f"save_sae writes a SparseDictionary fit, got {type(dictionary).__name__}")
    check_fitted(dictionary)
    D = np.asarray(dictionary.dictionary_, dtype=np.float32)
    p = dictionary._p
    n, d = D.shape
    if not p["positive"]:
        D = np.concatenate([D, -D])
    arch = "topk" if p["code"] == "topk" else "standard"
    b_enc = np.zeros(len(D), np.float32) if arch == "topk" else np.full(len(D), -p["alpha"], np.float32)
    metadata = {"sae_lens_version": _SAELENS_VERSION, "sae_lens_training_version": _SAELENS_VERSION,
                "hook_name": hook_name, "source": "actkit.SparseDictionary",
                "actkit_code": p["code"], "actkit_positive": p["positive"], "actkit_n_components": n}
    cfg = {"architecture": arch, "d_in": d, "d_sae": len(D), "dtype": "float32", "device": "cpu",
           "apply_b_dec_to_input": False, "normalize_activations": "none", "reshape_activations": "none",
           "metadata": metadata}
    if arch == "topk":
        cfg.update(k=int(p["k"]), rescale_acts_by_decoder_norm=False)
    weights = {"W_enc": np.ascontiguousarray(D.T), "b_enc": b_enc, "W_dec": np.ascontiguousarray(D),
               "b_dec": np.zeros(d, np.float32)}
    return _write(Path(path), cfg, weights, overwrite)


def _write(path: Path, cfg, weights, overwrite):
    if path.exists():
        is_sae = path.is_dir() and (path / "cfg.json").is_file() and (path / "sae_weights.safetensors").is_file()
        if not overwrite:
            raise InputError(f"{path} exists; pass overwrite=True to replace it")
        if not is_sae:
            raise InputError(f"{path} exists and is not an SAE folder; not replacing it")
    path.parent.mkdir(parents=True, exist_ok=True)
    # built in a temporary folder of its own beside `path` and renamed into place (a killed
    # save leaves the temporary, which the next save of `path` removes)
    with Temporary(path) as tmp:
        folder = tmp.file()
        folder.mkdir()
        save_file(weights, str(folder / "sae_weights.safetensors"))
        (folder / "cfg.json").write_text(json.dumps(cfg, indent=2, sort_keys=True), encoding="utf-8")
        move_into_place(folder, path)
    return path
