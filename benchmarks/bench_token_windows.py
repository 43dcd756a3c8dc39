"""Token-window extraction from a local parquet dataset against the bare forward pass.

A Pythia-70M-shaped GPT-NeoX (random init from its config, nothing downloaded; built by
``bench_extract.build_pythia``) and a parquet dataset of synthetic texts written with
``datasets``. ``actkit.extract(..., context_length=L, max_tokens=N)`` end to end (reading the
parquet column, packing the windows, probe, store creation, hooked forward, rows written,
finalisation; model loading excluded) runs against the same windows fed, in the same
batches, to

``bare``        the LM forward with its 50k-vocabulary head;
``bare-base``   the base model (``model.gpt_neox``) without the head -- the forward that
                per-layer extraction needs at most.

Usage::

    python benchmarks/bench_token_windows.py                      # L=128, N=16384, 1 thread
    python benchmarks/bench_token_windows.py --max-tokens 32768 --repeats 3

Best of ``--repeats`` round-robin runs (wall and CPU time of this process).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_extract import _record_stream, _report, _with_adapter, build_pythia  # noqa: E402


def write_parquet(path: Path, n_texts: int, words_per_text: int, seed: int = 0) -> None:
    """``n_texts`` texts of random vocabulary words, as a one-column (``text``) parquet file."""
    import datasets

    rng = np.random.default_rng(seed)
    words = [f"w{i}" for i in range(97)] + ["the", "of", "and", "features", "model", "layer"]
    texts = [" ".join(rng.choice(words, size=int(rng.integers(words_per_text // 2, words_per_text * 2))))
             for _ in range(n_texts)]
    datasets.Dataset.from_dict({"text": texts}).to_parquet(str(path))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--context-length", type=int, default=128)
    p.add_argument("--max-tokens", type=int, default=16384)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args(argv)
    import torch

    import actkit
    from actkit.extractors.inputs import read_inputs
    from actkit.extractors.registry import load_model

    torch.set_num_threads(args.threads)
    L, N, bs = args.context_length, args.max_tokens, args.batch_size
    print(f"torch {torch.__version__}, {args.threads} thread(s), batch {bs}, L={L}, N={N}, best of {args.repeats}")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        model_dir = work / "pythia70m-shaped"
        build_pythia(model_dir)
        parquet = work / "corpus.parquet"
        write_parquet(parquet, n_texts=4 * N // 100 + 10, words_per_text=100)
        adapter = load_model(str(model_dir))
        data = read_inputs(parquet)
        adapter.prepare_windows(data, L, N, progress=False)
        windows = torch.from_numpy(adapter.windows.copy())
        n_tokens = int(windows.numel())
        model = adapter.model
        batches = [windows[lo : lo + bs] for lo in range(0, windows.shape[0], bs)]

        def bare():
            with torch.inference_mode():
                for ids in batches:
                    model(input_ids=ids, use_cache=False)

        def bare_base():
            with torch.inference_mode():
                for ids in batches:
                    model.gpt_neox(input_ids=ids, use_cache=False)

        def actkit_run(layers, pool):
            def run():
                out = work / "actkit.h5"
                _with_adapter(adapter, lambda: actkit.extract(str(model_dir), parquet, out, layers=layers,
                                                              pool=pool, batch_size=bs, context_length=L,
                                                              max_tokens=N, progress=False, overwrite=True))
                _record_stream(run)
                out.unlink()
            return run

        all_layers = [f"gpt_neox.layers.{i}" for i in range(6)]
        scenarios = [
            ("bare-base (no head), same windows", bare_base),
            ("bare (LM with head), same windows", bare),
            ("actkit windows from parquet, layers.5, pool none", actkit_run(["gpt_neox.layers.5"], "none")),
            ("actkit windows from parquet, 6 layers, pool none", actkit_run(all_layers, "none")),
            ("actkit windows from parquet, 6 layers, pool mean", actkit_run(all_layers, "mean")),
        ]
        _report(f"pythia-70m-shaped GPT-NeoX, {windows.shape[0]} windows of {L} tokens from parquet", scenarios,
                int(windows.shape[0]), n_tokens, "tokens", args.repeats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
