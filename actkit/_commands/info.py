"""``actkit info STORE [--json]``: what a store holds."""

from __future__ import annotations

import json

from actkit._commands.verify import verify_report


def register(sub) -> None:
    p = sub.add_parser("info", help="describe a store: layers, shapes, provenance, completeness",
                       description="Describe a store: whether it is complete (or how far an unfinished "
                                   "one got), its samples, model, inputs and inputs fingerprint, each "
                                   "layer's rows, features and dtype, and its fitted parameters.")
    p.add_argument("store", help="path to an actkit store (.h5)")
    p.add_argument("--json", action="store_true", help="print machine-readable JSON")
    p.add_argument("--verify", action="store_true",
                   help="also check every row block against its checksum (reads the whole store)")
    p.add_argument("--quiet", action="store_true", help="no progress bar of --verify")
    p.set_defaults(func=run)


def run(args) -> int:
    from actkit.store import open_store  # actkit.store (h5py): ~0.1 s at import (measured); at the top actkit --help would pay it

    with open_store(args.store, allow_incomplete=True) as store:
        info = store.info()
        if args.verify:
            verified = verify_report(store, quiet=args.json or args.quiet)
            info["verified"] = True
    if args.json:
        print(json.dumps(info, indent=2, sort_keys=False, default=str))
        return 0
    state = "complete" if info["complete"] else "INCOMPLETE"
    if "progress" in info:
        p = info["progress"]
        state += f" ({p['samples_done']}/{p['n_samples']} samples written; rerun the command to resume)"
    print(f"{info['path']}  [{state}]")
    print(f"  samples: {info['n_samples']}   created: {info['created_at']}")
    prov = info["provenance"]
    for key in ("model", "revision", "pool", "inputs", "source_store"):
        if prov.get(key) is not None:
            print(f"  {key}: {prov[key]}")
    fingerprint = info["inputs_fingerprint"][:16] or "none (the rows are not tied to recorded inputs, e.g. " \
                                                      "a store made from an embedding file)"
    print(f"  inputs fingerprint: {fingerprint}")
    width = max([len(n) for n in info["layers"]] + [5])
    print(f"  {'layer'.ljust(width)}  {'rows':>10}  {'features':>8}  dtype")
    for name, layer in info["layers"].items():
        rows, feats = layer["shape"]
        print(f"  {name.ljust(width)}  {rows:>10}  {feats:>8}  {layer['dtype']}")
    if info["params"]:
        print("  params: " + ", ".join(f"{k} {tuple(v['shape'])}" for k, v in info["params"].items()))
    if args.verify:
        print("  " + verified)
    return 0
