"""Stores remember their inputs (issue 40) and special tokens are optional (issue 39).

* an extraction records, once per store, the token ids of every sample, the tokenizer's
  identity and its decoded vocabulary (``store.inputs``), or each image's source and the
  model's preprocessing geometry; checked against the tokenizer / image processor run here;
* ``--skip-special-tokens`` leaves [CLS]/[SEP] (a BERT WordPiece tokenizer) and BOS/EOS (a
  GPT-NeoX-like BPE tokenizer) out of the per-token rows, with the true positions kept;
  ``Layer.drop_rows`` and ``compare --drop-special-tokens / --drop-positions`` do the same
  on existing stores and give the same rows and numbers;
* layers are stored in model depth order; a store without recorded inputs takes them
  again (``record_inputs``, fingerprints checked); derived stores reach their source's.
"""

from __future__ import annotations

import json
from pathlib import Path
import warnings

import numpy as np
import pytest

import actkit
from actkit.errors import ActkitError, StoreError
from actkit.store import open_store
from cli_helpers import cli_error, run_cli
from conftest import SENTENCES, _corpus

ZOO = Path(__file__).resolve().parents[1] / "data" / "zoo"

pytestmark = pytest.mark.usefixtures("torch_one_thread")


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory):
    """A 2-layer BERT with a WordPiece tokenizer that adds [CLS] ... [SEP]."""
    import torch
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import BertConfig, BertModel, BertTokenizerFast

    path = tmp_path_factory.mktemp("tiny_bert")
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    tok.train_from_iterator(_corpus(), trainer=trainers.WordPieceTrainer(
        vocab_size=200, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]))
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
                                                       special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    fast = BertTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
                             sep_token="[SEP]", mask_token="[MASK]")
    fast.save_pretrained(path)
    torch.manual_seed(3)
    cfg = BertConfig(vocab_size=len(fast), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=64, max_position_embeddings=64)
    BertModel(cfg).eval().save_pretrained(path, safe_serialization=True)
    return path


@pytest.fixture(scope="module")
def tiny_neox_bos_eos(tmp_path_factory):
    """A 2-layer GPT-NeoX whose BPE tokenizer adds <s> ... </s> (BOS and EOS)."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM, PreTrainedTokenizerFast

    path = tmp_path_factory.mktemp("tiny_neox_bos_eos")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(_corpus(), trainer=trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<s>", "</s>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", special_tokens=[("<s>", tok.token_to_id("<s>")), ("</s>", tok.token_to_id("</s>"))])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>")
    fast.save_pretrained(path)
    torch.manual_seed(4)
    cfg = GPTNeoXConfig(vocab_size=len(fast), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=64, rotary_pct=0.25,
                        bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id)
    GPTNeoXForCausalLM(cfg).eval().save_pretrained(path, safe_serialization=True)
    return path


def _tokenizer(path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path)


def _extract(model, text_file, out, **kw):
    kw.setdefault("layers", "resid.1,embed,resid.0")
    return actkit.extract(str(model), text_file, out, progress=False, **kw)


@pytest.fixture(scope="module", params=["bert", "neox"])
def text_pair(request, tmp_path_factory, text_file):
    """(model dir, store of every token, store with --skip-special-tokens) for each tokenizer."""
    model = request.getfixturevalue("tiny_bert" if request.param == "bert" else "tiny_neox_bos_eos")
    d = tmp_path_factory.mktemp(f"stores_{request.param}")
    full = _extract(model, text_file, d / "full.h5")
    skip = _extract(model, text_file, d / "skip.h5", skip_special_tokens=True)
    return model, full, skip


def test_text_store_records_ids_tokenizer_and_vocabulary(text_pair):
    model, full, _ = text_pair
    tok = _tokenizer(model)
    with open_store(full) as st:
        assert st.attrs["actkit_format"] == "actkit-store/5"
        # depth order, not request order (resid.1,embed,resid.0 was asked)
        assert st.layers == ["embed", "resid.0", "resid.1"]
        rec = st.inputs
        assert rec.kind == "text" and rec.n_samples == len(SENTENCES)
        assert rec.fingerprint == st.inputs_fingerprint
        assert len(rec.vocab) == len(tok) == len(rec.special) == len(rec.vocab_tokens)
        assert set(np.flatnonzero(rec.special)) == set(tok.all_special_ids)
        assert rec.vocab_tokens == tok.convert_ids_to_tokens(list(range(len(tok))))
        index = st["resid.0"].index
        for i, text in enumerate(SENTENCES):
            ids = tok(text)["input_ids"]
            assert rec.token_ids(i).dtype == np.int64 and rec.token_ids(i).tolist() == ids
            assert rec.tokens(i) == [tok.decode([t]) for t in ids]
            assert index[index[:, 0] == i, 1].tolist() == list(range(len(ids)))  # position p = entry p
            # the original text and the tokenizer's offset mapping; a token without characters
            # (a special token, mapped to (0, 0)) has an empty span where it stands
            assert rec.has_text and rec.text(i) == text
            spans, end = rec.token_spans(i).tolist(), 0
            for t, off, span in zip(ids, tok(text, return_offsets_mapping=True)["offset_mapping"], spans):
                assert span == ([end, end] if off[0] == off[1] else list(off))
                assert off[0] < off[1] or t in tok.all_special_ids
                end = span[1]
        # the recorded identity is enough for transformers to decode offline
        again = _tokenizer(rec.tokenizer["name_or_path"])
        assert again.decode(rec.token_ids(3).tolist()) == tok.decode(tok(SENTENCES[3])["input_ids"])
        assert st.info()["inputs"]["tokenizer"]["name_or_path"] == str(model)
        st.verify()


@pytest.mark.parametrize("which", ["tiny_bert", "tiny_neox_bos_eos", "tiny_gpt_neox"])
def test_the_vocabulary_is_decoded_as_batch_decode_does(request, which):
    """The recorded vocabulary (decoded in the tokenizer's backend in one call) is
    ``batch_decode`` of each id, without clean-up; a tokenizer with its own ``_decode`` is
    decoded by that."""
    from actkit.extractors.hf_text import decode_each

    tok = _tokenizer(request.getfixturevalue(which))
    ids = list(range(len(tok)))
    want = tok.batch_decode([[i] for i in ids], skip_special_tokens=False, clean_up_tokenization_spaces=False)
    assert decode_each(tok, ids) == want

    class Shouting(type(tok)):
        def _decode(self, token_ids, **kwargs):
            return super()._decode(token_ids, **kwargs).upper()

    tok.__class__ = Shouting
    assert decode_each(tok, ids) == [w.upper() for w in want]


def test_byte_level_tokens_that_split_a_character_show_their_bytes():
    """The zoo's Pythia tokenizer (byte-level BPE): a token that is only part of a UTF-8
    character decodes alone to U+FFFD; the recorded vocabulary shows its bytes instead, and the
    bytes of a text's tokens, joined, are the text. Whole tokens keep the tokenizer's string."""
    from transformers import AutoTokenizer

    from actkit.extractors.hf_text import tokenizer_record

    tok = AutoTokenizer.from_pretrained(ZOO / "pythia-tiny-seed0")
    vocab = tokenizer_record(tok)["vocab"]
    plain = tok.batch_decode([[i] for i in range(len(tok))], clean_up_tokenization_spaces=False)
    assert sum("\ufffd" in v for v in plain) > 100 and not any("\ufffd" in v for v in vocab)
    assert all(v == p for v, p in zip(vocab, plain) if "\ufffd" not in p)  # whole tokens unchanged
    text = "na\u00efve caf\u00e9 \u2014 ok"
    ids = tok(text)["input_ids"]
    joined = "".join(vocab[i] for i in ids).encode("latin-1", "backslashreplace").decode("unicode_escape")
    assert joined.encode("latin-1").decode("utf-8") == text
    assert vocab[tok.convert_tokens_to_ids("\u00c3")] == "\\xc3"  # the lead byte of é and ï


def test_skip_special_tokens_keeps_true_positions_and_equals_dropped_rows(text_pair):
    model, full, skip = text_pair
    tok = _tokenizer(model)
    special = set(tok.all_special_ids)
    with open_store(full) as a, open_store(skip) as b:
        assert b.inputs.token_ids(0).tolist() == a.inputs.token_ids(0).tolist()  # every token is recorded
        for name in a.layers:
            la, lb = a[name], b[name]
            ia = la.index
            ids = np.concatenate([a.inputs.token_ids(i) for i in range(a.n_samples)])
            keep = ~np.isin(ids, list(special))
            assert keep.sum() < len(keep) and np.array_equal(lb.index, ia[keep])
            assert np.array_equal(np.asarray(lb), np.asarray(la)[keep])  # the same rows, bitwise
            dropped = la.drop_rows(special_tokens=True)
            assert np.array_equal(dropped.index, lb.index) and np.array_equal(np.asarray(dropped), np.asarray(lb))
            assert np.array_equal(dropped.groups, lb.groups)
            # every special token here is the first or the last of its sample
            by_position = la.drop_rows(positions=[0, -1])
            assert np.array_equal(by_position.index, lb.index)
            assert np.array_equal(by_position[3:17], np.asarray(lb)[3:17])
            assert np.array_equal(by_position[[0, 5, 2]], np.asarray(lb)[[0, 5, 2]])
            assert sum(len(x) for x in [blk for _, blk in by_position.iter_blocks(7)]) == len(lb)


def test_skip_special_tokens_one_line_mistakes(tiny_bert, text_file, tmp_path, image_dir, tiny_vit):
    with pytest.raises(ActkitError, match="--pool none"):
        _extract(tiny_bert, text_file, tmp_path / "m.h5", pool="mean", skip_special_tokens=True)
    with pytest.raises(ActkitError, match="special tokens"):
        actkit.extract(str(tiny_vit), image_dir, tmp_path / "v.h5", layers="resid.0", skip_special_tokens=True,
                       progress=False)
    assert not list(tmp_path.iterdir())


def test_compare_drop_special_tokens_equals_compare_of_skipped_stores(text_pair, tmp_path, capsys):
    _, full, skip = text_pair
    args = ["--layer-a", "resid.0", "--layer-b", "resid.1", "--methods", "rigid,linear", "--quiet"]
    code, _, err = run_cli(capsys, "compare", full, full, *args, "--drop-special-tokens", "--json", tmp_path / "d.json")
    assert code == 0, err
    code, _, err = run_cli(capsys, "compare", skip, skip, *args, "--json", tmp_path / "s.json")
    assert code == 0, err
    code, _, err = run_cli(capsys, "compare", full, full, *args, "--drop-positions", "0,-1", "--json", tmp_path / "p.json")
    assert code == 0, err
    code, _, err = run_cli(capsys, "compare", full, full, *args, "--json", tmp_path / "all.json")
    assert code == 0, err
    d, s, p, every = (json.loads((tmp_path / f"{k}.json").read_text()) for k in ("d", "s", "p", "all"))
    for key in ("rigid", "linear", "linear_cka", "mean_cca", "linear_cka_chance"):
        assert d[key] == pytest.approx(s[key], rel=1e-9, abs=1e-12)
        assert p[key] == pytest.approx(s[key], rel=1e-9, abs=1e-12)
    assert d["linear_cka"] != pytest.approx(every["linear_cka"], rel=1e-9, abs=1e-12)
    assert d["n_rows"] == s["n_rows"] < every["n_rows"]


def test_store_without_recorded_inputs_drops_by_position_and_reattaches(tiny_bert, text_file, tmp_path, capsys,
                                                                        monkeypatch):
    from actkit.extractors import record_inputs
    from actkit.extractors.hf_text import TextAdapter

    recorded = _extract(tiny_bert, text_file, tmp_path / "rec.h5", layers="resid.0")
    monkeypatch.setattr(TextAdapter, "record_inputs", lambda self, data: None)  # as an older actkit wrote it
    old = _extract(tiny_bert, text_file, tmp_path / "old.h5", layers="resid.0")
    monkeypatch.undo()
    line = cli_error(capsys, "compare", old, old, "--drop-special-tokens", "--methods", "rigid")
    assert "no recorded text inputs" in line and "--drop-positions" in line
    code, _, err = run_cli(capsys, "compare", old, old, "--drop-positions", "0,-1", "--methods", "rigid", "--quiet")
    assert code == 0, err
    assert "error" in cli_error(capsys, "compare", old, old, "--drop-positions", "first")
    with open_store(old) as st, open_store(recorded) as ref:
        assert st.inputs is None
        again = record_inputs(st, text_file)
        assert st.inputs is again and again.fingerprint == st.inputs_fingerprint
        for i in range(st.n_samples):
            assert again.token_ids(i).tolist() == ref.inputs.token_ids(i).tolist()
            assert again.tokens(i) == ref.inputs.tokens(i)
        assert np.array_equal(st["resid.0"].drop_rows(special_tokens=True).index,
                              ref["resid.0"].drop_rows(special_tokens=True).index)
    other = tmp_path / "other.txt"
    other.write_text("\n".join(SENTENCES[::-1]) + "\n")
    with open_store(old) as st, pytest.raises(ActkitError, match="not the inputs of") as exc:
        record_inputs(st, other)
    assert "\n" not in str(exc.value)


def test_derived_stores_reach_their_source_inputs(text_pair, tmp_path):
    _, full, _ = text_pair
    with open_store(full) as st, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a LayerNorm output is rank-deficient: said, and beside the point here
        out = actkit.transform_store(actkit.Whitener().fit(st["resid.0"]), st["resid.0"], tmp_path / "w.h5")
        want = [st.inputs.token_ids(i).tolist() for i in range(st.n_samples)]
    with open_store(out) as w:
        assert w.inputs is not None and w.inputs.kind == "text"
        assert [w.inputs.token_ids(i).tolist() for i in range(w.n_samples)] == want
        assert w["resid.0"].drop_rows(special_tokens=True).shape[0] < w["resid.0"].shape[0]


def test_corrupt_recorded_inputs_are_one_line(text_pair, tmp_path):
    import h5py

    _, full, _ = text_pair
    copy = tmp_path / "c.h5"
    copy.write_bytes(full.read_bytes())
    with h5py.File(copy, "r+") as f:
        ds = f["inputs/token_ids"]
        ds[3] = ds[3] + 1
    with open_store(copy) as st:
        with pytest.raises(StoreError, match="inputs/token_ids does not match its checksum"):
            st.inputs.token_ids(0)
        with pytest.raises(StoreError, match="recorded inputs"):
            st.verify()


def _processed(processor, images):
    """The processor's pixels back in 0..255 (its normalisation undone)."""
    px = processor(images=images, return_tensors="np")["pixel_values"]
    mean = np.asarray(processor.image_mean)[None, :, None, None]
    std = np.asarray(processor.image_std)[None, :, None, None]
    return ((px * std + mean) * 255).transpose(0, 2, 3, 1)


def test_image_stores_record_sources_and_geometry(tiny_vit, image_dir, image_npy, tmp_path):
    from PIL import Image
    from transformers import AutoImageProcessor

    proc = AutoImageProcessor.from_pretrained(tiny_vit)
    files = sorted((p for p in image_dir.rglob("*") if p.is_file()), key=lambda p: p.relative_to(image_dir).as_posix())
    for src, out in ((image_dir, tmp_path / "dir.h5"), (image_npy, tmp_path / "npy.h5")):
        actkit.extract(str(tiny_vit), src, out, layers="resid.2,resid.0", progress=False)
        with open_store(out) as st:
            assert st.layers == ["resid.0", "resid.2"]
            rec = st.inputs
            assert rec.kind == "image" and rec.image_size == (32, 32) and rec.patch_grid == (4, 4)
            assert rec.prefix_tokens == 1 and st["resid.0"].index[:17, 1].tolist() == list(range(17))
            for i in range(st.n_samples):
                if src == image_dir:
                    assert rec.source(i) == files[i].relative_to(image_dir).as_posix()
                    pil = Image.open(files[i]).convert("RGB")
                else:
                    assert rec.source(i) == str(i)
                    pil = Image.fromarray(np.load(image_npy)[i])
                img = rec.image(i)
                assert img.shape == (32, 32, 3) and img.dtype == np.uint8
                assert np.abs(img - _processed(proc, [pil])[0]).max() <= 1.01  # rounding only


def test_timm_vit_records_its_patch_grid(tiny_timm_vit, image_npy, tmp_path):
    import timm.data

    out = actkit.extract(str(tiny_timm_vit), image_npy, tmp_path / "t.h5", layers="resid.1", progress=False)
    with open_store(out) as st:
        rec = st.inputs
        assert rec.image_size == (32, 32) and rec.patch_grid is not None
        gh, gw = rec.patch_grid
        assert st["resid.1"].index[:, 1].max() + 1 == rec.prefix_tokens + gh * gw
        img = rec.image(0)
        assert img.shape == (32, 32, 3)
    model = actkit.extractors.registry.load_model(str(tiny_timm_vit), device="cpu", dtype="float32")
    cfg = model.data_config
    px = timm.data.create_transform(**cfg, is_training=False)(
        __import__("PIL.Image").Image.fromarray(np.load(image_npy)[0])).numpy()
    px = (px * np.asarray(cfg["std"])[:, None, None] + np.asarray(cfg["mean"])[:, None, None]) * 255
    assert np.abs(img - px.transpose(1, 2, 0)).max() <= 1.01


def test_cli_skip_special_tokens_equals_the_api(text_pair, text_file, tmp_path, capsys):
    model, _, skip = text_pair
    out = tmp_path / "cli.h5"
    code, _, err = run_cli(capsys, "extract", model, "--inputs", text_file, "--layers", "resid.1,embed,resid.0",
                           "--skip-special-tokens", "--out", out, "--no-progress")
    assert code == 0, err
    with open_store(out) as a, open_store(skip) as b:
        assert a.layers == b.layers and a.request == b.request
        for name in a.layers:
            assert np.array_equal(a[name].index, b[name].index)
            assert np.array_equal(np.asarray(a[name]), np.asarray(b[name]))
    line = cli_error(capsys, "extract", model, "--inputs", text_file, "--layers", "resid.0", "--pool", "mean",
                     "--skip-special-tokens", "--out", tmp_path / "m.h5")
    assert "--pool none" in line and not (tmp_path / "m.h5").exists()


def test_an_embedding_file_takes_its_inputs_again(tiny_bert, text_file, tmp_path):
    from actkit.extractors import record_inputs
    from actkit.matrix_files import open_matrix

    np.save(tmp_path / "emb.npy", np.random.default_rng(0).standard_normal((len(SENTENCES), 5)).astype(np.float32))
    tok = _tokenizer(tiny_bert)
    with open_matrix(tmp_path / "emb.npy") as emb:
        assert emb.inputs is None
        with pytest.raises(ActkitError, match="does not record the model"):
            record_inputs(emb, text_file)
        rec = record_inputs(emb, text_file, model=str(tiny_bert))
        assert emb.inputs is rec and rec.tokens(2) == [tok.decode([t]) for t in tok(SENTENCES[2])["input_ids"]]
        with pytest.raises(ActkitError, match="hold 3 samples"):
            record_inputs(emb, text_file, model=str(tiny_bert), max_samples=3)


def test_a_row_selection_compares_the_same_on_dask(text_pair, tmp_path, capsys):
    _, full, _ = text_pair
    args = ["--layer-a", "resid.0", "--layer-b", "resid.1", "--methods", "rigid", "--quiet", "--drop-special-tokens"]
    code, _, err = run_cli(capsys, "compare", full, full, *args, "--json", tmp_path / "here.json")
    assert code == 0, err
    code, _, err = run_cli(capsys, "compare", full, full, *args, "--scheduler", "local:1", "--json", tmp_path / "dask.json")
    assert code == 0, err
    here, dask = (json.loads((tmp_path / f"{k}.json").read_text()) for k in ("here", "dask"))
    assert dask["n_rows"] == here["n_rows"]
    assert dask["rigid"] == pytest.approx(here["rigid"], rel=1e-9) and dask["linear_cka"] == pytest.approx(
        here["linear_cka"], rel=1e-9)


def test_token_windows_record_the_windows_and_take_them_again(tiny_neox_bos_eos, text_file, tmp_path, monkeypatch):
    from actkit.extractors import record_inputs
    from actkit.extractors.hf_text import TextAdapter

    out = _extract(tiny_neox_bos_eos, text_file, tmp_path / "w.h5", layers="resid.0", context_length=8)
    monkeypatch.setattr(TextAdapter, "record_inputs", lambda self, data: None)
    old = _extract(tiny_neox_bos_eos, text_file, tmp_path / "old.h5", layers="resid.0", context_length=8)
    monkeypatch.undo()
    with open_store(out) as st, open_store(old) as o:
        rec = st.inputs
        assert rec.n_samples == st.n_samples > 1 and set(rec.lengths.tolist()) == {8}
        assert st["resid.0"].index[:8, 1].tolist() == list(range(8))
        again = record_inputs(o, text_file)
        assert all(again.token_ids(w).tolist() == rec.token_ids(w).tolist() for w in range(st.n_samples))
        # fewer texts than the windows were cut from: refused from the count, before any tokenizer loads
        short = tmp_path / "short.txt"
        short.write_text("\n".join(text_file.read_text().splitlines()[:1]) + "\n")
        from actkit.extractors import registry

        monkeypatch.setattr(registry, "load_model", lambda *a, **k: pytest.fail("the model was loaded"))
        with pytest.raises(ActkitError, match="hold 1 texts; the windows of"):
            record_inputs(o, short)


def test_dataset_images_are_shown_through_record_inputs(tiny_vit, tmp_path):
    import datasets
    from PIL import Image
    from transformers import AutoImageProcessor

    from actkit.extractors import record_inputs
    from conftest import make_images

    pics = [Image.fromarray(a) for a in make_images(n=4)]
    datasets.Dataset.from_dict({"image": pics}).cast_column("image", datasets.Image()).save_to_disk(tmp_path / "ds")
    out = actkit.extract(str(tiny_vit), tmp_path / "ds", tmp_path / "d.h5", layers="resid.0", progress=False)
    proc = AutoImageProcessor.from_pretrained(tiny_vit)
    with open_store(out) as st:
        assert st.inputs.source(3) == "3" and st.inputs.info["location"]["type"] == "dataset"
        with pytest.raises(ActkitError, match="record_inputs"):
            st.inputs.image(0)
        rec = record_inputs(st, tmp_path / "ds")
        assert st.inputs is rec
        assert np.abs(rec.image(2) - _processed(proc, [pics[2]])[0]).max() <= 1.01
