"""Issue 20, "one line for every mistake" and "what a new user hit": each attack found on a
fresh clone, kept as a test. A user mistake (or an unreachable service) gives one line
``actkit: error: ...`` and a non-zero exit, within seconds; a command in a pipe behaves as a
pipe writer; the help says what every option defaults to."""

from __future__ import annotations

import argparse
import http.server
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import actkit
from cli_helpers import cli_error, run_cli

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.usefixtures("torch_one_thread")


def _actkit(*argv, env=None, timeout=120, **kw):
    """``python -m actkit ARGV`` in a subprocess; ``(CompletedProcess, seconds)``."""
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "actkit", *map(str, argv)], capture_output=True, text=True,
                          timeout=timeout, env=env or dict(os.environ, OMP_NUM_THREADS="1"), cwd=REPO, **kw)
    return proc, time.monotonic() - t0


def _one_error_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("actkit: error: "), stderr
    return lines[0]


# ----------------------------------------------------------------------------- embedding files on Dask
@pytest.fixture(scope="module")
def scheduler():
    """The address of a real 2-worker LocalCluster on loopback, for ``--scheduler``."""
    import warnings

    import distributed
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                                           dashboard_address=None)
    yield cluster.scheduler_address
    cluster.close()


@pytest.fixture(scope="module")
def emb_files(tmp_path_factory):
    root = tmp_path_factory.mktemp("emb-dask")
    rng = np.random.default_rng(0)
    X = (rng.laplace(size=(900, 5)) @ rng.normal(size=(5, 5))).astype(np.float32)
    np.save(root / "e.npy", X)
    table = pa.table({"vec": pa.array(list(X), type=pa.list_(pa.float32()))})
    pq.write_table(table, root / "e.parquet", row_group_size=250)  # chunks straddle row groups
    return root


@pytest.mark.parametrize("command,extra", [("whiten", []), ("ica", ["--max-iter", "50"]),
                                           ("dictionary", ["--n-components", "8", "--n-epochs", "1"])])
@pytest.mark.parametrize("name", ["e.npy", "e.parquet"])
def test_embedding_files_run_on_dask_like_stores(scheduler, emb_files, tmp_path, capsys, command, extra, name):
    src = emb_files / name
    argv = [command, src, *extra, "--quiet", "--block-rows", "200"]
    code, _, err = run_cli(capsys, *argv, "--out", tmp_path / "dask.h5", "--scheduler", scheduler)
    assert code == 0, err
    code, _, err = run_cli(capsys, *argv, "--out", tmp_path / "local.h5")
    assert code == 0, err
    with actkit.open_store(tmp_path / "dask.h5") as a, actkit.open_store(tmp_path / "local.h5") as b:
        assert a.layers == b.layers == ["embeddings"]
        np.testing.assert_array_equal(a["embeddings"][:], b["embeddings"][:])  # same machine: bitwise
        np.testing.assert_array_equal(a["embeddings"].index[:], b["embeddings"].index[:])
        assert sorted(a.params) == sorted(b.params)
        for key in a.params:
            np.testing.assert_array_equal(a.params[key], b.params[key])


# ----------------------------------------------------------------------------- schedulers that are not
class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def test_a_scheduler_address_that_is_an_http_server_fails_in_one_line_within_seconds(emb_files, tmp_path):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        port = server.server_address[1]
        proc, seconds = _actkit("ica", emb_files / "e.npy", "--out", tmp_path / "o.h5",
                                "--scheduler", f"tcp://127.0.0.1:{port}", timeout=120)
    finally:
        server.shutdown()
        server.server_close()
    line = _one_error_line(proc.stderr)  # no Client.__del__ tracebacks at exit either
    assert proc.returncode == 2 and f"127.0.0.1:{port}" in line and "Dask scheduler" in line
    # the 3 s connect timeout plus the interpreter's start, with room for a loaded machine (it
    # used to hang until killed)
    assert seconds < 40, seconds
    assert not (tmp_path / "o.h5").exists()


def test_a_malformed_scheduler_address_is_one_line(emb_files, tmp_path, capsys):
    line = cli_error(capsys, "ica", emb_files / "e.npy", "--out", tmp_path / "o.h5",
                     "--scheduler", "tcp://127.0.0.1:notaport")  # was a ValueError traceback
    assert "notaport" in line and "local:N" in line


# ----------------------------------------------------------------------------- inputs
def test_a_parquet_glob_reads_string_and_large_string_as_one_column(tmp_path):
    from actkit.extractors.inputs import read_inputs

    pq.write_table(pa.table({"text": pa.array(["a b", "c d"], pa.string())}), tmp_path / "p1.parquet")
    pq.write_table(pa.table({"text": pa.array(["e f", "g h", "i"], pa.large_string())}), tmp_path / "p2.parquet")
    inputs = read_inputs(str(tmp_path / "p*.parquet"))
    assert list(inputs.texts) == ["a b", "c d", "e f", "g h", "i"]
    assert list(inputs.texts[1:4]) == ["c d", "e f", "g h"]  # a slice across the two files


def test_a_parquet_glob_of_other_mixed_types_is_one_line_naming_the_files(tiny_gpt_neox, tmp_path, capsys):
    pq.write_table(pa.table({"text": pa.array(["a b", "c d"], pa.string())}), tmp_path / "p1.parquet")
    pq.write_table(pa.table({"text": pa.array([1, 2], pa.int64())}), tmp_path / "p2.parquet")
    line = cli_error(capsys, "extract", tiny_gpt_neox, "--inputs", tmp_path / "p*.parquet", "--layers",
                     "gpt_neox.layers.0", "--out", tmp_path / "o.h5", "--no-progress")
    assert "p1.parquet" in line and "p2.parquet" in line and "int64" in line and "string" in line


@pytest.mark.parametrize("dict_split", [False, True])
def test_an_empty_save_to_disk_dataset_says_it_is_empty(tiny_gpt_neox, tmp_path, capsys, dict_split):
    import datasets

    empty = datasets.Dataset.from_dict({"text": []})
    folder = tmp_path / "empty"
    (datasets.DatasetDict({"train": empty}) if dict_split else empty).save_to_disk(str(folder))
    capsys.readouterr()  # datasets' own progress bar of the save
    line = cli_error(capsys, "extract", tiny_gpt_neox, "--inputs", folder, "--layers", "gpt_neox.layers.0",
                     "--out", tmp_path / "o.h5", "--no-progress")
    assert "holds no samples" in line and "index out of range" not in line


def test_a_file_that_is_not_npy_is_not_called_pickled(tiny_gpt_neox, tmp_path, capsys):
    bad = tmp_path / "bad.npy"
    bad.write_text("id,x\n1,2\n")
    for argv in (["ica", bad, "--out", tmp_path / "o.h5"],
                 ["extract", tiny_gpt_neox, "--inputs", bad, "--layers", "gpt_neox.layers.0", "--out",
                  tmp_path / "o.h5"]):
        line = cli_error(capsys, *argv)
        assert "is not a .npy file" in line and "pickle" not in line, line
    obj = tmp_path / "obj.npy"
    np.save(obj, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    assert "object array" in cli_error(capsys, "ica", obj, "--out", tmp_path / "o.h5")  # that one is pickled


def test_a_hub_dataset_offline_fails_fast_without_the_offline_flag(tiny_gpt_neox, tmp_path):
    """No HF_HUB_OFFLINE / HF_DATASETS_OFFLINE: the hub is simply unreachable (its endpoint a
    closed loopback port, so the test is the same on a machine with a network)."""
    env = {k: v for k, v in os.environ.items() if not k.endswith("_OFFLINE")}
    env.update(HF_HOME=str(tmp_path / "empty-cache"), HF_ENDPOINT="http://127.0.0.1:9", OMP_NUM_THREADS="1")
    proc, seconds = _actkit("extract", tiny_gpt_neox, "--inputs", "hf:wikitext", "--layers", "gpt_neox.layers.0",
                            "--out", tmp_path / "o.h5", env=env, timeout=120)
    line = _one_error_line(proc.stderr)  # no retry warnings
    assert proc.returncode == 2 and "'wikitext'" in line and "cannot be reached" in line
    assert seconds < 40, seconds  # it took 50 s of retries (one failed connection now; room for load)


# ----------------------------------------------------------------------------- token windows
def test_token_windows_do_not_print_transformers_length_warning(tmp_path, capfd):
    """The shipped Pythia-tiny's tokenizer says ``model_max_length: 128`` (the warning needs
    one; a tokenizer without it never warns); each text here is 840 tokens."""
    import json

    model = REPO / "data/zoo/pythia-tiny-seed0"
    assert json.loads((model / "tokenizer_config.json").read_text())["model_max_length"] == 128
    texts = tmp_path / "long.txt"
    texts.write_text("\n".join([" ".join(["features in the residual stream"] * 60)] * 3) + "\n")
    code = actkit.cli.main([str(a) for a in ("extract", model, "--inputs", texts, "--layers",
                                             "gpt_neox.layers.0", "--context-length", "16", "--out",
                                             tmp_path / "w.h5", "--no-progress")])
    out, err = capfd.readouterr()
    assert code == 0, err
    assert "indexing errors" not in out + err and "longer than the specified maximum" not in out + err
    assert "actkit: warning" not in err  # GPT-NeoX windows have BOS/EOS: nothing to say


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory):
    """A 1-layer BERT with a WordPiece tokenizer ([CLS]/[SEP], no BOS/EOS)."""
    import torch
    from transformers import BertConfig, BertModel, BertTokenizerFast

    path = tmp_path_factory.mktemp("tiny_bert")
    words = "features in the residual stream of a model are directions".split()
    (path / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]) + "\n")
    tok = BertTokenizerFast(vocab_file=str(path / "vocab.txt"))
    tok.save_pretrained(path)
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=len(tok), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                     intermediate_size=32, max_position_embeddings=64)
    BertModel(cfg).eval().save_pretrained(path, safe_serialization=True)
    return path


def test_bert_token_windows_say_documents_get_no_cls_or_sep(tiny_bert, tmp_path, capsys):
    texts = tmp_path / "t.txt"
    texts.write_text("features in the residual stream\na model are directions\n" * 4)
    code, _, err = run_cli(capsys, "extract", tiny_bert, "--inputs", texts, "--layers", "encoder.layer.0",
                           "--context-length", "8", "--out", tmp_path / "w.h5", "--no-progress")
    assert code == 0, err
    notes = [line for line in err.splitlines() if line.startswith("actkit: warning: token windows")]
    assert len(notes) == 1 and "[CLS]/[SEP]" in notes[0] and "no separator" in notes[0], err


# ----------------------------------------------------------------------------- pipes
@pytest.mark.parametrize("argv", [["actkit", "layers", "data/zoo/pythia-tiny-seed0"], ["actkit", "extract", "--help"],
                                  ["actkit.zoo", "list"]])
def test_a_command_whose_reader_has_gone_ends_quietly(argv):
    """``actkit layers ... | head``, ``python -m actkit.zoo list | head``: the reader closes the
    pipe; no BrokenPipeError traceback."""
    proc = subprocess.Popen([sys.executable, "-m", *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=REPO, env=dict(os.environ, OMP_NUM_THREADS="1"))
    proc.stdout.close()  # the reader is gone before the first line is written
    try:
        err = proc.stderr.read().decode()
        code = proc.wait(timeout=120)
    finally:
        proc.kill()
    assert err == "", err  # no BrokenPipeError traceback, nor "Exception ignored ..." at exit
    # a command: 141 = 128 + SIGPIPE, as a shell reports `seq 1 100000 | head`; argparse's own
    # help printer ignores a failed write and exits 0
    assert code == (0 if "--help" in argv else 141), code


# ----------------------------------------------------------------------------- help and info
def _subparsers():
    from actkit.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices


def _option_help(parser, option) -> str:
    """The help text ``--help`` prints for ``option`` (``%(default)s`` filled in)."""
    action = next(a for a in parser._actions if option in a.option_strings)
    return " ".join((action.help % {**vars(action), "prog": parser.prog}).split())


def test_every_option_with_a_default_shows_it_in_the_help():
    commands = _subparsers()
    for name, parser in commands.items():
        for action in parser._actions:
            if not action.option_strings or action.nargs == 0 or action.required or action.help is None:
                continue
            if action.default is not None and action.default is not False:  # 0 and 0.0 included
                assert "default" in _option_help(parser, action.option_strings[0]), (name, action.option_strings)
    assert _option_help(commands["ica"], "--seed").endswith("(default: 0)")
    assert _option_help(commands["compare"], "--seed").endswith("(default: 0)")
    assert _option_help(commands["compare"], "--alpha").endswith("(default: 0.0)")
    assert "default: all" in _option_help(commands["compare"], "--max-samples")
    for option in ("--max-samples", "--max-length", "--max-tokens", "--context-length"):
        assert "default:" in _option_help(commands["extract"], option), option


def test_info_has_a_description_and_names_a_missing_inputs_fingerprint(tmp_path, capsys):
    info = _subparsers()["info"]
    assert info.description and "inputs fingerprint" in info.description
    np.save(tmp_path / "e.npy", np.random.default_rng(0).normal(size=(20, 3)).astype(np.float32))
    code, _, err = run_cli(capsys, "import", tmp_path / "e.npy", "--out", tmp_path / "e.h5")
    assert code == 0, err
    code, out, _ = run_cli(capsys, "info", tmp_path / "e.h5")
    line = next(line for line in out.splitlines() if "inputs fingerprint:" in line)
    assert line.split("inputs fingerprint:")[1].strip().startswith("none ("), line


def test_the_truncation_warning_names_a_flag_the_command_has(tiny_gpt_neox, tmp_path, capsys):
    """``compare --inputs`` has no --max-length: the warning names extract's."""
    texts = tmp_path / "long.txt"
    texts.write_text("short text\n" + " ".join(["features in the residual stream"] * 60) + "\nend\n")
    code, _, err = run_cli(capsys, "compare", tiny_gpt_neox, tiny_gpt_neox, "--inputs", texts, "--layers",
                           "gpt_neox.layers.0", "--methods", "permutation,rigid", "--batch-size", "1")
    assert code == 0, err
    warning = next(line for line in err.splitlines() if "truncated" in line)
    assert "`actkit extract --max-length`" in warning, warning
    assert "--max-length" not in " ".join(sum((a.option_strings for a in _subparsers()["compare"]._actions), []))


def test_matrix_files_is_an_attribute_of_the_package():
    proc = subprocess.run([sys.executable, "-c", "import actkit; print(actkit.matrix_files.open_matrix.__name__)"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "open_matrix", proc.stderr


# ----------------------------------------------------------------------------- issue 39: constant inputs
@pytest.mark.parametrize("measures", [None, "linear_cka,rsa"])
def test_a_constant_layer_is_one_line_before_any_fit(tmp_path, capsys, measures):
    """Issue 39: a dead layer (every row the same) gave a silent ``nan`` CKA (and, with ``rsa``,
    a number made of float noise); now compare stops before fitting a map, naming the side."""
    rng = np.random.default_rng(0)
    np.save(tmp_path / "live.npy", rng.normal(size=(300, 6)).astype(np.float32))
    np.save(tmp_path / "dead.npy", np.tile(rng.normal(size=6), (300, 1)).astype(np.float32))
    extra = ["--measures", measures] if measures else []
    t0 = time.monotonic()
    line = cli_error(capsys, "compare", tmp_path / "dead.npy", tmp_path / "live.npy", "--methods", "linear", *extra)
    assert time.monotonic() - t0 < 30
    assert "A is constant (every row the same, zero variance)" in line and "check the layer" in line, line
    line = cli_error(capsys, "compare", tmp_path / "live.npy", tmp_path / "dead.npy", "--methods", "linear", *extra)
    assert "B is constant" in line, line
