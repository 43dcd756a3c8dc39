"""The thread policy on this machine: one extraction and one compare, each with actkit's default
threads, with one thread and with all CPUs forced, on the machine as it is ("as found") and
under a competing load this benchmark starts and stops itself (``--load-procs`` busy
processes, 2 by default, each bounded by ``--load-seconds``).

Every run is a fresh ``python -m actkit`` process (what a user runs) on local, randomly
initialised GPT-NeoX checkpoints (hidden 256, 2 layers, no network) and a generated text
file; the times are wall-clock seconds of the whole command, the median of ``--repeats``
runs, the settings interleaved (each first in its turn); the CPU seconds (user + system) of each run show what idle
threads burn, and the budget the default policy gave a fresh process before each round
is printed with them. ``default / best`` <= 1.10 in every case is the aim (issue 21).
The load average (1 min) is printed before and after every case: on a shared machine "as
found" is whatever the others run, so say it with the numbers.

Run (numbers in docs/performance.md)::

    python benchmarks/bench_threads.py                    # about 8 minutes on 2 idle cores, 30 loaded
    python benchmarks/bench_threads.py --texts 400 --repeats 5
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

LAYERS = "gpt_neox.layers.0,gpt_neox.layers.1"
WORDS = ("the quick brown fox jumps over a lazy dog while seven models share two busy cores on a "
         "cluster node and every thread waits for the slowest one").split()


def make_models(root: Path, texts: int, hidden: int) -> None:
    """Two random GPT-NeoX checkpoints and a text file under ``root``."""
    import random

    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM, PreTrainedTokenizerFast

    rnd = random.Random(0)
    lines = [" ".join(rnd.choice(WORDS) for _ in range(rnd.randint(20, 60))) for _ in range(texts)]
    (root / "texts.txt").write_text("\n".join(lines) + "\n")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(lines, trainer=trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>"],
                                                               initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|endoftext|>", eos_token="<|endoftext|>",
                                   unk_token="<|endoftext|>")
    for seed in (0, 1):
        fast.save_pretrained(root / f"m{seed}")
        torch.manual_seed(seed)
        cfg = GPTNeoXConfig(vocab_size=len(fast), hidden_size=hidden, num_hidden_layers=2, num_attention_heads=4,
                            intermediate_size=4 * hidden, max_position_embeddings=256, rotary_pct=0.25,
                            tie_word_embeddings=False, bos_token_id=0, eos_token_id=0)
        GPTNeoXForCausalLM(cfg).eval().save_pretrained(root / f"m{seed}", safe_serialization=True)


def run(argv, setting: str, cpus: int) -> tuple[float, float]:
    """Wall seconds and CPU seconds (user + system, the process and its children) of
    ``python -m actkit ARGV`` with the thread ``setting``."""
    import resource

    env = dict(os.environ, HF_HUB_OFFLINE="1", SOURCE_DATE_EPOCH="1700000000")
    for key in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env.pop(key, None)
    extra = {"default": [], "one": ["--threads", "1"], "all": ["--threads", str(cpus)]}[setting]
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "actkit", *map(str, argv), *extra], env=env,
                         capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(map(str, argv))} failed:\n{out.stderr}")
    return wall, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)


def default_budget() -> int:
    """The thread budget actkit's default gives a fresh process now (no OMP_NUM_THREADS)."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "LOCAL_WORLD_SIZE")}
    code = "from actkit._threads import resolve_threads; print(resolve_threads())"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return int(out.stdout)


BUSY = "import time\nend = time.time() + {s}\nx = 0\nwhile time.time() < end:\n    x += 1\n"


class Load:
    """``n`` busy single-threaded processes, each ending by itself after ``seconds``."""

    def __init__(self, n: int, seconds: float):
        self.n, self.seconds, self.procs = n, seconds, []

    def __enter__(self):
        self.procs = [subprocess.Popen([sys.executable, "-c", BUSY.format(s=self.seconds)]) for _ in range(self.n)]
        time.sleep(1.0)  # running before the first measurement
        return self

    def __exit__(self, *exc):
        for p in self.procs:
            p.kill()
            p.wait()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--texts", type=int, default=200, help="texts to extract (default 200)")
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--load-procs", type=int, default=2, help="busy processes of the loaded case")
    p.add_argument("--load-seconds", type=float, default=900, help="upper bound of each busy process's life")
    p.add_argument("--methods", default="permutation,rigid,linear",
                   help="compare's methods (add ica for the FastICA fits: minutes on a loaded 2-core machine)")
    p.add_argument("--json", help="write the results here")
    args = p.parse_args(argv)

    from actkit._threads import available_cpus

    cpus = available_cpus()
    with tempfile.TemporaryDirectory(prefix="bench_threads_") as tmp:
        root = Path(tmp)
        make_models(root, args.texts, args.hidden)
        ext = lambda m, out: ["extract", root / m, "--inputs", root / "texts.txt", "--layers", LAYERS,  # noqa: E731
                              "--out", out, "--batch-size", "16", "--no-progress", "--overwrite"]
        for m in ("m0", "m1"):  # the compare's stores (not timed)
            run(ext(m, root / f"{m}.h5"), "one", cpus)
        work = {
            "extract": ext("m0", root / "x.h5"),
            "compare": ["compare", root / "m0.h5", root / "m1.h5", "--methods", args.methods, "--quiet",
                        "--json", root / "c.json"],
        }
        results = []
        for load in ("as found", f"{args.load_procs} busy processes"):
            ctx = Load(args.load_procs, args.load_seconds) if load != "as found" else _Nothing()
            with ctx:
                for name, cmd in work.items():
                    before = os.getloadavg()[0]
                    times = {s: [] for s in ("default", "one", "all")}
                    cpu = {s: [] for s in times}
                    budgets = []
                    order = ["default", "one", "all"]
                    for r in range(args.repeats):
                        budgets.append(default_budget())
                        for s in order[r % 3:] + order[:r % 3]:  # each setting first in turn
                            wall, used = run(cmd, s, cpus)
                            times[s].append(wall)
                            cpu[s].append(used)
                    med = {s: statistics.median(v) for s, v in times.items()}
                    best = min(med.values())
                    row = {"case": name, "load": load, "load_avg_before": round(before, 2),
                           "load_avg_after": round(os.getloadavg()[0], 2), "cpus": cpus,
                           **{f"{s}_s": round(med[s], 2) for s in med},
                           **{f"{s}_runs": [round(t, 2) for t in v] for s, v in times.items()},
                           **{f"{s}_cpu_s": round(statistics.median(v), 2) for s, v in cpu.items()},
                           "default_budgets": budgets,
                           "default_over_best": round(med["default"] / best, 3)}
                    results.append(row)
                    print(f"{name:8s} {load:18s} load {row['load_avg_before']:5.2f}->{row['load_avg_after']:5.2f}  "
                          f"default {med['default']:6.2f} s  one {med['one']:6.2f} s  all({cpus}) {med['all']:6.2f} s  "
                          f"default/best {row['default_over_best']:.2f}  (default = {budgets} threads; CPU s "
                          f"{row['default_cpu_s']:.1f} / {row['one_cpu_s']:.1f} / {row['all_cpu_s']:.1f})", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return 0


class _Nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


if __name__ == "__main__":
    sys.exit(main())
