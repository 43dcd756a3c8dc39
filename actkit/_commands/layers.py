"""``actkit layers MODEL [--inputs PATH]``: the extractable layers and their output shapes."""

from __future__ import annotations

import json


def register(sub) -> None:
    p = sub.add_parser(
        "layers",
        help="list a model's extractable layers (module paths) with their output shapes",
        description="Run one forward pass (on the first input, or a dummy input) with a hook on "
        "every module and list each module's dotted path, its architecture-independent alias "
        "(resid.3; embed and final_hidden at the end, with what they read), type and output shape.",
    )
    p.add_argument("model", help="hub id, local model directory, timm:NAME or timm:local-dir:PATH")
    p.add_argument("--inputs", help="probe on the first sample of these inputs instead of a dummy input")
    p.add_argument("--revision", help="hub revision")
    p.add_argument("--checkpoint", help="weights file for timm:NAME (.safetensors)")
    p.add_argument("--trust-remote-code", action="store_true",
                   help="allow models whose code comes from their repository")
    p.add_argument("--allow-pickle", action="store_true",
                   help="allow pickle weight files (.bin/.pt), which can run code when loaded")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--quiet", action="store_true", help="accepted as every command accepts it (this one shows no progress)")
    p.set_defaults(func=run)


def run(args) -> int:
    from actkit.extractors.layers import list_layers  # actkit.extractors (torch, transformers): ~1 s at import (measured); at the top actkit --help would pay it

    layers = list_layers(args.model, inputs=args.inputs, revision=args.revision, checkpoint=args.checkpoint,
                         trust_remote_code=args.trust_remote_code, allow_pickle=args.allow_pickle)
    if args.json:
        print(json.dumps(layers, indent=2))
        return 0
    # the alias next to each module path; embed and final_hidden say what they read
    aliases = [x.get("module") or x.get("alias") or "-" for x in layers]
    width = max(len(x["name"]) for x in layers)
    awidth = max(len(a) for a in aliases + ["alias"])
    twidth = max(len(x["type"]) for x in layers)
    print(f"{'layer'.ljust(width)}  {'alias'.ljust(awidth)}  {'type'.ljust(twidth)}  output shape (one sample)")
    for x, alias in zip(layers, aliases):
        shape = "x".join(str(d) for d in x["shape"]) if x["shape"] is not None else "-"
        note = "" if x["extractable"] else f"  ({x['note']})"
        print(f"{x['name'].ljust(width)}  {alias.ljust(awidth)}  {x['type'].ljust(twidth)}  {shape}{note}")
    return 0
