"""Community sparse autoencoders (SAELens, EleutherAI sparsify) on actkit stores.

* :func:`load_sae` reads a SAELens or sparsify folder (JSON + safetensors only) as a
  :class:`SparseAutoencoder` that computes the codes and reconstructions as those libraries do.
* :func:`sae_metrics` runs one streaming pass over a store layer: L0, FVU, MSE, mean cosine,
  dead and dense latents (``actkit sae-eval``).
* :func:`save_sae` writes a :class:`~actkit.SparseDictionary` fit as a SAELens folder.

Layout: ``_folder`` (reading folders), ``_model`` (the estimator), ``_metrics`` (the pass),
``_save`` (writing a SAELens folder).
"""

from actkit.sae._metrics import sae_metrics
from actkit.sae._model import SparseAutoencoder, load_sae
from actkit.sae._save import save_sae

__all__ = ["SparseAutoencoder", "load_sae", "sae_metrics", "save_sae"]
