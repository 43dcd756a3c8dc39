"""What actkit says: --help texts, extract's outcome lines and refusals, warnings, info."""

from __future__ import annotations

import argparse
import os

import pytest

from actkit.cli import build_parser
from cli_helpers import cli_error, run_cli

pytestmark = pytest.mark.usefixtures("torch_one_thread")


def _subparsers():
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return action.choices


def test_every_option_has_help_and_shows_its_default():
    missing, no_default = [], []
    for name, sub in _subparsers().items():
        for action in sub._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            label = f"{name} {'/'.join(action.option_strings) or action.dest}"
            if not action.help:
                missing.append(label)
            elif action.option_strings and action.default not in (None, False, argparse.SUPPRESS) \
                    and "default" not in action.help.lower():
                no_default.append(label)
        text = sub.format_help()
        assert "%(default)" not in text
    assert missing == [] and no_default == []
    help_text = _subparsers()["ica"].format_help()
    for option, default in (("--max-iter", "200"), ("--tol", "0.0001"), ("--algorithm", "parallel")):
        block = help_text[help_text.index(f"\n  {option}"):]
        assert f"(default: {default})" in " ".join(block[:400].split())
    extract = " ".join(_subparsers()["extract"].format_help().split())
    assert "samples per forward pass (default: 32)" in extract
    assert "e.g. cpu, cuda, cuda:1 (default: cpu)" in extract


def test_help_wraps_to_the_terminal(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    for name, sub in _subparsers().items():
        lines = sub.format_help().splitlines()
        assert max(len(line) for line in lines) <= 80, (name, max(lines, key=len))
    text = _subparsers()["reproduce"].format_help()
    assert "  kl               Nielsen et al., KL counterexample and the d_LLV bound" in text  # table kept


def test_extract_says_what_it_did_and_what_differs(tiny_gpt_neox, text_file, tmp_path, capsys):
    out = tmp_path / "s.h5"
    argv = ["extract", tiny_gpt_neox, "--inputs", text_file, "--layers", "gpt_neox.layers.1", "--out", out,
            "--no-progress"]
    code, stdout, err = run_cli(capsys, *argv)
    assert code == 0 and stdout.strip() == str(out) and err.strip() == f"wrote {out}: 7 samples"
    code, stdout, err = run_cli(capsys, *argv)
    assert code == 0 and err.strip() == f"{out} is already complete for this request (7 samples); nothing to do"
    line = cli_error(capsys, *argv, "--pool", "mean")
    assert line == (f"actkit: error: {out} already holds a store of a different request (--pool: mean here, none "
                    "in the store); pass --overwrite (overwrite=True) to replace it")
    line = cli_error(capsys, *argv, "--pool", "mean", "--batch-size", "4", "--max-length", "5")
    assert "(--pool: mean here, none in the store; --batch-size: 4 here, 32 in the store; --max-length: 5 here, " \
           "none in the store; and inputs, the model's preprocessing); pass --overwrite" in line


def test_long_sample_warning_is_one_line_once_and_not_on_a_noop(tiny_gpt_neox, tmp_path, capsys):
    texts = tmp_path / "long.txt"
    texts.write_text("short text\n" + " ".join(["features in the residual stream"] * 60) + "\nend\n")
    out = tmp_path / "w.h5"
    argv = ["extract", tiny_gpt_neox, "--inputs", texts, "--layers", "gpt_neox.layers.0", "--out", out,
            "--no-progress", "--batch-size", "1"]
    code, _, err = run_cli(capsys, *argv)
    assert code == 0
    assert err.splitlines() == [
        "actkit: warning: 1 of 3 samples are longer than the model's 128 positions and were truncated to 128 "
        "tokens (`actkit extract --max-length` sets a lower one)",
        f"wrote {out}: 3 samples"]
    code, _, err = run_cli(capsys, *argv)
    assert code == 0 and "actkit: warning" not in err and "nothing to do" in err


def test_info_prints_words_not_none(tmp_path, capsys):
    import numpy as np

    from actkit.store import LayerSpec, create_store

    path = tmp_path / "s.h5"
    w = create_store(path, [LayerSpec("x", 4, 2)], n_samples=4, request={},
                     provenance={"model": "m", "revision": None, "pool": "none"})
    w.append("x", np.zeros((2, 2), np.float32))
    w.checkpoint(2, force=True)
    w.close()
    texts = [run_cli(capsys, "info", p)[1] for p in (path, f"{path}.partial")]
    assert texts[0] == texts[1]  # the unfinished store under either name
    assert "None" not in texts[0] and "revision" not in texts[0]
    assert "(2/4 samples written; rerun the command to resume)" in texts[0]
    bare = tmp_path / "plain.h5"
    import h5py

    with h5py.File(bare, "w") as f:
        f["x"] = 1
    line = cli_error(capsys, "info", bare)
    assert "None" not in line and "not an actkit store" in line


def test_unfinished_store_message_names_how_to_resume(tmp_path, capsys):
    import numpy as np

    from actkit.store import LayerSpec, create_store

    path = tmp_path / "u.h5"
    w = create_store(path, [LayerSpec("x", 4, 2)], n_samples=4, request={})
    w.append("x", np.zeros((1, 2), np.float32))
    w.checkpoint(1, force=True)
    w.close()
    for command in (["ica", path, "--layer", "x", "--out", tmp_path / "o.h5"],
                    ["dictionary", path, "--layer", "x", "--out", tmp_path / "o.h5", "--n-components", "2"],
                    ["compare", path, path]):
        line = cli_error(capsys, *command)
        assert line == (f"actkit: error: store {path} is not finished (1/4 samples written); rerun the command "
                        "that wrote it (the same command) to resume it")
    assert not os.path.exists(tmp_path / "o.h5")
