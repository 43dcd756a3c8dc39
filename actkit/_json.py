"""Python and numpy values as JSON values, one way: :func:`json_ready` and :func:`json_default`.

Every JSON actkit writes (``--json`` files, a result's ``to_dict()``, the data of a page, a
store's canonical request) turns numpy values into JSON the same way:

- numpy and torch arrays become (nested) lists, numpy scalars Python numbers and booleans;
- tuples become lists, dict keys strings, dataclass instances dicts;
- **NaN and infinities become None** (``null``): JSON has no NaN (``json.dumps`` writes a
  bare ``NaN`` that strict parsers and JavaScript's ``JSON.parse`` refuse), and every
  reader of actkit's JSON takes ``null`` for "not defined here";
- anything else is left as it is (:func:`json_default`, the ``default=`` hook of
  ``json.dumps``, writes it as its ``str``).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

__all__ = ["json_ready", "json_default"]


def json_ready(obj):
    """``obj`` with every value JSON can hold, as the module docstring says (NaN and inf as None).

    Parameters
    ----------
    obj : any
        Dicts, lists, tuples, numbers, booleans, strings, None, numpy / torch arrays and
        scalars, dataclass instances, nested in any way.

    Returns
    -------
    The same structure of dicts, lists, ``int``, ``float`` (finite), ``bool``, ``str`` and
    None; a value of another type is returned unchanged.

    Examples
    --------
    >>> import numpy as np
    >>> json_ready({"a": np.float32(0.5), 1: (np.int64(2), float("nan")), "m": np.eye(2)})
    {'a': 0.5, '1': [2, None], 'm': [[1.0, 0.0], [0.0, 1.0]]}
    """
    if isinstance(obj, dict):
        return {str(k): json_ready(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_ready(v) for v in obj]
    if isinstance(obj, (bool, np.bool_)):
        return bool(obj)
    if isinstance(obj, (int, np.integer)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        v = float(obj)
        return v if math.isfinite(v) else None
    if obj is None or isinstance(obj, (str, bytes)):
        return obj
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return json_ready(dataclasses.asdict(obj))
    if hasattr(obj, "tolist"):          # numpy arrays and scalars, torch tensors
        return json_ready(obj.tolist())
    return obj


def json_default(obj):
    """The ``default=`` hook of ``json.dumps`` (values it cannot write itself): :func:`json_ready`
    of ``obj``, or its ``str`` where that leaves it unchanged (a path, an enum)."""
    out = json_ready(obj)
    return str(obj) if out is obj else out
