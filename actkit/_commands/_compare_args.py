"""The options of ``actkit compare`` (:mod:`actkit._commands.compare`): the sources, the outputs,
the alignments, the rows and the resampling, each group a function, and the argparse types
of ``--alpha``, ``--ica-restarts`` and ``--ica-max-rows``."""

from __future__ import annotations

import argparse


def add_compare_arguments(p) -> None:
    """Every option of ``actkit compare`` but ``--scheduler``."""
    _add_source_arguments(p)
    _add_output_arguments(p)
    _add_alignment_arguments(p)
    _add_row_and_uncertainty_arguments(p)


def _add_source_arguments(p) -> None:
    """compare's sources: stores, embedding files or models (with --inputs), their layers, the extraction's settings and the device."""
    p.add_argument("sources", nargs="*", metavar="STORE_OR_MODEL",
                   help="two or more stores (.h5) or embedding files (.npy, .safetensors, .parquet); "
                        "with --inputs, two or more models")
    p.add_argument("--key", help="tensor of .safetensors embedding files (needed when one holds several)")
    p.add_argument("--column", help="list-of-floats column of .parquet embedding files")
    p.add_argument("--layer-a", help="layer of the first store (default: layers in common)")
    p.add_argument("--layer-b", help="layer of the second store (default: same as --layer-a)")
    p.add_argument("--layers", help="comma-separated layers to compare (in every store); "
                                    "required with --inputs")
    p.add_argument("--inputs", help="compare models directly: extract both on these inputs "
                                    "(text/jsonl/image folder/npy), then compare each layer")
    p.add_argument("--pool", default="none", choices=["none", "mean", "last", "cls"],
                   help="with --inputs: token pooling of the extraction (default none)")
    p.add_argument("--max-samples", type=int, help="with --inputs: use the first N inputs (default: all)")
    p.add_argument("--batch-size", type=int, default=32, help="with --inputs: batch size")
    p.add_argument("--device", default="cpu",
                   help="torch device of the FastICA fits, of the row-based measures (--measures) "
                        "and, with --inputs, of the extraction (e.g. cuda)")


def _add_output_arguments(p) -> None:
    """compare's measures and outputs: --measures, --list-measures, --max-rows, --work-dir, --json, --plot, --html, --overwrite, --metric."""
    p.add_argument("--measures", metavar="NAMES",
                   help="more measures, each a column of the table and a key of --json: comma-"
                        "separated names with optional parameters, e.g. procrustes,rsa,mutual_knn:k=5,"
                        "shape_metric:alpha=0.5 (see --list-measures and docs/measures.md)")
    p.add_argument("--list-measures", action="store_true",
                   help="print every measure (name, kind, invariances, out of core or sampled, "
                        "parameters, reference, convention) and exit. The CCA family (mean_cca, "
                        "svcca, pwcca) averages over the min(rank A, rank B) canonical correlations; "
                        "google/svcca's code over min(Da, Db), so the two differ by 5e-4 to 2e-3 on "
                        "rank-deficient sides such as LayerNorm outputs (docs/measures.md)")
    p.add_argument("--max-rows", type=int, default=10000, metavar="N",
                   help="rows of the seeded sample (whole input samples) of the row-based measures "
                        "(default 10000)")
    p.add_argument("--work-dir", help="with --inputs: keep the extracted stores here "
                                      "(default: a temporary folder, deleted afterwards)")
    p.add_argument("--json", metavar="OUT.json", help="write the results (to_dict) as JSON")
    p.add_argument("--plot", metavar="OUT.png", help="draw errors per method and layer and "
                                                     "the matched-source correlation matrix")
    p.add_argument("--html", metavar="OUT.html",
                   help="write one self-contained page: every measure with its interval and p-value, the "
                        "notes, the ICA source correlations, the layer map or pairwise matrix (docs/pages.md)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace an existing page at --html (only a page actkit wrote)")
    p.add_argument("--metric", default="rigid",
                   help="more than two stores: the metric of the pairwise matrix (any key of "
                        "the JSON results, e.g. rigid, ica, linear_cka, mean_cca; default rigid)")


def _add_alignment_arguments(p) -> None:
    """the split and the alignments: --eval-fraction, the seeds, the ICA options, --alpha, --diameter-max-rows, --methods."""
    p.add_argument("--eval-fraction", type=float, default=0.2,
                   help="share of input samples held out for the errors (default 0.2)")
    p.add_argument("--seed", type=int, default=0, help="seed of the split (and of row sampling)")
    p.add_argument("--ica-seed", type=int, default=0,
                   help="seed of the first FastICA start (starts use ica-seed..ica-seed+R-1; default 0)")
    p.add_argument("--ica-method", choices=["best", "consensus"], default="best",
                   help="best (default): each side keeps its fit of largest FastICA contrast, every "
                        "source matched, with a reproducibility check (ica_identifiable); consensus: "
                        "only sources pairs of restarts agree on are matched (docs/definitions.md)")
    p.add_argument("--alpha", type=_alpha_arg, default=0.0,
                   help="ridge penalty of the linear map (0: plain least squares), or 'gcv': chosen "
                        "by generalised cross-validation on the fit rows")
    p.add_argument("--ica-max-rows", type=_ica_rows_arg, default="auto",
                   help="FastICA fits on at most this many rows per side (default auto: "
                        "max(20000, 50 k, k^2/4) for k components, at most 1 GiB per side)")
    p.add_argument("--ica-n-components", "--ica-components", dest="ica_n_components", type=int, metavar="K",
                   help="forces the ICA components per side (default: min(Da, Db) where the "
                        "FastICA rows support it by max(50 k, k^2/4), else the k' they support, "
                        "with a note)")
    p.add_argument("--ica-max-iter", type=int, default=200,
                   help="FastICA iterations per side (default 200); non-convergence is noted")
    p.add_argument("--ica-restarts", type=_restarts_arg, default=5, metavar="R",
                   help="FastICA random starts per side (default 5); the error's spread over "
                        "the pairings is ica_std, the mean over single starts ica_classic; 1 = "
                        "the classic ICA alignment (one draw among FastICA's local optima)")
    p.add_argument("--ica-tol", type=float, default=1e-4,
                   help="FastICA tolerance (largest gradient entry; default 1e-4)")
    p.add_argument("--diameter-max-rows", type=int, default=10000,
                   help="diam(B) is exact up to this many held-out rows, else estimated on a "
                        "random subset of that size (recorded); 0 = always exact")
    p.add_argument("--methods", default=None,
                   help="comma-separated subset of permutation,rigid,linear,ica (default: all four for "
                        "two stores; with more, only what --metric needs)")


def _add_row_and_uncertainty_arguments(p) -> None:
    """the softmax distances, the resampling (--permutations, --bootstrap, --confidence, --interval), the layer map, the rows left out, --quiet and --verify."""
    p.add_argument("--softmax-labels", metavar="IDS",
                   help="also compute the softmax-model distances (d_KL, d_LLV, d_SVD) from the "
                        "stores' 'final_hidden' layer and 'unembedding' parameter, restricted "
                        "to these label (token) ids: comma-separated, or a file of ids")
    p.add_argument("--permutations", default="0", metavar="N",
                   help="permutation p-values of every measure: N re-pairings of B's input samples "
                        "against A's (whole samples of equal length: positions within a sample stay "
                        "paired; seeded by --seed; default 0: none); fewer than 19 cannot reach "
                        "p < 0.05 (noted)")
    p.add_argument("--bootstrap", default="0", metavar="M",
                   help="bootstrap intervals: M resamples of the input samples (errors: of the "
                        "held-out samples, maps fixed; default 0: none); at least 2 / (1 - "
                        "confidence) (40 at 0.95), under 100 noted as noisy; 1000 for numbers you report")
    p.add_argument("--confidence", default="0.95", metavar="C",
                   help="level of the bootstrap intervals, in (0, 1) (default 0.95)")
    p.add_argument("--interval", default="basic", metavar="{basic,percentile}",
                   help="bootstrap interval: basic (default; carries CKA's finite-sample bias) or "
                        "percentile (docs/compare.md, Uncertainty)")
    p.add_argument("--compact", action="store_true",
                   help="print values only, without the intervals and p-values of --bootstrap / "
                        "--permutations (the JSON keeps them)")
    p.add_argument("--layer-matrix", action="store_true",
                   help="two stores: the map of a measure between every layer of A and every "
                        "layer of B (a store against itself: the self-similarity map); prints "
                        "the matrix, --plot draws it, --json writes it; with --permutations, "
                        "cells with p > 0.05 are marked")
    p.add_argument("--drop-special-tokens", action="store_true",
                   help="leave the rows of the tokenizer's special tokens ([CLS], [SEP], BOS, EOS) out, found in "
                        "the stores' recorded inputs")
    p.add_argument("--drop-positions", metavar="P[,P...]",
                   help="leave the rows at these token positions of every sample out (0: the first, -1: the "
                        "last), e.g. 0,-1 for stores without recorded inputs")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.add_argument("--verify", action="store_true",
                   help="check the stores against their checksums first (reads every row once)")


def _alpha_arg(text):
    """``--alpha``: a float >= 0 or ``gcv``."""
    if text == "gcv":
        return text
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be a number >= 0 or 'gcv', got {text!r}")
    return value


def _int_at_least(text, low, also=""):
    """``int(text)`` if it is at least ``low``, else argparse's one-line error."""
    try:
        value = int(text)
    except ValueError:
        value = low - 1
    if value < low:
        raise argparse.ArgumentTypeError(f"expected {also}an integer >= {low}, got {text!r}")
    return value


def _restarts_arg(text):
    return _int_at_least(text, 1)


def _ica_rows_arg(text):
    return text if text == "auto" else _int_at_least(text, 2, "'auto' or ")
