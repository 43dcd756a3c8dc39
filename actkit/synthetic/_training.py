"""Small torch models for the reproduction experiments: MLP autoencoders and classifiers.

Deterministic given ``seed`` (parameters and mini-batch order both come from it) on a
given device and thread count. Everything here is private; the experiments use it.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from tqdm.auto import tqdm

from actkit._device import resolve_device
from actkit.errors import ValidationError


class single_thread:
    """Context manager: one torch intra-op thread on the CPU, restored on exit.

    The experiments' models are tiny (a few thousand parameters, batches of 128-256 rows),
    where extra intra-op threads only add synchronisation; on a shared machine they also
    burn CPU spinning. One thread is faster here and makes runs deterministic across
    machines with different core counts.
    """

    def __init__(self, device):
        self.cpu = str(device).startswith("cpu")

    def __enter__(self):
        self.saved = torch.get_num_threads()
        if self.cpu:
            torch.set_num_threads(1)
        return self

    def __exit__(self, *exc):
        torch.set_num_threads(self.saved)
        return False


def mlp(sizes, *, activation="leaky_relu"):
    """``Linear -> act -> ... -> Linear`` (no activation after the last layer)."""
    acts = {"leaky_relu": lambda: nn.LeakyReLU(0.2), "relu": nn.ReLU, "tanh": nn.Tanh,
            "elu": nn.ELU}
    layers = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(nn.Linear(a, b))
        if i < len(sizes) - 2:
            layers.append(acts[activation]())
    return nn.Sequential(*layers)


def _loop(n_rows, batch_size, n_steps, generator):
    done = 0
    while done < n_steps:
        perm = torch.randperm(n_rows, generator=generator)
        for start in range(0, n_rows - batch_size + 1, batch_size):
            yield perm[start:start + batch_size]
            done += 1
            if done >= n_steps:
                return


def _fit_steps(params, step_loss, *, n_rows, batch_size, n_steps, lr, seed, desc, device):
    """Adam + cosine schedule for ``n_steps`` mini-batches of row indices (seeded order).

    ``step_loss(idx) -> (logged, total)``: the loss to log and the objective to minimise on
    the rows ``idx`` (a tensor on ``device``). Returns the logged loss averaged per 100 steps."""
    opt = torch.optim.Adam(params, lr=lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, n_steps)
    gen = torch.Generator().manual_seed(seed)
    losses, running = [], 0.0
    for step, idx in enumerate(tqdm(_loop(n_rows, batch_size, n_steps, gen), total=n_steps,
                                    desc=desc, disable=None, leave=False)):
        logged, total = step_loss(idx.to(device))
        opt.zero_grad()
        total.backward()
        opt.step()
        sched.step()
        running += logged.item()
        if (step + 1) % 100 == 0:
            losses.append(running / 100)
            running = 0.0
    return losses


def _encode_fn(module, device):
    def encode(X, batch_size=4096):
        module.eval()
        out = []
        with torch.no_grad():
            for start in range(0, len(X), batch_size):
                xb = torch.as_tensor(np.asarray(X[start:start + batch_size]),
                                     dtype=torch.float32, device=device)
                out.append(module(xb).cpu().numpy().astype(np.float64))
        return np.concatenate(out)

    return encode


def train_autoencoder(X, *, device="cpu", **kwargs):
    """Train an MLP autoencoder (see :func:`_train_autoencoder`) with one CPU thread."""
    with single_thread(device):
        return _train_autoencoder(X, device=device, **kwargs)


def _train_autoencoder(X, *, n_latents, hidden=(64, 64), n_steps=2000, batch_size=128,
                      lr=2e-3, seed=0, device="cpu", desc="autoencoder"):
    """Train an MLP autoencoder with squared-error loss.

    Parameters
    ----------
    X : ndarray of shape (n_samples, n_features)
    n_latents : int
        Bottleneck width.
    hidden : tuple of int
        Hidden widths of the encoder (the decoder mirrors them).
    n_steps : int
        Adam steps (mini-batches).

    Returns
    -------
    encode : callable, ndarray (n, n_features) -> ndarray (n, n_latents)
    history : dict with ``loss`` (list of float, one per 100 steps) and ``final_mse``
    """
    dev = resolve_device(device)
    torch.manual_seed(seed)
    D = X.shape[1]
    enc = mlp([D, *hidden, n_latents]).to(dev)
    dec = mlp([n_latents, *hidden[::-1], D]).to(dev)
    Xt = torch.as_tensor(X, dtype=torch.float32, device=dev)

    def step_loss(idx):
        xb = Xt[idx]
        loss = ((dec(enc(xb)) - xb) ** 2).sum(1).mean()
        return loss, loss

    losses = _fit_steps([*enc.parameters(), *dec.parameters()], step_loss, n_rows=len(X),
                        batch_size=batch_size, n_steps=n_steps, lr=lr, seed=seed, desc=desc, device=dev)
    with torch.no_grad():
        enc.eval(), dec.eval()
        mse = float(((dec(enc(Xt)) - Xt) ** 2).sum(1).mean() / Xt.pow(2).sum(1).mean())
    return _encode_fn(enc, dev), {"loss": losses, "relative_mse": mse}


class _Classifier:
    """Encoder -> representation (optionally ReLU) -> bias-free linear read-out."""

    def __init__(self, n_in, width, n_classes, hidden, representation, readout_bias):
        self.encoder = mlp([n_in, *hidden, width])
        self.nonneg = representation == "relu"
        self.readout = nn.Linear(width, n_classes, bias=readout_bias)

    def parameters(self):
        return [*self.encoder.parameters(), *self.readout.parameters()]

    def to(self, dev):
        self.encoder.to(dev)
        self.readout.to(dev)
        return self

    def represent(self, x):
        h = self.encoder(x)
        return torch.relu(h) if self.nonneg else h


def train_classifier(X, y, *, device="cpu", **kwargs):
    """Train an MLP classifier (see :func:`_train_classifier`) with one CPU thread."""
    with single_thread(device):
        return _train_classifier(X, y, device=device, **kwargs)


def _train_classifier(X, y, *, width, n_classes=None, hidden=(64, 64), representation="linear",
                     energy=0.0, weight_decay=0.0, readout_bias=True, representation_bias=None,
                     n_steps=3000, batch_size=256, lr=2e-3, seed=0, device="cpu",
                     desc="classifier"):
    """Train an MLP classifier ``x -> h (width) -> logits = W h (+ b)`` with cross-entropy.

    Parameters
    ----------
    X : ndarray of shape (n_samples, n_features)
    y : ndarray of shape (n_samples,), int, or (n_samples, n_labels) in {0, 1}
        Class labels (softmax cross-entropy), or independent binary labels (sigmoid
        cross-entropy, ``n_classes`` = ``n_labels``).
    width : int
        Representation width ``M``.
    representation : {"linear", "relu"}
        ``relu`` makes the representation non-negative.
    energy : float
        Weight of the activity (energy) penalty ``mean_i sum_j h_ij^2``.
    weight_decay : float
        L2 penalty on the read-out weights only (with ``energy`` it stops the network
        from shrinking ``h`` and growing ``W``).
    readout_bias : bool
        ``False`` gives the softmax-model form ``p(y|x) = softmax(f(x)^T g(y))``.
    representation_bias : float, optional
        Initial bias of the representation units (default: PyTorch's initialisation).
        A positive value starts ReLU units in their active range, so that none is dead
        (zero on every input, hence without gradient) from the first steps.

    Returns
    -------
    represent : callable, ndarray (n, n_features) -> ndarray (n, width)
    readout : dict with ``weight`` (n_classes, width) and ``bias`` (n_classes,) or None
    history : dict with ``loss`` (mini-batch data loss, mean of every 100 steps),
        ``train_accuracy``, ``final_loss`` (data loss on all of ``X`` after training) and
        ``final_objective`` (``final_loss`` plus the energy and weight-decay penalties:
        the quantity the optimiser minimises, for choosing among restarts)
    """
    dev = resolve_device(device)
    torch.manual_seed(seed)
    multilabel = np.ndim(y) == 2
    if multilabel:
        n_classes = y.shape[1]
    elif n_classes is None:
        n_classes = int(y.max()) + 1
    model = _Classifier(X.shape[1], width, n_classes, hidden, representation,
                        readout_bias).to(dev)
    if representation_bias is not None:
        with torch.no_grad():
            model.encoder[-1].bias.fill_(float(representation_bias))
    Xt = torch.as_tensor(X, dtype=torch.float32, device=dev)
    yt = torch.as_tensor(y, dtype=torch.float32 if multilabel else torch.long, device=dev)
    criterion = F.binary_cross_entropy_with_logits if multilabel else F.cross_entropy

    def step_loss(idx):
        h = model.represent(Xt[idx])
        loss = criterion(model.readout(h), yt[idx])
        total = loss
        if energy:
            total = total + energy * h.pow(2).sum(1).mean()
        if weight_decay:
            total = total + weight_decay * model.readout.weight.pow(2).sum()
        return loss, total

    losses = _fit_steps(list(model.parameters()), step_loss, n_rows=len(X), batch_size=batch_size,
                        n_steps=n_steps, lr=lr, seed=seed, desc=desc, device=dev)
    model.encoder.eval()
    with torch.no_grad():
        h = model.represent(Xt)
        logits = model.readout(h)
        pred = (logits > 0).float() if multilabel else logits.argmax(1)
        acc = float((pred == yt).float().mean())
        final_loss = float(criterion(logits, yt))
        objective = (final_loss + energy * float(h.pow(2).sum(1).mean())
                     + weight_decay * float(model.readout.weight.pow(2).sum()))
    weight = model.readout.weight.detach().cpu().numpy().astype(np.float64)
    bias = (model.readout.bias.detach().cpu().numpy().astype(np.float64)
            if model.readout.bias is not None else None)

    class _Rep:
        def __call__(self, X_, batch_size=4096):
            out = []
            with torch.no_grad():
                for start in range(0, len(X_), batch_size):
                    xb = torch.as_tensor(np.asarray(X_[start:start + batch_size]),
                                         dtype=torch.float32, device=dev)
                    out.append(model.represent(xb).cpu().numpy().astype(np.float64))
            return np.concatenate(out)

    return _Rep(), {"weight": weight, "bias": bias}, {"loss": losses, "train_accuracy": acc,
                                                      "final_loss": final_loss,
                                                      "final_objective": objective}


def conv_autoencoder(size, n_latents, *, channels=(32, 32, 64, 64), hidden=256,
                     decoder="deconv", decoder_channels=32, decoder_layers=3):
    """A small convolutional autoencoder for ``size x size`` RGB images.

    Encoder: ``len(channels)`` stride-2 4x4 convolutions (ReLU), then
    ``Linear -> ReLU -> Linear`` to the ``n_latents``-D bottleneck. Decoder:

    - ``"deconv"``: the encoder mirrored with transposed convolutions (the Hsu et al. /
      Burgess et al. layout the disentanglement literature uses, at reduced width);
    - ``"broadcast"``: a spatial broadcast decoder (Watters et al. 2019): the code is tiled
      over the ``size x size`` grid, two coordinate channels (x, y in [-1, 1]) are
      appended, then ``decoder_layers`` 3x3 convolutions of ``decoder_channels`` (ReLU)
      and a 1x1 convolution to RGB. Its first layer is linear in the code, so the
      reconstruction loss is still invariant to any invertible linear map of the code
      (no preferred basis: the setting in which ICA must find the axes).

    Returns
    -------
    encoder, decoder : torch.nn.Module
        ``encoder``: (n, 3, size, size) -> (n, n_latents); ``decoder`` the reverse.
    """
    if decoder not in ("deconv", "broadcast"):
        raise ValidationError(f"decoder must be 'deconv' or 'broadcast', got {decoder!r}")

    n_down = len(channels)
    side = size >> n_down
    if side < 1 or side << n_down != size:
        raise ValidationError(f"image size {size} is not divisible by 2**{n_down}")
    enc, c_in = [], 3
    for c in channels:
        enc += [nn.Conv2d(c_in, c, 4, stride=2, padding=1), nn.ReLU()]
        c_in = c
    flat = channels[-1] * side * side
    encoder = nn.Sequential(*enc, nn.Flatten(), nn.Linear(flat, hidden), nn.ReLU(),
                            nn.Linear(hidden, n_latents))
    if decoder == "broadcast":
        return encoder, _broadcast_decoder(size, n_latents, decoder_channels, decoder_layers)
    dec = [nn.Linear(n_latents, hidden), nn.ReLU(), nn.Linear(hidden, flat), nn.ReLU(),
           nn.Unflatten(1, (channels[-1], side, side))]
    outs = [*channels[::-1][1:], 3]
    for i, c in enumerate(outs):
        dec.append(nn.ConvTranspose2d(c_in, c, 4, stride=2, padding=1))
        if i < len(outs) - 1:
            dec.append(nn.ReLU())
        c_in = c
    return encoder, nn.Sequential(*dec)


def _broadcast_decoder(size, n_latents, width, n_layers):
    class Broadcast(nn.Module):
        """(n, k) -> (n, k + 2, size, size): the code tiled, then x and y coordinates."""

        def __init__(self):
            super().__init__()
            g = torch.linspace(-1.0, 1.0, size)
            yy, xx = torch.meshgrid(g, g, indexing="ij")
            self.register_buffer("coords", torch.stack([xx, yy])[None])

        def forward(self, z):
            n, k = z.shape
            return torch.cat([z[:, :, None, None].expand(n, k, size, size),
                              self.coords.expand(n, 2, size, size)], 1)

    layers, c = [Broadcast()], n_latents + 2
    for _ in range(n_layers):
        layers += [nn.Conv2d(c, width, 3, padding=1), nn.ReLU()]
        c = width
    return nn.Sequential(*layers, nn.Conv2d(c, 3, 1))


def train_conv_autoencoder(images, *, device="cpu", **kwargs):
    """Train a convolutional autoencoder (see :func:`_train_conv_autoencoder`), one CPU thread."""
    with single_thread(device):
        return _train_conv_autoencoder(images, device=device, **kwargs)


def _train_conv_autoencoder(images, *, n_latents, channels=(32, 32, 64, 64), hidden=256,
                            n_steps=3000, batch_size=64, lr=1e-3, seed=0, device="cpu",
                            desc="conv autoencoder", decoder="deconv", decoder_channels=32,
                            decoder_layers=3):
    """Train :func:`conv_autoencoder` with squared-error loss, Adam and a cosine schedule.

    Parameters
    ----------
    images : ndarray of shape (n_samples, size, size, 3)
        Pixel values (float, any fixed scaling; the loss is on these values).
    n_latents : int
        Bottleneck width.
    decoder, decoder_channels, decoder_layers
        See :func:`conv_autoencoder`.

    Returns
    -------
    encode : callable, ndarray (n, size, size, 3) -> ndarray (n, n_latents)
    history : dict with ``loss`` (per 100 steps) and ``relative_mse`` (reconstruction
        error on all ``images`` / their mean squared norm)
    """
    dev = resolve_device(device)
    torch.manual_seed(seed)
    size = images.shape[1]
    enc, dec = conv_autoencoder(size, n_latents, channels=channels, hidden=hidden,
                                decoder=decoder, decoder_channels=decoder_channels,
                                decoder_layers=decoder_layers)
    enc.to(dev), dec.to(dev)
    Xt = torch.as_tensor(np.ascontiguousarray(np.moveaxis(images, -1, 1)), dtype=torch.float32,
                         device=dev)

    def step_loss(idx):
        xb = Xt[idx]
        loss = ((dec(enc(xb)) - xb) ** 2).sum((1, 2, 3)).mean()
        return loss, loss

    losses = _fit_steps([*enc.parameters(), *dec.parameters()], step_loss, n_rows=len(Xt),
                        batch_size=batch_size, n_steps=n_steps, lr=lr, seed=seed, desc=desc, device=dev)
    enc.eval(), dec.eval()
    err = norm = 0.0
    with torch.no_grad():
        for start in range(0, len(Xt), 1024):
            xb = Xt[start:start + 1024]
            err += float(((dec(enc(xb)) - xb) ** 2).sum())
            norm += float(xb.pow(2).sum())

    def encode(X, batch_size=1024):
        out = []
        with torch.no_grad():
            for start in range(0, len(X), batch_size):
                xb = torch.as_tensor(np.moveaxis(np.asarray(X[start:start + batch_size]), -1, 1),
                                     dtype=torch.float32, device=dev)
                out.append(enc(xb).cpu().numpy().astype(np.float64))
        return np.concatenate(out)

    return encode, {"loss": losses, "relative_mse": err / max(norm, 1e-300)}
