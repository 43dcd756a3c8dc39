"""Run the seeds' experiments: ``actkit reproduce NAME [--quick] [--out DIR] [--device D]``.

=================  =====================================================================
name               reproduces
=================  =====================================================================
``bilipschitz``    Nelson et al., Fig. 2: identifiability error grows with bi-Lipschitz L
``disentanglement``  Nelson et al., Table 2: AE + ICA disentangles (InfoM/InfoE/InfoC)
``table1``         Nelson et al., Table 1 protocol on the shipped zoo (``actkit demo``)
``complete``       Zhou & Klindt: complete vs undercomplete; grandmother cells
``sparse``         Zhou & Klindt: sparse latents, spark condition, dictionary recovery
``kl``             Nielsen et al.: KL counterexample and the d_LLV bound (Thm 4.7)
=================  =====================================================================

Each experiment returns an :class:`~actkit.synthetic._result.ExperimentResult`; its
claims say whether the paper's qualitative statement held in our run.

Examples
--------
>>> from actkit.synthetic.reproduce import reproduce          # doctest: +SKIP
>>> results = reproduce("kl", quick=True, out="repro")        # doctest: +SKIP
>>> results[0].passed                                         # doctest: +SKIP
True
"""

from __future__ import annotations

import importlib
from pathlib import Path

from actkit._device import resolve_device
from actkit.errors import ActkitError

#: experiment name -> module under ``actkit.synthetic``
EXPERIMENTS = {
    "bilipschitz": "actkit.synthetic.bilipschitz",
    "disentanglement": "actkit.synthetic.disentanglement",
    "table1": "actkit.synthetic.table1",
    "complete": "actkit.synthetic.complete",
    "sparse": "actkit.synthetic.sparse",
    "kl": "actkit.synthetic.kl",
}
NAMES = (*EXPERIMENTS, "all")


def resolve(name):
    """Experiment names for ``name`` (``all`` -> every experiment, in order)."""
    if name == "all":
        return list(EXPERIMENTS)
    if name not in EXPERIMENTS:
        raise ActkitError(f"unknown experiment {name!r}; choose one of {', '.join(NAMES)}")
    return [name]


def reproduce(name, *, quick=False, out=None, device="cpu", random_state=0, echo=None):
    """Run one experiment (or ``all``), write its files, return the results.

    Parameters
    ----------
    name : str
        One of :data:`NAMES`.
    quick : bool
        Reduced sizes (seconds to a minute each), as run by the test suite.
    out : path-like or None
        Folder for ``NAME.json`` and ``NAME*.png`` (created); None writes nothing.
    device : str
        Torch device for training (``cpu``, ``cuda``, ``cuda:1``).
    random_state : int
        Seed of the data and of every model.
    echo : callable or None
        Called with each result's text table as soon as it is ready.

    Returns
    -------
    list of ExperimentResult
    """
    names = resolve(name)
    resolve_device(device)  # a bad device fails before any work
    if out is not None:
        out = Path(out)
        if out.exists() and not out.is_dir():
            raise ActkitError(f"--out {str(out)!r} exists and is not a directory")
    results = []
    for n in names:
        module = importlib.import_module(EXPERIMENTS[n])
        result = module.run(quick=quick, device=device, random_state=random_state)
        if out is not None:
            result.write(out)
        if echo is not None:
            echo(result.format())
        results.append(result)
    return results
