"""The one thread limiter: one BLAS/LAPACK thread for small dense algebra.

Dense (D x D) decompositions (k x k solves, eigh, svd, expm) of a few hundred dimensions
run *slower* with several OpenBLAS threads on a busy machine (up to 10x measured on a shared
2-core box); large GEMMs over the data keep their threads outside this context.
"""

from __future__ import annotations

__all__ = ["small_linalg"]

_CONTROLLER = None


def small_linalg():
    """Context manager: one BLAS/LAPACK thread inside it."""
    global _CONTROLLER
    if _CONTROLLER is None:  # scanning the loaded BLAS libraries is slow: do it once
        from threadpoolctl import ThreadpoolController

        _CONTROLLER = ThreadpoolController()
    return _CONTROLLER.limit(limits=1)
