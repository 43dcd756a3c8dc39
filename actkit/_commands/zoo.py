"""``actkit zoo path`` / ``actkit zoo list``: where the shipped checkpoints are, and which.

``path`` prints :func:`actkit.zoo.zoo_dir` (the zoo a ``pip install`` ships inside the
package, a checkout's ``data/zoo``, or ``$ACTKIT_ZOO``), so a shell can name the models and
inputs wherever actkit is installed: ``Z=$(actkit zoo path)``. Training stays
``python -m actkit.zoo train``.
"""

from __future__ import annotations

from actkit.errors import InputError


def register(sub) -> None:
    p = sub.add_parser("zoo", help="the shipped checkpoints: their folder (zoo path), their list (zoo list)",
                       description="The small trained checkpoints that ship with actkit (docs/zoo.md). "
                                   "`actkit zoo path` prints their folder (for a shell: Z=$(actkit zoo path); "
                                   "ACTKIT_ZOO overrides it), `actkit zoo list` the models with their "
                                   "training losses. Retraining: python -m actkit.zoo train.")
    p.add_argument("what", choices=("path", "list"), metavar="{path,list}",
                   help="path: print the zoo's folder; list: one line per model")
    p.add_argument("--quiet", action="store_true", help="accepted as every command accepts it (this one shows no progress)")
    p.set_defaults(func=run)


def run(args) -> int:
    from actkit.zoo import format_models, zoo_dir  # actkit.zoo (numpy): ~0.05 s at import (measured); only this command

    folder = zoo_dir()
    if not (folder / "zoo.json").is_file():
        raise InputError(f"no zoo at {folder} (no zoo.json there): set ACTKIT_ZOO to a zoo's folder, or reinstall "
                         "actkit (a wheel or pip install . ships it)")
    if args.what == "path":
        print(folder)
        return 0
    print(format_models())
    return 0
