"""Extraction throughput against a bare forward loop (same batches) and the usual alternative.

Models (random init, built from configs, nothing downloaded):

* ``pythia`` -- a Pythia-70M-shaped GPT-NeoX (6 layers, width 512, 8 heads, vocab 50,304),
  on ``--texts`` synthetic texts of ``--tokens`` tokens each;
* ``resnet18`` -- timm ``resnet18`` on ``--images`` random 224x224 images (timm eval transform).
  actkit runs CNNs in channels-last memory format; ``bare`` is the plain NCHW model a user would
  run, and ``bare channels-last`` is shown too.

Each scenario runs the same batches (same padding, same preprocessing) and reports
samples/s, and tokens/s or images/s, and the ratio to the bare forward loop:

``bare``          the model's plain forward (causal LM: with its 50k-vocabulary head)
``bare-base``     pythia only: the base model without the head (what per-layer extraction
                  needs at most)
``hidden+save``   ``output_hidden_states=True`` (pythia) or ``forward_intermediates`` of every
                  stage (resnet18), all layers saved with h5py (padding excluded)
``actkit-*``      ``actkit.extract`` end to end, excluding model loading (the loaded model is
                  reused): tokenising, probing, store creation, forward with hooks, rows written,
                  finalisation

Usage::

    python benchmarks/bench_extract.py                 # both models, 1 torch thread
    python benchmarks/bench_extract.py --model pythia --threads 2 --repeats 3

Numbers depend on the machine; on a shared machine take the best of several repeats.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def build_pythia(folder: Path):
    """Save a Pythia-70M-shaped random GPT-NeoX and a byte-level BPE tokenizer in ``folder``."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM, PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=512, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([" ".join(f"w{i % 97}" for i in range(2000))], trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>")
    fast.save_pretrained(folder)
    torch.manual_seed(0)
    cfg = GPTNeoXConfig(vocab_size=50304, hidden_size=512, num_hidden_layers=6, num_attention_heads=8,
                        intermediate_size=2048, max_position_embeddings=2048, rotary_pct=0.25,
                        rotary_emb_base=10000, use_parallel_residual=True, tie_word_embeddings=False)
    GPTNeoXForCausalLM(cfg).eval().save_pretrained(folder, safe_serialization=True)


def _texts(n, tokens, tokenizer):
    """``n`` texts of exactly ``tokens`` tokens each (so every scenario sees the same work)."""
    rng = np.random.default_rng(0)
    vocab = [t for t in tokenizer.get_vocab() if t.isalnum()]
    out = []
    for _ in range(n):
        words = list(rng.choice(vocab, size=tokens * 2))
        text = ""
        while True:
            cand = (text + " " + words.pop()).strip()
            if len(tokenizer(cand)["input_ids"]) > tokens:
                break
            text = cand
        out.append(text)
    return out


def _with_adapter(adapter, fn):
    """Run ``fn`` with ``extractors.registry.load_model`` returning the already loaded adapter."""
    import actkit.extractors.registry as registry

    real = registry.load_model
    registry.load_model = lambda *a, **k: adapter
    try:
        return fn()
    finally:
        registry.load_model = real


def bench_pythia(args, work: Path):
    import h5py
    import torch

    import actkit
    from actkit.extractors.inputs import read_inputs
    from actkit.extractors.registry import load_model

    model_dir = work / "pythia70m-shaped"
    build_pythia(model_dir)
    adapter = load_model(str(model_dir))
    texts = _texts(args.texts, args.tokens, adapter.tokenizer)
    text_file = work / "texts.txt"
    text_file.write_text("\n".join(texts) + "\n")
    data = read_inputs(text_file)
    adapter.prepare(data, None)
    n_tokens = int(adapter.lengths().sum())
    bs = args.batch_size
    batches = [adapter.batch(data, lo, min(lo + bs, len(data))) for lo in range(0, len(data), bs)]
    model = adapter.model
    layers = [f"gpt_neox.layers.{i}" for i in range(6)]

    def bare():
        with torch.inference_mode():
            for b in batches:
                model(**b.kwargs)

    def bare_base():
        with torch.inference_mode():
            for b in batches:
                model.gpt_neox(input_ids=b.kwargs["input_ids"], attention_mask=b.kwargs["attention_mask"],
                               use_cache=False)

    def hidden_save():
        path = work / "hidden.h5"
        with torch.inference_mode(), h5py.File(path, "w") as f:
            ds = [f.create_dataset(f"l{i}", shape=(n_tokens, 512), dtype="float32") for i in range(6)]
            row = 0
            for b in batches:
                hs = model.gpt_neox(input_ids=b.kwargs["input_ids"], attention_mask=b.kwargs["attention_mask"],
                                    use_cache=False, output_hidden_states=True).hidden_states
                r = int(b.mask.sum())
                for i in range(6):
                    ds[i][row : row + r] = hs[i + 1][b.mask].numpy()
                row += r
        path.unlink()

    def actkit_run(layer_names, pool):
        def run():
            out = work / "actkit.h5"
            _with_adapter(adapter, lambda: actkit.extract(str(model_dir), text_file, out, layers=layer_names,
                                                          pool=pool, batch_size=bs, progress=False,
                                                          overwrite=True))
            _record_stream(run)
            out.unlink()
        return run

    scenarios = [
        ("bare (LM with head)", bare),
        ("bare-base (no head)", bare_base),
        ("hidden+save (output_hidden_states, 6 layers)", hidden_save),
        ("actkit pool=none, 6 layers", actkit_run(layers, "none")),
        ("actkit pool=mean, 6 layers", actkit_run(layers, "mean")),
        ("actkit pool=none, layers.5 only", actkit_run(["gpt_neox.layers.5"], "none")),
        ("actkit pool=none, layers.1 only", actkit_run(["gpt_neox.layers.1"], "none")),
    ]
    return _report("pythia-70m-shaped GPT-NeoX", scenarios, len(data), n_tokens, "tokens", args.repeats)


def bench_resnet(args, work: Path):
    import h5py
    import timm
    import torch
    from safetensors.torch import save_file

    import actkit
    from actkit.extractors.inputs import read_inputs
    from actkit.extractors.registry import load_model

    torch.manual_seed(0)
    ckpt = work / "resnet18.safetensors"
    save_file({k: v.contiguous() for k, v in timm.create_model("resnet18").state_dict().items()}, str(ckpt))
    images = np.random.default_rng(0).integers(0, 256, size=(args.images, 224, 224, 3), dtype=np.uint8)
    npy = work / "images.npy"
    np.save(npy, images)
    adapter = load_model("timm:resnet18", checkpoint=ckpt)  # actkit runs CNNs channels-last
    data = read_inputs(npy)
    model = timm.create_model("resnet18", pretrained=False).eval()  # the plain model, NCHW
    model.load_state_dict(adapter.model.state_dict())
    bs = args.batch_size
    ranges = [(lo, min(lo + bs, len(data))) for lo in range(0, len(data), bs)]
    stages = ["layer1", "layer2", "layer3", "layer4"]

    def pixels(lo, hi):  # timm's eval transform, default (NCHW) layout
        return torch.stack([adapter.transform(img) for img in data.images(lo, hi)])

    def bare():
        with torch.inference_mode():
            for lo, hi in ranges:
                model(pixels(lo, hi))

    def bare_cl():
        with torch.inference_mode():
            for lo, hi in ranges:
                adapter.model(adapter.batch(data, lo, hi).kwargs["x"])

    def inter_save():
        path = work / "inter.h5"
        with torch.inference_mode(), h5py.File(path, "w") as f:
            ds = None
            for lo, hi in ranges:
                feats = model.forward_intermediates(pixels(lo, hi), indices=[1, 2, 3, 4],
                                                    intermediates_only=True)
                rows = [x.permute(0, 2, 3, 1).reshape(-1, x.shape[1]).numpy() for x in feats]
                if ds is None:
                    per = [r.shape[0] // (hi - lo) for r in rows]
                    ds = [f.create_dataset(f"s{i}", shape=(len(data) * p, r.shape[1]), dtype="float32")
                          for i, (p, r) in enumerate(zip(per, rows))]
                for d, r, p in zip(ds, rows, per):
                    d[lo * p : lo * p + r.shape[0]] = r
        path.unlink()

    def actkit_run(layer_names, pool):
        def run():
            out = work / "actkit.h5"
            _with_adapter(adapter, lambda: actkit.extract("timm:resnet18", npy, out, layers=layer_names, pool=pool,
                                                          checkpoint=ckpt, batch_size=bs, progress=False,
                                                          overwrite=True))
            _record_stream(run)
            out.unlink()
        return run

    scenarios = [
        ("bare (preprocess + forward, NCHW)", bare),
        ("bare channels-last (what actkit runs)", bare_cl),
        ("forward_intermediates+save (4 stages, full maps)", inter_save),
        ("actkit pool=none, 4 stages (full maps)", actkit_run(stages, "none")),
        ("actkit pool=mean, 4 stages", actkit_run(stages, "mean")),
        ("actkit pool=none, layer1 only", actkit_run(["layer1"], "none")),
    ]
    return _report("timm resnet18 (224x224)", scenarios, len(data), len(data), "images", args.repeats)


def _record_stream(run):
    """Keep the best streaming-loop time of an actkit run (extraction minus set-up/finalise)."""
    from actkit.extractors.extract import LAST_RUN

    run.stream = min(getattr(run, "stream", float("inf")), LAST_RUN["stream"])
    run.stream_cpu = min(getattr(run, "stream_cpu", float("inf")), LAST_RUN["stream_cpu"])


def _report(title, scenarios, n_samples, n_units, unit, repeats):
    """Time every scenario ``repeats`` times, round-robin (so load drift on a shared machine hits
    all alike), keeping the best wall-clock and the best CPU time (``time.process_time``: this
    process only, robust against other jobs on the machine) of each."""
    print(f"\n## {title}: {n_samples} samples, {n_units} {unit}")
    for _, fn in scenarios:
        fn()  # warm-up (allocator, lazy imports)
        if hasattr(fn, "stream"):
            del fn.stream, fn.stream_cpu
    wall = {name: float("inf") for name, _ in scenarios}
    cpu = dict(wall)
    for _ in range(repeats):
        for name, fn in scenarios:
            w0, c0 = time.perf_counter(), time.process_time()
            fn()
            wall[name] = min(wall[name], time.perf_counter() - w0)
            cpu[name] = min(cpu[name], time.process_time() - c0)
    base_name = scenarios[0][0]
    print(f"{'scenario':50s} {'wall s':>7s} {unit + '/s':>9s} {'ratio':>6s} {'cpu s':>7s} {'ratio':>6s}"
          f"  streaming loop only: wall s, cpu s, cpu ratio")
    rows = []
    for name, fn in scenarios:
        rate = n_units / wall[name]
        r_wall, r_cpu = wall[base_name] / wall[name], cpu[base_name] / cpu[name]
        extra = ""
        if hasattr(fn, "stream"):
            extra = f"  {fn.stream:6.2f} {fn.stream_cpu:6.2f} {cpu[base_name] / fn.stream_cpu:6.2f}"
        print(f"{name:50s} {wall[name]:7.2f} {rate:9.1f} {r_wall:6.2f} {cpu[name]:7.2f} {r_cpu:6.2f}{extra}",
              flush=True)
        rows.append((name, wall[name], cpu[name], r_wall, r_cpu))
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", choices=["pythia", "resnet18", "all"], default="all")
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    p.add_argument("--texts", type=int, default=48)
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--images", type=int, default=48)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {args.threads} thread(s), batch size {args.batch_size}, "
          f"best of {args.repeats} (round-robin); ratio = bare time / scenario time")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if args.model in ("pythia", "all"):
            bench_pythia(args, work)
        if args.model in ("resnet18", "all"):
            bench_resnet(args, work)
    return 0


if __name__ == "__main__":
    sys.exit(main())
