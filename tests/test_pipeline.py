"""Extract-then-compare as one API call: ``actkit.compare_models`` is what
``actkit compare MODEL_A MODEL_B --inputs PATH --layers L`` prints."""

from __future__ import annotations

import json

import numpy as np
import pytest

import actkit
from actkit.errors import ActkitError
from cli_helpers import perturbed_copy, run_cli


def test_compare_models_equals_the_cli(tiny_gpt_neox, tmp_path, capsys):
    other = tmp_path / "other"
    perturbed_copy(tiny_gpt_neox, other)
    rng = np.random.default_rng(0)
    words = "the quick brown fox jumps over lazy dog model features sparse whitening".split()
    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(" ".join(rng.choice(words, 10)) for _ in range(30)) + "\n")
    layers = ["gpt_neox.layers.0", "gpt_neox.layers.2"]
    results = actkit.compare_models(tiny_gpt_neox, other, texts, layers=layers,
                                    extract_kwargs={"progress": False}, methods=("permutation", "rigid", "linear"))
    assert list(results) == layers
    js = tmp_path / "cli.json"
    code, _, err = run_cli(capsys, "compare", tiny_gpt_neox, other, "--inputs", texts, "--layers", ",".join(layers),
                           "--methods", "permutation,rigid,linear", "--json", js, "--quiet")
    assert code == 0, err
    cli = json.loads(js.read_text())
    for name in layers:
        api = results[name].to_dict()
        for m in ("permutation", "rigid", "linear", "linear_cka"):
            assert api[m] == pytest.approx(cli[name][m], rel=1e-9, abs=1e-12), (name, m)
        assert 0 < api["linear"] < api["permutation"]


def test_compare_models_needs_layers_and_two_models(tiny_gpt_neox, tmp_path):
    with pytest.raises(ActkitError, match="layers"):
        actkit.pipeline.extract_stores([tiny_gpt_neox, tiny_gpt_neox], "x.txt", tmp_path, layers=[])
    with pytest.raises(ActkitError, match="two models"):
        actkit.pipeline.extract_stores([tiny_gpt_neox], "x.txt", tmp_path, layers=["gpt_neox.layers.0"])
