"""``actkit extract MODEL --inputs PATH --layers L1,L2 --out STORE.h5``: activations -> store.

Under ``torchrun --nproc-per-node K -m actkit extract ...`` every rank writes one shard and
rank 0 the virtual store over them (only rank 0 prints the path).
"""

from __future__ import annotations

import os
import sys


def register(sub) -> None:
    p = sub.add_parser(
        "extract",
        help="extract layer activations of a model into a crash-safe HDF5 store",
        description="Extract activations of MODEL (hub id, local directory, timm:NAME, "
        "timm:local-dir:PATH) on the inputs into an HDF5 store. Killed runs resume when the "
        "identical command is run again.",
    )
    p.add_argument("model", help="hub id, local model directory, timm:NAME or timm:local-dir:PATH")
    p.add_argument("--inputs", required=True,
                   help=".txt (one sample per line), .jsonl (text field), image folder, uint8 .npy (N,H,W,3), "
                        "a Hugging Face dataset (save_to_disk folder, .parquet/.arrow file or glob) or hf:NAME")
    p.add_argument("--column", help="dataset column to read (default: text, else image or img)")
    p.add_argument("--label-column", metavar="COLUMN",
                   help="keep this column of a datasets input (one label per sample) in the store, for "
                        "actkit evaluate STORE --labels COLUMN")
    p.add_argument("--skip-special-tokens", action="store_true",
                   help="leave the tokenizer's special tokens ([CLS], [SEP], BOS, EOS) out of the per-token rows "
                        "(--pool none); the index keeps true token positions")
    p.add_argument("--split", help="dataset split for hf:NAME or a saved DatasetDict (default: train)")
    p.add_argument("--config", help="dataset configuration for hf:NAME")
    p.add_argument("--context-length", type=int, metavar="L",
                   help="pack the token stream into windows of exactly L tokens (BOS first where the "
                        "tokenizer has one); samples are windows, the index is [window, position] (default: off, one "
                        "sample per text)")
    p.add_argument("--max-tokens", type=int, metavar="N",
                   help="with --context-length: at most N // L windows (texts read only until filled; default: "
                        "every window of the corpus)")
    p.add_argument("--layers", required=True,
                   help="comma-separated module paths (see `actkit layers MODEL`) or names every model "
                        "shares: embed, resid.3, resid.-1, resid.all, final_hidden (CLIP: vision.resid.3, "
                        "text.resid.3); see docs/models.md")
    p.add_argument("--out", required=True, help="store to write (.h5)")
    p.add_argument("--pool", choices=["none", "mean", "last", "cls"], default="none",
                   help="none: a row per token/position; mean|last|cls: a row per sample (default: none)")
    p.add_argument("--revision", help="hub revision, e.g. step143000")
    p.add_argument("--checkpoint", help="weights file for timm:NAME (.safetensors)")
    p.add_argument("--batch-size", type=int, default=32, help="most samples per forward pass (default: 32)")
    p.add_argument("--max-batch-tokens", type=int, metavar="N",
                   help="text: most padded tokens per forward pass (samples x longest), --batch-size still "
                        "a cap (default: no token budget)")
    p.add_argument("--no-sort", dest="sort_by_length", action="store_false",
                   help="text: batches of consecutive samples in input order (default: sorted by token count "
                        "within windows of 64 batches; the store's rows are in input order either way)")
    p.add_argument("--device", default="cpu",
                   help="torch device (under torchrun, cuda puts rank r on cuda:LOCAL_RANK), e.g. cpu, cuda, cuda:1")
    p.add_argument("--device-map", metavar="MAP",
                   help="'auto': spread a model too large for one device over the devices (accelerate; "
                        "transformers models; replaces --device)")
    p.add_argument("--dtype", choices=["float32", "float16", "bfloat16"], default="float32",
                   help="compute dtype (default float32)")
    p.add_argument("--storage-dtype", choices=["float32", "float16"], default=None,
                   help="stored dtype (default: the compute dtype; float32 for bfloat16)")
    p.add_argument("--max-length", type=int,
                   help="truncate texts to this many tokens (default: the model's position limit, "
                        "max_position_embeddings)")
    p.add_argument("--max-samples", type=int,
                   help="use only the first N inputs (hf:NAME datasets are then streamed, not downloaded; "
                        "default: all)")
    p.add_argument("--final-hidden", action="store_true",
                   help="also store the final hidden state after the final norm (causal LMs)")
    p.add_argument("--unembedding", action="store_true",
                   help="store the unembedding (lm_head) matrix as the parameter 'unembedding'")
    p.add_argument("--overwrite", action="store_true", help="replace a store made by a different request")
    p.add_argument("--trust-remote-code", action="store_true",
                   help="allow models whose code comes from their repository")
    p.add_argument("--allow-pickle", action="store_true",
                   help="allow pickle weight files (.bin/.pt), which can run code when loaded")
    p.add_argument("--compression", choices=["gzip", "lzf"], default=None,
                   help="HDF5 compression (off by default: much slower writes)")
    p.add_argument("--checkpoint-every", type=float, default=5.0, metavar="SECONDS",
                   help="seconds between resume checkpoints, 0 = after every batch (default 5)")
    p.add_argument("--quiet", "--no-progress", dest="quiet", action="store_true",
                   help="no progress bar (--no-progress: the older name, the same)")
    p.set_defaults(func=run)


def run(args) -> int:
    from actkit.extractors.extract import LAST_RUN, extract  # actkit.extractors (torch, transformers): ~1 s at import (measured); at the top actkit --help would pay it

    path = extract(
        args.model, args.inputs, args.out, layers=args.layers, pool=args.pool, revision=args.revision,
        checkpoint=args.checkpoint, batch_size=args.batch_size, device=args.device, dtype=args.dtype,
        storage_dtype=args.storage_dtype, max_length=args.max_length, max_samples=args.max_samples,
        final_hidden=args.final_hidden, unembedding=args.unembedding, overwrite=args.overwrite,
        trust_remote_code=args.trust_remote_code, allow_pickle=args.allow_pickle,
        compression=args.compression, progress=not args.quiet,
        checkpoint_every=args.checkpoint_every, column=args.column, split=args.split, config=args.config,
        context_length=args.context_length, max_tokens=args.max_tokens, device_map=args.device_map,
        label_column=args.label_column, skip_special_tokens=args.skip_special_tokens,
        max_batch_tokens=args.max_batch_tokens, sort_by_length=args.sort_by_length,
    )

    if os.environ.get("RANK", "0") == "0":
        print(outcome_line(path, LAST_RUN), file=sys.stderr)
        print(path)
    return 0


def outcome_line(path, run: dict) -> str:
    """What extraction did, in words: written, resumed from N/M, or already complete."""
    n = run.get("n_samples", "?")
    outcome = run.get("outcome")
    if outcome == "complete":
        return f"{path} is already complete for this request ({n} samples); nothing to do"
    if outcome == "repaired":
        return f"repaired {path} ({n} samples): {run.get('repaired')}; it is complete now"
    if outcome == "resumed":
        return f"resumed {path} from {run.get('resumed_from')}/{n} samples; it is complete now"
    return f"wrote {path}: {n} samples"
