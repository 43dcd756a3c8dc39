"""``actkit verify STORE``: check every row block of a store against its checksum."""

from __future__ import annotations

import sys


def register(sub) -> None:
    p = sub.add_parser("verify", help="check a store's data against its checksums (names the first bad block)",
                       description="Read every row block, row index and parameter of STORE and compare "
                                   "them with the checksums written with them (XXH3-128 blocks, sha256 in "
                                   "actkit-store/2 stores); exit 2 naming the "
                                   "first block that does not match. An unfinished store is checked up "
                                   "to its last resume point.")
    p.add_argument("store", help="path to an actkit store (.h5)")
    p.add_argument("--quiet", action="store_true", help="no progress bar; print nothing when the store is intact")
    p.set_defaults(func=run)


def verify_report(store, quiet: bool = False) -> str:
    """Verify an open store (with a progress bar) and say what was checked, in one line."""
    from tqdm.auto import tqdm  # tqdm.auto: ~0.03 s at import (measured); at the top actkit --help would pay it

    from actkit.store import format_bytes  # actkit.store (h5py): ~0.1 s at import (measured); at the top actkit --help would pay it

    with tqdm(desc="verifying", unit="blocks", disable=True if quiet else None, leave=False) as bar:
        done = store.verify(on_progress=bar.update)
    state = "" if store.complete else " (unfinished store: the rows written so far)"
    return (f"{store.path}: ok, {done['blocks']} blocks ({format_bytes(done['bytes'])}) in {done['layers']} "
            f"layer{'s' if done['layers'] != 1 else ''} and {done['params']} parameter"
            f"{'s' if done['params'] != 1 else ''} match their checksums{state}")


def run(args) -> int:
    from actkit.store import open_store  # actkit.store (h5py): ~0.1 s at import (measured); at the top actkit --help would pay it

    with open_store(args.store, allow_incomplete=True) as store:
        line = verify_report(store, args.quiet)
    if not args.quiet:
        print(line, file=sys.stdout)
    return 0
