"""The thread policy (actkit/_threads.py): how the budget is decided, that it is applied to
every pool, and that results do not depend on it (bitwise at 1 and 2 threads)."""

import json
import os
import subprocess
import sys

import h5py
import numpy as np
import pytest

from actkit import _threads
from actkit._threads import (QUIET_ENV, available_cpus, current_threads, resolve_threads, use_threads,
                             worker_env)
from actkit.errors import ValidationError

from conftest import SENTENCES

LAYERS = "gpt_neox.layers.0,gpt_neox.layers.1"
CLOSED_FORM = ("permutation", "rigid", "linear", "linear_cka", "linear_cka_debiased", "mean_cca")


# ----------------------------------------------------------------------------- the budget
def test_explicit_threads_win_then_omp_num_threads(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert resolve_threads(5) == 5
    assert resolve_threads() == 3
    monkeypatch.setenv("OMP_NUM_THREADS", "2,1")  # nested OpenMP syntax: the outer level
    assert resolve_threads() == 2
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(ValidationError, match="threads must be a positive integer"):
            resolve_threads(bad)


def test_default_is_the_usable_cpus_less_busy_ones_shared_by_ranks(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(_threads, "_DEFAULT", [])
    monkeypatch.setattr(_threads, "available_cpus", lambda: 8)
    monkeypatch.setattr(_threads, "busy_cpus", lambda cpus: 0)
    assert resolve_threads() == 8
    _threads._DEFAULT.clear()
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")  # torchrun: ranks on this host divide the CPUs
    assert resolve_threads() == 4
    _threads._DEFAULT.clear()
    monkeypatch.setattr(_threads, "busy_cpus", lambda cpus: 7)  # other jobs keep 7 CPUs busy
    assert resolve_threads() == 1


def test_cgroup_quota_caps_the_cpus(tmp_path, monkeypatch):
    (tmp_path / "cpu.max").write_text("150000 100000\n")
    assert _threads._cgroup_cpus(tmp_path) == 1.5
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert _threads._cgroup_cpus(tmp_path) is None
    monkeypatch.setattr(_threads, "_cgroup_cpus", lambda: 1.5)
    assert available_cpus() == 1


def test_use_threads_sets_every_pool_and_restores_them():
    import torch
    from threadpoolctl import threadpool_info

    before = torch.get_num_threads()
    with use_threads(2) as n:
        assert n == 2 and current_threads() == 2 and torch.get_num_threads() == 2
        with use_threads():  # an inner call without threads= keeps the outer budget
            assert current_threads() == 2
        assert {i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"} <= {2}
        with _threads.torch_region():  # no BLAS pool awake while torch computes
            assert {i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"} <= {1}
    assert torch.get_num_threads() == before


def test_dask_workers_share_the_budget_and_sleep_when_idle():
    env = worker_env(3, threads=6)
    assert env["OMP_NUM_THREADS"] == env["OPENBLAS_NUM_THREADS"] == env["MKL_NUM_THREADS"] == "2"
    assert env["OMP_WAIT_POLICY"] == "PASSIVE" and worker_env(4, threads=2)["OMP_NUM_THREADS"] == "1"


def test_quiet_waiting_keeps_the_users_values():
    env = {"OMP_WAIT_POLICY": "ACTIVE"}
    _threads.quiet_waiting(env)
    assert env["OMP_WAIT_POLICY"] == "ACTIVE" and env["OPENBLAS_THREAD_TIMEOUT"] == QUIET_ENV["OPENBLAS_THREAD_TIMEOUT"]


def test_threads_flag_refuses_nonsense(capsys):
    from actkit.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["compare", "a.h5", "b.h5", "--threads", "0"])
    assert exc.value.code == 2 and "--threads: expected a positive integer" in capsys.readouterr().err


# ----------------------------------------------------------------------------- bitwise at 1 and 2
@pytest.fixture(scope="module")
def wide_models(tmp_path_factory):
    """Two GPT-NeoX checkpoints wide enough (256) that torch and BLAS really use two threads."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM, PreTrainedTokenizerFast

    root = tmp_path_factory.mktemp("wide")
    texts = [" ".join(SENTENCES[(i + j) % len(SENTENCES)] for j in range(1 + i % 3)) for i in range(24)]
    (root / "texts.txt").write_text("\n".join(texts) + "\n")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(texts, trainer=trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>"],
                                                               initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|endoftext|>", eos_token="<|endoftext|>",
                                   unk_token="<|endoftext|>")
    for seed in (0, 1):
        fast.save_pretrained(root / f"m{seed}")
        torch.manual_seed(seed)
        cfg = GPTNeoXConfig(vocab_size=len(fast), hidden_size=256, num_hidden_layers=2, num_attention_heads=4,
                            intermediate_size=1024, max_position_embeddings=256, rotary_pct=0.25,
                            tie_word_embeddings=False, bos_token_id=0, eos_token_id=0)
        GPTNeoXForCausalLM(cfg).eval().save_pretrained(root / f"m{seed}", safe_serialization=True)
    return root


def _run(argv, omp=None):
    env = dict(os.environ, HF_HUB_OFFLINE="1", SOURCE_DATE_EPOCH="1700000000")
    env.pop("OMP_NUM_THREADS", None)
    if omp is not None:
        env["OMP_NUM_THREADS"] = str(omp)
    out = subprocess.run([sys.executable, "-m", "actkit", *map(str, argv)], env=env, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr


def _extract(root, model, out, omp=None, extra=()):
    _run(["extract", root / model, "--inputs", root / "texts.txt", "--layers", LAYERS, "--out", out,
          "--batch-size", "8", "--no-progress", *extra], omp)


def _rows(path):
    with h5py.File(path, "r") as f:
        return {k: f[f"layers/{k}/data"][()] for k in LAYERS.split(",")}


@pytest.mark.slow
def test_extraction_rows_and_closed_form_results_are_bitwise_at_1_and_2_threads(wide_models, tmp_path):
    root = wide_models
    _extract(root, "m0", tmp_path / "a1.h5", omp=1)
    _extract(root, "m0", tmp_path / "a2.h5", omp=2)
    _extract(root, "m0", tmp_path / "af.h5", extra=["--threads", "2"])
    _extract(root, "m1", tmp_path / "b1.h5", omp=1)
    one = _rows(tmp_path / "a1.h5")
    assert one["gpt_neox.layers.0"].shape[0] > 500
    for other in ("a2.h5", "af.h5"):
        for name, rows in _rows(tmp_path / other).items():
            assert np.array_equal(rows, one[name]), (other, name)
    results = {}
    for label, omp, extra in (("1", 1, []), ("2", 2, []), ("flag", None, ["--threads", "2"])):
        _run(["compare", tmp_path / "a1.h5", tmp_path / "b1.h5", "--methods", "permutation,rigid,linear",
              "--json", tmp_path / f"c{label}.json", "--quiet", *extra], omp)
        results[label] = json.loads((tmp_path / f"c{label}.json").read_text())
    flat = {k: _closed_form(v) for k, v in results.items()}
    assert flat["1"] and all(np.isfinite(x) for x in flat["1"].values())
    assert flat["2"] == flat["1"] and flat["flag"] == flat["1"]


def _closed_form(obj, prefix=""):
    """Every closed-form value (the CLOSED_FORM keys) in a compare JSON, by path."""
    found = {}
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k in CLOSED_FORM and isinstance(v, float):
                found[prefix + k] = v
            else:
                found.update(_closed_form(v, f"{prefix}{k}/"))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            found.update(_closed_form(v, f"{prefix}{i}/"))
    return found
