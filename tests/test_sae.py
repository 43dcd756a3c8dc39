"""Community SAEs: ``load_sae`` against SAELens and sparsify (side by side) and against the
formulas of their source, ``save_sae``, malformed folders.

The reference formulas below are written from SAELens 6 (``sae_lens/saes/sae.py``:
``process_sae_in``, ``_setup_activation_normalization``; ``standard_sae.py``, ``topk_sae.py``,
``abstopk_sae.py``, ``jumprelu_sae.py``, ``gated_sae.py``, ``matching_pursuit_sae.py``:
``encode``/``decode``; ``loading/pretrained_sae_loaders.py``:
``handle_pre_6_0_config``) and sparsify (``sparsify/sparse_coder.py``: ``encode``, ``decode``;
``fused_encoder.py``), in numpy float64.
"""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest

import actkit
from actkit.errors import ActkitError

D_IN, D_SAE, K = 12, 40, 5
MP_THRESHOLD = 0.5  # reached by some rows before D_IN steps: both of matching pursuit's stops are used


def reference_matching_pursuit(x, W_dec, threshold=MP_THRESHOLD, max_iterations=D_IN):
    """SAELens's ``_encode_matching_pursuit``, one row at a time in numpy float64: pick the
    decoder row of largest positive correlation with the residual, add it, stop once the
    support repeats or the residual's norm is below ``threshold``."""
    codes = np.zeros((len(x), len(W_dec)))
    for n, r in enumerate(x.copy()):
        for _ in range(max_iterations):
            before = codes[n] != 0
            i = int(np.argmax(np.maximum(r @ W_dec.T, 0)))
            v = max(float(r @ W_dec[i]), 0.0)
            codes[n, i] += v
            r = r - v * W_dec[i]
            if np.array_equal(codes[n] != 0, before) or np.linalg.norm(r) < threshold:
                break
    return codes


def _weights(rng, arch, d_in=D_IN, d_sae=D_SAE):
    w = {"W_enc": rng.normal(size=(d_in, d_sae)) / np.sqrt(d_in), "W_dec": rng.normal(size=(d_sae, d_in)) * 0.3,
         "b_dec": rng.normal(size=d_in) * 0.1}
    if arch == "matching_pursuit":  # tied: only the decoder is stored
        return {k: w[k].astype(np.float32) for k in ("W_dec", "b_dec")}
    if arch == "gated":
        w.update(b_gate=rng.normal(size=d_sae) * 0.2, b_mag=rng.normal(size=d_sae) * 0.2,
                 r_mag=rng.normal(size=d_sae) * 0.2)
    else:
        w["b_enc"] = rng.normal(size=d_sae) * 0.2
    if arch == "jumprelu":
        w["threshold"] = np.abs(rng.normal(size=d_sae)) * 0.3
    return {k: v.astype(np.float32) for k, v in w.items()}


def saelens_folder(path, arch, *, norm="none", apply_b_dec=True, k=K, rescale=False, old=False, seed=0):
    """A SAELens folder: 6.x config (``old=False``) or a pre-6 one with the old keys."""
    from safetensors.numpy import save_file

    w = _weights(np.random.default_rng(seed), arch)
    path.mkdir(parents=True)
    save_file(w, str(path / "sae_weights.safetensors"))
    if old:  # a 5.x config: no architecture for topk, activation_fn_str, boolean normalisation
        cfg = {"d_in": D_IN, "d_sae": D_SAE, "dtype": "float32", "hook_point": "blocks.0.hook_resid_pre",
               "activation_fn_str": "topk" if arch == "topk" else "relu",
               "activation_fn_kwargs": {"k": k} if arch == "topk" else {},
               "normalize_activations": norm, "apply_b_dec_to_input": apply_b_dec, "sae_lens_training_version": "3.0.0"}
        if arch not in ("topk", "standard"):
            cfg["architecture"] = arch
    else:
        cfg = {"architecture": arch, "d_in": D_IN, "d_sae": D_SAE, "dtype": "float32", "device": "cpu",
               "apply_b_dec_to_input": apply_b_dec, "normalize_activations": norm, "reshape_activations": "none",
               "metadata": {"sae_lens_version": "6.5.0", "hook_name": "blocks.0.hook_resid_pre"}}
        if arch in ("topk", "abstopk"):
            cfg.update(k=k, rescale_acts_by_decoder_norm=rescale)
        if arch == "matching_pursuit":
            cfg.update(residual_threshold=MP_THRESHOLD, max_iterations=None, stop_on_duplicate_support=True)
    (path / "cfg.json").write_text(json.dumps(cfg))
    return {k: v.astype(np.float64) for k, v in w.items()}


def reference_saelens(w, X, arch, *, norm="none", apply_b_dec=True, k=K, rescale=False):
    """SAELens's encode and decode, in numpy float64."""
    x = X.astype(np.float64)
    if norm == "constant_norm_rescale":
        coeff = np.sqrt(D_IN) / np.linalg.norm(x, axis=1, keepdims=True)
        x = x * coeff
    elif norm == "layer_norm":
        mu = x.mean(1, keepdims=True)
        x = x - mu
        std = x.std(1, ddof=1, keepdims=True)
        x = x / (std + 1e-5)
    xin = x - w["b_dec"] * apply_b_dec
    dec_norm = np.linalg.norm(w["W_dec"], axis=1)
    if arch == "matching_pursuit":
        codes = reference_matching_pursuit(xin, w["W_dec"])
        y = codes @ w["W_dec"] + w["b_dec"] * apply_b_dec
        return codes, (y / coeff if norm == "constant_norm_rescale" else y * std + mu if norm == "layer_norm" else y)
    if arch == "gated":
        codes = (xin @ w["W_enc"] + w["b_gate"] > 0) * np.maximum(xin @ (w["W_enc"] * np.exp(w["r_mag"])) + w["b_mag"], 0)
    else:
        h = xin @ w["W_enc"] + w["b_enc"]
        if arch == "standard":
            codes = np.maximum(h, 0)
        elif arch == "jumprelu":
            codes = np.maximum(h, 0) * (h > w["threshold"])
        else:
            if rescale:
                h = h * dec_norm
            codes = np.zeros_like(h)
            if arch == "abstopk":  # the k largest in magnitude, signs kept
                top = np.argsort(-np.abs(h), axis=1)[:, :k]
                np.put_along_axis(codes, top, np.take_along_axis(h, top, 1), 1)
            else:
                top = np.argsort(-h, axis=1)[:, :k]
                np.put_along_axis(codes, top, np.maximum(np.take_along_axis(h, top, 1), 0), 1)
    c = codes / dec_norm if rescale else codes
    y = c @ w["W_dec"] + w["b_dec"]
    if norm == "constant_norm_rescale":
        y = y / coeff
    elif norm == "layer_norm":
        y = y * std + mu
    return codes, y


@pytest.fixture
def X():
    rng = np.random.default_rng(1)
    return (rng.normal(size=(300, D_IN)) * 2 + 0.5).astype(np.float32)


CASES = [("standard", "none", True, False), ("standard", "constant_norm_rescale", True, False),
         ("standard", "layer_norm", False, False), ("standard", "expected_average_only_in", True, False),
         ("topk", "none", True, False), ("topk", "none", True, True), ("topk", "layer_norm", True, False),
         ("jumprelu", "none", True, False), ("jumprelu", "constant_norm_rescale", False, False),
         ("gated", "none", True, False), ("gated", "layer_norm", True, False),
         ("abstopk", "none", True, False), ("abstopk", "none", True, True), ("abstopk", "layer_norm", False, False),
         ("matching_pursuit", "none", True, False), ("matching_pursuit", "none", False, False),
         ("matching_pursuit", "constant_norm_rescale", True, False)]


@pytest.mark.parametrize("arch,norm,apply_b_dec,rescale", CASES)
def test_saelens_formulas(tmp_path, X, arch, norm, apply_b_dec, rescale):
    w = saelens_folder(tmp_path / "sae", arch, norm=norm, apply_b_dec=apply_b_dec, rescale=rescale)
    sae = actkit.load_sae(tmp_path / "sae")
    codes = sae.transform(X)
    ref_codes, ref_y = reference_saelens(w, X, arch, norm=norm, apply_b_dec=apply_b_dec, rescale=rescale)
    assert codes.dtype == np.float32 and codes.shape == (len(X), D_SAE)
    np.testing.assert_allclose(codes, ref_codes, atol=1e-5, rtol=1e-5)
    needs_x = norm in ("constant_norm_rescale", "layer_norm")
    y = sae.inverse_transform(codes, X if needs_x else None)
    np.testing.assert_allclose(y, ref_y, atol=1e-5, rtol=1e-5)
    if needs_x:
        with pytest.raises(ActkitError, match="pass X"):
            sae.inverse_transform(codes)
    assert (codes != 0).any() and (codes == 0).any()


@pytest.mark.parametrize("arch,norm", [("standard", False), ("topk", False), ("standard", True), ("jumprelu", False)])
def test_saelens_pre6_configs_are_converted(tmp_path, X, arch, norm):
    w = saelens_folder(tmp_path / "sae", arch, norm=norm, old=True)
    sae = actkit.load_sae(tmp_path / "sae")
    assert sae.spec_["architecture"] == arch and sae.spec_["normalize_activations"] == (
        "expected_average_only_in" if norm else "none")
    ref_codes, ref_y = reference_saelens(w, X, arch)  # expected_average_only_in: nothing applied
    np.testing.assert_allclose(sae.transform(X), ref_codes, atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(sae.inverse_transform(sae.transform(X)), ref_y, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("arch,norm,apply_b_dec,rescale", CASES)
def test_saelens_side_by_side(tmp_path, X, arch, norm, apply_b_dec, rescale):
    import torch
    import sae_lens
    saelens_folder(tmp_path / "sae", arch, norm=norm, apply_b_dec=apply_b_dec, rescale=rescale)
    ref = sae_lens.SAE.load_from_disk(str(tmp_path / "sae"))
    with torch.no_grad():
        x = torch.from_numpy(X)
        ref_codes = ref.encode(x)
        ref_y = ref.decode(ref_codes)
    ours = actkit.load_sae(tmp_path / "sae")
    codes = ours.transform(X)
    np.testing.assert_allclose(codes, ref_codes.numpy(), atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(ours.inverse_transform(codes, X), ref_y.numpy(), atol=1e-5, rtol=1e-5)


def sparsify_folder(path, *, activation="topk", skip=False, seed=0, k=K):
    from safetensors.numpy import save_file

    rng = np.random.default_rng(seed)
    w = {"encoder.weight": rng.normal(size=(D_SAE, D_IN)) / np.sqrt(D_IN), "encoder.bias": rng.normal(size=D_SAE) * 0.2,
         "W_dec": rng.normal(size=(D_SAE, D_IN)) * 0.3, "b_dec": rng.normal(size=D_IN) * 0.1}
    if skip:
        w["W_skip"] = rng.normal(size=(D_IN, D_IN)) * 0.05
    w = {k_: v.astype(np.float32) for k_, v in w.items()}
    path.mkdir(parents=True)
    save_file(w, str(path / "sae.safetensors"))
    cfg = {"activation": activation, "expansion_factor": 32, "normalize_decoder": True, "num_latents": D_SAE,
           "k": k, "multi_topk": False, "skip_connection": skip, "transcode": False, "d_in": D_IN}
    (path / "cfg.json").write_text(json.dumps(cfg))
    return {k_: v.astype(np.float64) for k_, v in w.items()}


def reference_sparsify(w, X, activation="topk", k=K):
    x = X.astype(np.float64)
    pre = np.maximum((x - w["b_dec"]) @ w["encoder.weight"].T + w["encoder.bias"], 0)
    codes = np.zeros_like(pre)
    if activation == "topk":
        top = np.argsort(-pre, axis=1)[:, :k]
    else:  # groupmax: the largest in each of k consecutive groups
        g = D_SAE // k
        top = pre.reshape(len(x), k, g).argmax(-1) + np.arange(0, D_SAE, g)
    np.put_along_axis(codes, top, np.take_along_axis(pre, top, 1), 1)
    y = codes @ w["W_dec"] + w["b_dec"]
    if "W_skip" in w:
        y = y + x @ w["W_skip"].T
    return codes, y


@pytest.mark.parametrize("activation,skip", [("topk", False), ("groupmax", False), ("topk", True)])
def test_sparsify_formulas(tmp_path, X, activation, skip):
    w = sparsify_folder(tmp_path / "sp", activation=activation, skip=skip)
    sae = actkit.load_sae(tmp_path / "sp")
    assert sae.spec_["format"] == "sparsify" and sae.sparse_codes
    codes = sae.transform(X)
    ref_codes, ref_y = reference_sparsify(w, X, activation)
    np.testing.assert_allclose(codes, ref_codes, atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(sae.inverse_transform(codes, X), ref_y, atol=1e-5, rtol=1e-5)
    if skip:
        with pytest.raises(ActkitError, match="pass X"):
            sae.inverse_transform(codes)


@pytest.mark.parametrize("activation,skip", [("topk", False), ("groupmax", False), ("topk", True)])
def test_sparsify_side_by_side(tmp_path, X, activation, skip, monkeypatch):
    import torch
    monkeypatch.setenv("SPARSIFY_DISABLE_TRITON", "1")  # its CPU decoder (triton needs a GPU)
    import sparsify
    sparsify_folder(tmp_path / "sp", activation=activation, skip=skip)
    ref = sparsify.SparseCoder.load_from_disk(tmp_path / "sp")
    x = torch.from_numpy(X)
    with torch.no_grad():
        out = ref(x)
    ours = actkit.load_sae(tmp_path / "sp")
    codes = ours.transform(X)
    ref_codes = torch.zeros(len(X), D_SAE).scatter_(1, out.latent_indices, out.latent_acts).numpy()
    np.testing.assert_allclose(codes, ref_codes, atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(ours.inverse_transform(codes, X), out.sae_out.numpy(), atol=1e-5, rtol=1e-5)
    # sparsify's own FVU on the batch equals sae_metrics' over the same rows
    m = actkit.sae_metrics(ours, X, progress=False)
    assert m["fvu"] == pytest.approx(float(out.fvu), rel=1e-4)


def test_malformed_folders_are_one_line(tmp_path):
    saelens_folder(tmp_path / "ok", "standard")
    cases = {}
    (tmp_path / "nocfg").mkdir()
    (tmp_path / "nocfg" / "sae_weights.safetensors").write_bytes(b"")
    cases["nocfg"] = "no cfg.json"
    p = tmp_path / "pickle"
    p.mkdir()
    (p / "cfg.json").write_text((tmp_path / "ok" / "cfg.json").read_text())
    (p / "sae_weights.safetensors").write_bytes(pickle.dumps({"W_enc": np.zeros((2, 2))}))
    cases["pickle"] = "not a safetensors file"
    p = tmp_path / "arch"
    p.mkdir()
    cfg = json.loads((tmp_path / "ok" / "cfg.json").read_text())
    (p / "cfg.json").write_text(json.dumps({**cfg, "architecture": "mystery"}))
    (p / "sae_weights.safetensors").write_bytes((tmp_path / "ok" / "sae_weights.safetensors").read_bytes())
    cases["arch"] = "unknown SAE architecture 'mystery'"
    p = tmp_path / "shape"
    p.mkdir()
    (p / "cfg.json").write_text(json.dumps({**cfg, "d_sae": D_SAE + 1}))
    (p / "sae_weights.safetensors").write_bytes((tmp_path / "ok" / "sae_weights.safetensors").read_bytes())
    cases["shape"] = "expected"
    cases["missing"] = "SAE folder not found"
    for name, msg in cases.items():
        with pytest.raises(ActkitError, match=msg) as info:
            actkit.load_sae(tmp_path / name)
        assert "\n" not in str(info.value)


def test_abstopk_and_matching_pursuit_are_what_their_names_say(tmp_path, X):
    """abstopk: exactly k latents per row, some negative (signs kept); matching_pursuit: a
    tied encoder, non-negative codes, rows that stop at different steps (the threshold or a
    repeated support), and SAELens's rule that b_dec is added back only when it was taken off."""
    saelens_folder(tmp_path / "abs", "abstopk")
    codes = actkit.load_sae(tmp_path / "abs").transform(X)
    assert ((codes != 0).sum(1) == K).all() and (codes < 0).any() and (codes > 0).any()
    w = saelens_folder(tmp_path / "mp", "matching_pursuit", apply_b_dec=False)
    sae = actkit.load_sae(tmp_path / "mp")
    assert sae.spec_["architecture"] == "matching_pursuit" and not sae.sparse_codes
    np.testing.assert_array_equal(sae.W_enc_, sae.W_dec_.T)
    codes = sae.transform(X)
    steps = (codes != 0).sum(1)
    assert (codes >= 0).all() and steps.min() >= 1 and len(np.unique(steps)) > 2
    np.testing.assert_allclose(sae.inverse_transform(codes), codes @ w["W_dec"], atol=1e-5)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_nan_or_inf_weights_are_refused_on_load(tmp_path, X, bad, capsys):
    """A diverged SAE (one NaN or inf weight) is refused in one line, never evaluated to
    ``FVU nan``; ``actkit sae-eval`` says so before reading the store."""
    from safetensors.numpy import load_file, save_file

    from cli_helpers import cli_error

    saelens_folder(tmp_path / "sae", "standard")
    w = load_file(str(tmp_path / "sae" / "sae_weights.safetensors"))
    w["W_dec"][3, 4] = bad
    save_file(w, str(tmp_path / "sae" / "sae_weights.safetensors"))
    with pytest.raises(ActkitError, match=r"tensor W_dec holds 1 NaN or infinite value\(s\) of 480") as info:
        actkit.load_sae(tmp_path / "sae")
    assert "\n" not in str(info.value)
    line = cli_error(capsys, "sae-eval", tmp_path / "missing.h5", "--sae", tmp_path / "sae")
    assert "W_dec holds 1 NaN or infinite" in line and "missing.h5" not in line


def test_wrong_width_and_unfitted(tmp_path):
    saelens_folder(tmp_path / "sae", "topk")
    sae = actkit.load_sae(tmp_path / "sae")
    with pytest.raises(ActkitError, match="features"):
        sae.transform(np.zeros((3, D_IN + 1), np.float32))
    with pytest.raises(ActkitError):
        actkit.SparseAutoencoder(tmp_path / "sae").transform(np.zeros((3, D_IN), np.float32))


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize("positive,code", [(True, "topk"), (False, "topk"), (True, "l1"), (False, "l1")])
def test_save_sae_round_trip(tmp_path, positive, code):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(1500, D_IN)).astype(np.float32)
    sd = actkit.SparseDictionary(24, k=3, code=code, alpha=0.3, positive=positive, random_state=0, max_iter=5).fit(X)
    path = actkit.save_sae(sd, tmp_path / "saved", hook_name="blocks.0")
    sae = actkit.load_sae(path)
    D = sd.dictionary_
    h = X.astype(np.float64) @ D.T
    n = len(D)
    assert sae.spec_["architecture"] == ("topk" if code == "topk" else "standard")
    assert sae.n_components_ == (n if positive else 2 * n)
    codes = sae.transform(X)
    # the SAE's codes folded back onto the fit's atoms (a negated twin carries a negative code)
    signed = codes[:, :n] - (0 if positive else codes[:, n:])
    if code == "topk":
        assert sae.spec_["k"] == 3
        score = h if positive else np.abs(h)
        top = np.argsort(-score, axis=1)[:, :3]
        want = np.zeros_like(h)
        np.put_along_axis(want, top, np.take_along_axis(h, top, 1), 1)
        if positive:
            want = np.maximum(want, 0)
    else:
        want = np.sign(h) * np.maximum(np.abs(h) - 0.3, 0)
        if positive:
            want = np.maximum(h - 0.3, 0)
    np.testing.assert_allclose(signed, want, atol=1e-5)
    np.testing.assert_allclose(sae.inverse_transform(codes), signed @ D, atol=1e-5)
    with pytest.raises(ActkitError, match="exists"):
        actkit.save_sae(sd, path)
    actkit.save_sae(sd, path, overwrite=True)


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_save_sae_loads_in_saelens(tmp_path):
    import torch
    import sae_lens
    rng = np.random.default_rng(0)
    X = rng.normal(size=(1200, D_IN)).astype(np.float32)
    for positive in (True, False):
        sd = actkit.SparseDictionary(24, k=3, positive=positive, random_state=0, max_iter=5).fit(X)
        path = actkit.save_sae(sd, tmp_path / f"saved{positive}")
        ref = sae_lens.SAE.load_from_disk(str(path))
        assert ref.cfg.architecture() == "topk" and ref.cfg.k == 3
        with torch.no_grad():
            codes = ref.encode(torch.from_numpy(X))
            y = ref.decode(codes)
        ours = actkit.load_sae(path)
        np.testing.assert_allclose(ours.transform(X), codes.numpy(), atol=1e-5)
        np.testing.assert_allclose(ours.inverse_transform(codes.numpy()), y.numpy(), atol=1e-5)
