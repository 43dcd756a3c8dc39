"""Stores as training data: a shuffling, resumable torch ``IterableDataset`` over layers
(``_dataset``: :class:`ActivationDataset`, :class:`DataLoader`, :func:`to_torch`), what it
reads and in which order (``_plan``, no torch), and the shared buffers of its workers
(``_ring``). See ``docs/loader.md``.

The public names resolve lazily: ``_dataset`` subclasses torch's ``IterableDataset`` when it
is imported, and ``actkit.loader._plan`` must stay importable without torch.
"""

from __future__ import annotations

from actkit._lazy import lazy_attributes

__getattr__, __dir__, __all__ = lazy_attributes(__name__, {
    "ActivationDataset": "actkit.loader._dataset",
    "DataLoader": "actkit.loader._dataset",
    "to_torch": "actkit.loader._dataset",
    "source_of": "actkit.loader._plan",
})
