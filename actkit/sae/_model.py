"""The estimator: :class:`SparseAutoencoder`, a community SAE as the original library computes it.

The encoders, from the libraries' source (``x``: one row, ``h``: pre-activations):

* input (SAELens ``SAE.process_sae_in``): ``constant_norm_rescale``: ``x <- x sqrt(d_in)/|x|``;
  ``layer_norm``: ``x <- (x - mean(x)) / (std(x) + 1e-5)`` (``std`` with Bessel's correction,
  torch's default); ``none`` and ``expected_average_only_in``: unchanged (the latter's factor
  is folded into the weights by SAELens's loader, nothing is applied at inference); then
  ``x <- x - b_dec`` when ``apply_b_dec_to_input`` (sparsify: always).
* ``standard``: ``relu(x W_enc + b_enc)``; ``jumprelu``: ``relu(h) * (h > threshold)``;
  ``gated``: ``(x W_enc + b_gate > 0) * relu(x (W_enc * exp(r_mag)) + b_mag)``;
  ``topk`` (SAELens): ``h = x W_enc + b_enc`` (times ``|W_dec_i|`` with
  ``rescale_acts_by_decoder_norm``), the ``k`` largest kept and passed through ReLU, the rest 0;
  sparsify ``topk``: the ``k`` largest of ``relu(h)``; ``groupmax``: the largest of ``relu(h)``
  in each of ``k`` consecutive groups of latents; ``abstopk`` (SAELens ``AbsTopKSAE``): the
  ``k`` entries of ``h`` largest in magnitude, signs kept (no ReLU), the rest 0;
  ``matching_pursuit`` (SAELens ``_encode_matching_pursuit``, tied ``W_enc = W_dec^T``):
  from ``r = x``, up to ``max_iterations`` times pick ``i = argmax relu(r W_dec^T)``, add
  ``v = relu(r . W_dec_i)`` to code ``i``, ``r <- r - v W_dec_i``; a row stops once its
  support did not change (``stop_on_duplicate_support``) or ``|r| < residual_threshold``.
* decoder: ``codes W_dec + b_dec`` (matching_pursuit: ``+ b_dec`` only with
  ``apply_b_dec_to_input``, as SAELens) (``codes / |W_dec_i|`` first with
  ``rescale_acts_by_decoder_norm``; ``+ x W_skip^T`` for sparsify's skip connection), then the
  input normalisation undone with the input row's own statistics (``x |x| / sqrt(d_in)``;
  ``x std + mean``).

Weights are held in float32 (float64 for a float64 SAE); half-precision SAEs are computed in
float32, not in their own dtype.
"""

from __future__ import annotations

from numbers import Integral

import numpy as np
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin

from actkit._data import as_input, is_streaming
from actkit._params import Interval, check_fitted, check_input_array, validate_params
from actkit.errors import ValidationError
from actkit.sae._folder import read_folder

__all__ = ["SparseAutoencoder", "load_sae"]

_TOPK = ("topk", "abstopk", "groupmax")


class SparseAutoencoder(ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseEstimator):
    """A pretrained sparse autoencoder read from a SAELens or EleutherAI sparsify folder.

    Parameters
    ----------
    path : str or os.PathLike
        The folder: ``cfg.json`` + ``sae_weights.safetensors`` (SAELens, 6.x and older
        configs) or ``cfg.json`` + ``sae.safetensors`` (sparsify). ``fit`` reads it.
    device : str, default="cpu"
        Torch device of the computation (``"cuda"``...).
    batch_size : int, default=2048
        Rows per block in ``transform`` / ``inverse_transform``.

    Attributes
    ----------
    spec_ : dict
        ``format`` (``saelens``/``sparsify``), ``architecture``, ``d_in``, ``d_sae``, ``k``,
        ``apply_b_dec_to_input``, ``normalize_activations``, ``hook_name``, ``dtype``.
    W_enc_ : ndarray of shape (n_features_in_, n_components_)
    b_enc_ : ndarray of shape (n_components_,) (gated: ``b_mag``)
    W_dec_ : ndarray of shape (n_components_, n_features_in_)
    b_dec_ : ndarray of shape (n_features_in_,)
    components_ : ndarray of shape (n_components_, n_features_in_)
        The decoder directions (``W_dec_``).
    n_components_ : int
        Latents (``d_sae``).
    n_features_in_ : int

    Examples
    --------
    >>> import actkit, numpy as np
    >>> sae = actkit.load_sae("my_sae")                    # doctest: +SKIP
    >>> codes = sae.transform(X)                            # doctest: +SKIP
    >>> X_hat = sae.inverse_transform(codes, X)             # doctest: +SKIP
    """

    def __init__(self, path=None, *, device="cpu", batch_size=2048):
        self.path = path
        self.device = device
        self.batch_size = batch_size

    _parameter_constraints: dict = {
        "path": [str, object],
        "device": [str, object],
        "batch_size": [Interval(Integral, 1, None, closed="left")],
    }

    # -- loading ------------------------------------------------------------------------
    def fit(self, X=None, y=None):
        """Read the folder ``path`` (nothing is learnt; ``X`` and ``y`` are ignored).

        Returns
        -------
        self
        """
        validate_params(self)
        if self.path is None:
            raise ValidationError("SparseAutoencoder needs the path of an SAE folder")
        spec, w = read_folder(self.path)
        return self._set(spec, w)

    def _set(self, spec, w):
        dtype = np.float64 if spec.get("dtype") == "float64" else np.float32
        self.spec_ = dict(spec)
        self.weights_ = {k: np.ascontiguousarray(v, dtype=dtype) for k, v in w.items()}
        self.W_enc_, self.W_dec_, self.b_dec_ = (self.weights_[k] for k in ("W_enc", "W_dec", "b_dec"))
        self.b_enc_ = self.weights_.get("b_enc", self.weights_.get("b_mag"))
        self.n_features_in_ = int(spec["d_in"])
        self.n_components_ = int(spec["d_sae"])
        self._t = None
        return self

    @property
    def components_(self):
        return self.W_dec_

    @property
    def _n_features_out(self):
        return self.n_components_

    @property
    def sparse_codes(self) -> bool:
        """Whether at most ``k`` latents are active per row (topk, groupmax)."""
        return self.spec_["architecture"] in _TOPK

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_t"] = None  # torch copies are rebuilt where the estimator is used
        return state

    # -- torch computation --------------------------------------------------------------
    def _tensors(self):
        if self._t is None:
            import torch  # torch: ~1.2 s at import (measured); import actkit.sae stays torch-free

            t = {k: torch.from_numpy(v).to(self.device) for k, v in self.weights_.items()}
            if self.spec_["architecture"] == "gated":
                t["W_mag"] = t["W_enc"] * t["r_mag"].exp()
            if self.spec_.get("rescale_acts_by_decoder_norm"):
                t["dec_norm"] = t["W_dec"].norm(dim=-1)
            self._t = t
        return self._t

    def _rows(self, X):
        """``X`` as a C-contiguous numpy array of the SAE's dtype."""
        return np.ascontiguousarray(X, dtype=self.weights_["W_dec"].dtype)

    def _normalise(self, x):
        """SAELens's input processing of numpy rows: ``(x_in, stats)``; ``stats`` undo it in
        ``_denormalise``. (Row-wise steps run in numpy: small torch element-wise kernels stall
        on a busy machine's thread pool.)"""
        norm = self.spec_["normalize_activations"]
        stats = None
        if norm == "constant_norm_rescale":
            coeff = np.float32(self.n_features_in_ ** 0.5) / np.linalg.norm(x, axis=-1, keepdims=True)
            x, stats = x * coeff.astype(x.dtype), ("scale", coeff.astype(x.dtype))
        elif norm == "layer_norm":
            mu = x.mean(axis=-1, keepdims=True)
            x = x - mu
            std = x.std(axis=-1, ddof=1, keepdims=True)
            x, stats = x / (std + x.dtype.type(1e-5)), ("ln", mu, std)
        if self.spec_["apply_b_dec_to_input"]:
            x = x - self.weights_["b_dec"]
        return np.ascontiguousarray(x), stats

    @staticmethod
    def _denormalise(y, stats):
        if stats is None:
            return y
        if stats[0] == "scale":
            return y / stats[1]
        return y * stats[2] + stats[1]

    def _encode(self, xin):
        """Codes of processed numpy rows ``xin``: ``("topk", values, indices)`` (values may be
        0) or ``("dense", codes)``, torch tensors on the SAE's device."""
        import torch  # torch: ~1.2 s at import (measured); import actkit.sae stays torch-free

        t, spec = self._tensors(), self.spec_
        arch = spec["architecture"]
        x = torch.from_numpy(xin).to(self.device)
        if arch == "gated":
            gate = (x @ t["W_enc"] + t["b_gate"]) > 0
            return ("dense", gate.to(x.dtype) * torch.relu(x @ t["W_mag"] + t["b_mag"]))
        if arch == "matching_pursuit":
            return ("dense", _matching_pursuit(x, t["W_dec"], spec["residual_threshold"], spec["max_iterations"],
                                               spec["stop_on_duplicate_support"]))
        h = torch.addmm(t["b_enc"], x, t["W_enc"])
        if arch == "standard":
            return ("dense", torch.relu_(h))
        if arch == "jumprelu":
            return ("dense", torch.relu(h) * (h > t["threshold"]).to(h.dtype))
        k = spec["k"]
        if arch == "groupmax":
            vals, idx = torch.relu_(h).unflatten(-1, (k, -1)).max(dim=-1)
            idx = idx + torch.arange(0, self.n_components_, self.n_components_ // k, device=h.device)
            return ("topk", vals, idx)
        if spec["format"] == "sparsify":
            vals, idx = torch.topk(torch.relu_(h), k, dim=-1, sorted=False)
            return ("topk", vals, idx)
        if spec.get("rescale_acts_by_decoder_norm"):
            h = h * t["dec_norm"]
        if arch == "abstopk":
            idx = torch.topk(h.abs(), k, dim=-1, sorted=False).indices
            return ("topk", h.gather(-1, idx), idx)
        vals, idx = torch.topk(h, k, dim=-1, sorted=False)
        return ("topk", torch.relu(vals), idx)

    def _decode(self, codes, x, stats):
        """Reconstruction (numpy) of ``codes`` (as ``_encode`` gives them) of numpy rows ``x``."""
        import torch  # torch: ~1.2 s at import (measured); import actkit.sae stays torch-free

        t = self._tensors()
        rescale = self.spec_.get("rescale_acts_by_decoder_norm")
        if codes[0] == "topk":
            vals, idx = codes[1], codes[2]
            if rescale:
                vals = vals / t["dec_norm"][idx]
            y = torch.nn.functional.embedding_bag(idx, t["W_dec"], per_sample_weights=vals, mode="sum")
        else:
            c = codes[1] / t["dec_norm"] if rescale else codes[1]
            y = c @ t["W_dec"]
        y = y.cpu().numpy()
        if self.spec_["architecture"] != "matching_pursuit" or self.spec_["apply_b_dec_to_input"]:
            y = y + self.weights_["b_dec"]
        if "W_skip" in self.weights_:
            y = y + x @ self.weights_["W_skip"]
        return self._denormalise(y, stats)

    def _dense(self, codes):
        import torch  # torch: ~1.2 s at import (measured); import actkit.sae stays torch-free

        if codes[0] == "dense":
            return codes[1]
        vals, idx = codes[1], codes[2]
        return torch.zeros(vals.shape[0], self.n_components_, dtype=vals.dtype, device=vals.device).scatter_(1, idx, vals)

    def forward_block(self, X):
        """Codes and reconstruction of one in-memory block ``X`` (n, n_features_in_):
        ``(codes, X_hat, x)`` with ``codes`` ``("topk", values, indices)`` or ``("dense",
        codes)`` (torch tensors), ``X_hat`` and ``x`` (``X`` in the SAE's dtype) numpy arrays."""
        import torch  # torch: ~1.2 s at import (measured); import actkit.sae stays torch-free

        with torch.no_grad():
            x = self._rows(X)
            xin, stats = self._normalise(x)
            codes = self._encode(xin)
            return codes, self._decode(codes, x, stats), x

    def encode_block(self, X):
        """Codes of one block: ``("topk", values, indices)`` or ``("dense", codes)`` (torch)."""
        import torch  # torch: ~1.2 s at import (measured); import actkit.sae stays torch-free

        with torch.no_grad():
            return self._encode(self._normalise(self._rows(X))[0])

    # -- scikit-learn API ---------------------------------------------------------------
    def _input(self, X, name="X"):
        if is_streaming(X):
            X = np.asarray(X[:])
        X = check_input_array(as_input(X), dtype=[np.float32, np.float64], ensure_min_samples=0)
        if X.shape[1] != self.n_features_in_:
            raise ValidationError(f"{name} has {X.shape[1]} features, but the SAE reads {self.n_features_in_}")
        return X

    def transform(self, X):
        """The SAE's codes of the rows of ``X``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features_in_)

        Returns
        -------
        codes : ndarray of shape (n_samples, n_components_), float32 (float64 for a float64 SAE)
        """
        import torch  # torch: ~1.2 s at import (measured); import actkit.sae stays torch-free

        check_fitted(self)
        X = self._input(X)
        out = np.empty((X.shape[0], self.n_components_), dtype=self.W_dec_.dtype)
        with torch.no_grad():
            for s in range(0, X.shape[0], self.batch_size):
                out[s:s + self.batch_size] = self._dense(self.encode_block(X[s:s + self.batch_size])).cpu().numpy()
        return out

    def inverse_transform(self, codes, X=None):
        """The reconstruction of rows from their codes.

        Parameters
        ----------
        codes : array-like of shape (n_samples, n_components_)
        X : array-like of shape (n_samples, n_features_in_), optional
            The input rows; needed when the SAE normalises each row by its own statistics
            (``constant_norm_rescale``, ``layer_norm``) or has a skip connection.

        Returns
        -------
        X_hat : ndarray of shape (n_samples, n_features_in_)
        """
        import torch  # torch: ~1.2 s at import (measured); import actkit.sae stays torch-free

        check_fitted(self)
        codes = check_input_array(as_input(codes), dtype=[np.float32, np.float64], ensure_min_samples=0)
        if codes.shape[1] != self.n_components_:
            raise ValidationError(f"codes have {codes.shape[1]} columns, expected n_components_={self.n_components_}")
        needs = self.spec_["normalize_activations"] in ("constant_norm_rescale", "layer_norm") or "W_skip" in self.weights_
        if X is None and needs:
            raise ValidationError(f"this SAE ({self.spec_['normalize_activations']} normalisation or a skip "
                                  "connection) reconstructs a row from its input: pass X")
        if X is not None:
            X = self._input(X)
            if len(X) != len(codes):
                raise ValidationError(f"X has {len(X)} rows but codes have {len(codes)}")
        out = np.empty((codes.shape[0], self.n_features_in_), dtype=self.W_dec_.dtype)
        with torch.no_grad():
            for s in range(0, codes.shape[0], self.batch_size):
                c = torch.from_numpy(self._rows(codes[s:s + self.batch_size])).to(self.device)
                x = None if X is None else self._rows(X[s:s + self.batch_size])
                stats = None if x is None else self._normalise(x)[1]
                out[s:s + self.batch_size] = self._decode(("dense", c), x, stats)
        return out

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.requires_fit = True
        return tags


def _matching_pursuit(x, W_dec, residual_threshold, max_iterations, stop_on_duplicate_support):
    """SAELens's ``_encode_matching_pursuit`` (inference): codes (n, d_sae) of the processed
    rows ``x`` (n, d_in) over the decoder rows ``W_dec`` (d_sae, d_in), torch tensors."""
    import torch  # torch: ~1.2 s at import (measured); import actkit.sae stays torch-free

    residual = x.clone()
    acts = torch.zeros(x.shape[0], W_dec.shape[0], dtype=x.dtype, device=x.device)
    prev = torch.zeros(acts.shape, dtype=torch.bool, device=x.device)
    done = torch.zeros(x.shape[0], dtype=torch.bool, device=x.device)
    for _ in range(max_iterations):
        idx = (residual @ W_dec.T).relu().max(dim=1, keepdim=True).indices
        chosen = W_dec[idx.squeeze(1)]
        values = (residual * chosen).sum(dim=-1, keepdim=True).relu() * (~done).unsqueeze(1).to(x.dtype)
        acts.scatter_add_(1, idx, values)
        residual = residual - values * chosen
        support = acts != 0
        if stop_on_duplicate_support:
            done = done | (support == prev).all(dim=1)
            prev = support
        if residual_threshold > 0:
            done = done | (residual.norm(dim=-1) < residual_threshold)
        if (stop_on_duplicate_support or residual_threshold > 0) and bool(done.all()):
            break
    return acts


def load_sae(path, *, device="cpu") -> SparseAutoencoder:
    """Read a community SAE folder (SAELens or EleutherAI sparsify) as an estimator.

    Parameters
    ----------
    path : str or os.PathLike
        ``cfg.json`` + ``sae_weights.safetensors`` (SAELens: architectures ``standard``,
        ``topk``, ``abstopk``, ``jumprelu``, ``gated``, ``matching_pursuit``; 6.x configs and
        the older keys SAELens converts)
        or ``cfg.json`` + ``sae.safetensors`` (sparsify's TopK / groupmax ``SparseCoder``).
    device : str, default="cpu"

    Returns
    -------
    SparseAutoencoder
        Fitted: ``transform`` gives the codes, ``inverse_transform(codes, X=None)`` the
        reconstruction.

    Raises
    ------
    InputError, ValidationError
        A missing or malformed folder (no config, a file that is not safetensors, wrong
        tensor names or shapes, NaN or infinite weights, an unknown architecture): one line.
    """
    return SparseAutoencoder(path, device=device).fit()
