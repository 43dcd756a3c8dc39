"""Synthetic data-generating processes (DGPs) for the reproduction experiments.

Every function is a pure numpy function of its arguments and ``random_state``: the
same seed gives the same arrays, bit for bit. Setups follow
``docs/definitions.md`` §4 and §6; where the papers are silent the choice is an
**[actkit]** convention, recorded in the ``info`` dict each generator returns so it
can be written into the result files.

=============================  ==========================================================
``isometric_dgp``              independent non-Gaussian latents through a K-layer
                               leaky-ReLU map with orthogonal weights (Nelson et al.)
``generative_dgp``             labels cause latents (Zhou & Klindt, generative)
``discriminative_dgp``         k-sparse latents cause labels (Zhou & Klindt, discriminative)
``kl_counterexample``          two softmax models with d_KL -> 0 but unrelated embeddings
                               (Nielsen et al., Thm 3.1 / Cor 3.2)
``radial_classification``      2-D inputs labelled by angular sector (Nielsen et al.)
``mutual_coherence``           max |cos| between columns of a measurement matrix
``sparse_measurements``        k-sparse latents through a random measurement matrix (planted
                               dictionary; Zhou & Klindt), or a Gaussian control
=============================  ==========================================================
"""

from __future__ import annotations

import numpy as np
from scipy.linalg import hadamard
from sklearn.utils import check_random_state

from actkit.errors import ValidationError

__all__ = [
    "random_orthogonal",
    "leaky_relu",
    "isometric_dgp",
    "empirical_bilipschitz",
    "invertible_leaky_mlp",
    "generative_dgp",
    "discriminative_dgp",
    "hadamard_frame",
    "mutual_coherence",
    "kl_counterexample",
    "KL_PERMUTATION",
    "radial_classification",
    "sparse_measurements",
]


def _check_positive_int(value, name):
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
        raise ValidationError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def random_orthogonal(n_rows, n_cols=None, *, random_state=None):
    """A Haar-random matrix with orthonormal columns (or rows).

    Parameters
    ----------
    n_rows, n_cols : int
        Shape of the result; ``n_cols`` defaults to ``n_rows``.
    random_state : int, RandomState or None

    Returns
    -------
    Q : ndarray of shape (n_rows, n_cols)
        Orthonormal columns when ``n_rows >= n_cols``, orthonormal rows otherwise.
    """
    n_cols = n_rows if n_cols is None else n_cols
    rng = check_random_state(random_state)
    big, small = max(n_rows, n_cols), min(n_rows, n_cols)
    q, r = np.linalg.qr(rng.standard_normal((big, small)))
    q = q * np.sign(np.diag(r))  # Haar measure (Mezzadri 2007)
    return q if n_rows >= n_cols else q.T


def leaky_relu(x, alpha):
    """Elementwise ``x if x > 0 else alpha * x``."""
    return np.where(x > 0, x, alpha * x)


def isometric_dgp(n_samples, *, n_latents=4, n_features=None, alpha=0.5, n_layers=3,
                  latent="laplace", random_state=None):
    """Nelson et al.'s isometric DGP: x = g(u), g a K-layer leaky-ReLU map.

    Each layer is ``x -> LeakyReLU_alpha(W x)`` with ``W`` (semi-)orthogonal, so every
    layer is bi-Lipschitz with constants ``alpha`` and 1 and the whole map has
    ``1 + L = alpha ** -n_layers`` (``alpha = 1``: an isometry; ``alpha -> 0``: ReLU).
    The weights depend on ``random_state`` only, not on ``alpha``, so an ``alpha``
    sweep changes nothing but the slope.

    Parameters
    ----------
    n_samples : int
    n_latents : int
        Number of independent latents ``d``.
    n_features : int, optional
        Observed dimension ``D >= d`` (default ``2 d``); the first layer is a
        semi-orthogonal ``D x d`` embedding, the others ``D x D`` orthogonal.
    alpha : float in (0, 1]
        Leaky-ReLU slope.
    n_layers : int
        ``K``.
    latent : {"laplace", "uniform"}
        Distribution of the latents, scaled to unit variance.

    Returns
    -------
    X : ndarray of shape (n_samples, n_features), float64
    U : ndarray of shape (n_samples, n_latents), float64
        The true latents.
    info : dict
        ``weights`` (list of arrays), ``lipschitz_L`` (nominal ``alpha**-K - 1``) and the
        settings.
    """
    n_samples = _check_positive_int(n_samples, "n_samples")
    n_latents = _check_positive_int(n_latents, "n_latents")
    n_features = (2 * n_latents if n_features is None
                  else _check_positive_int(n_features, "n_features"))
    if n_features < n_latents:
        raise ValidationError(f"n_features ({n_features}) must be >= n_latents ({n_latents})")
    if not 0 < alpha <= 1:
        raise ValidationError(f"alpha must be in (0, 1], got {alpha!r}")
    rng = check_random_state(random_state)
    weights = [random_orthogonal(n_features, n_latents, random_state=rng)]
    weights += [random_orthogonal(n_features, random_state=rng) for _ in range(n_layers - 1)]
    U = _sample_latents(rng, n_samples, n_latents, latent)
    X = _apply_layers(U, weights, alpha)
    info = {"alpha": float(alpha), "n_layers": int(n_layers), "latent": latent,
            "n_latents": n_latents, "n_features": n_features,
            "lipschitz_L": float(alpha ** -n_layers - 1.0), "weights": weights}
    return X, U, info


def _sample_latents(rng, n, d, kind):
    if kind == "laplace":
        return rng.laplace(scale=1 / np.sqrt(2), size=(n, d))
    if kind == "uniform":
        return rng.uniform(-np.sqrt(3), np.sqrt(3), size=(n, d))
    raise ValidationError(f"latent must be 'laplace' or 'uniform', got {kind!r}")


def _apply_layers(U, weights, alpha):
    X = U
    for W in weights:
        X = leaky_relu(X @ W.T, alpha)
    return X


def empirical_bilipschitz(X, U, *, n_pairs=20000, random_state=None):
    """Sample estimate of the bi-Lipschitz constant of ``u -> x`` on random pairs.

    Returns ``max(r) / min(r) - 1`` and ``mean(r) / min(r) - 1`` for the distance ratios
    ``r = |x_i - x_j| / |u_i - u_j|`` of ``n_pairs`` random pairs (Nelson et al., Fig. A.4
    compare the max and mean estimates).

    Returns
    -------
    dict with ``L_max`` and ``L_mean`` (floats)
    """
    rng = check_random_state(random_state)
    i = rng.randint(0, len(X), n_pairs)
    j = rng.randint(0, len(X), n_pairs)
    keep = i != j
    du = np.linalg.norm(U[i[keep]] - U[j[keep]], axis=1)
    dx = np.linalg.norm(X[i[keep]] - X[j[keep]], axis=1)
    r = dx / np.maximum(du, 1e-12)
    return {"L_max": float(r.max() / r.min() - 1), "L_mean": float(r.mean() / r.min() - 1)}


def invertible_leaky_mlp(n_in, n_out=None, *, n_layers=2, alpha=0.2, random_state=None):
    """A random invertible (injective) leaky-ReLU MLP ``g`` as a closure.

    Layers are ``x -> LeakyReLU_alpha(W x)``, ``W`` orthogonal (semi-orthogonal for
    the first when ``n_out > n_in``), so ``g`` is injective and bi-Lipschitz.

    Returns
    -------
    g : callable, ndarray (n, n_in) -> ndarray (n, n_out)
    """
    n_out = n_in if n_out is None else n_out
    if n_out < n_in:
        raise ValidationError(f"n_out ({n_out}) must be >= n_in ({n_in}) for an injective map")
    rng = check_random_state(random_state)
    weights = [random_orthogonal(n_out, n_in, random_state=rng)]
    weights += [random_orthogonal(n_out, random_state=rng) for _ in range(n_layers - 1)]

    def g(Z):
        return _apply_layers(np.asarray(Z, dtype=np.float64), weights, alpha)

    return g


def generative_dgp(n_samples, *, n_latents=3, levels=3, sigma=0.25, n_features=None,
                   alpha=0.2, random_state=None, mixing_state=0, box=None):
    """Zhou & Klindt's generative DGP: labels cause latents, ``z | y ~ N(mu_y, sigma^2 I)``.

    **[actkit]** The class means form a factorial grid: the label is a tuple of
    ``n_latents`` independent digits in ``range(levels)`` (``K = levels ** n_latents``
    classes), and ``mu_y`` places digit ``y_i`` at an evenly spaced value in [-1, 1] on
    axis ``i``. The latents are therefore independent across axes (each a 1-D Gaussian
    mixture), as the grandmother-cell argument (non-negative, energy-efficient units)
    needs, and ``log p(y | z)`` is affine in ``z`` with a rank-``d`` coefficient
    matrix, so the Bayes-optimal logits are linear in the latents. Observations are
    ``x = g(z)`` with ``g`` a random invertible leaky MLP.

    Parameters
    ----------
    n_samples : int
    n_latents : int
        ``d``.
    levels : int
        Values per latent axis (``>= 2``).
    sigma : float
        Within-class standard deviation.
    n_features : int, optional
        Observed dimension (default ``2 d``).
    alpha : float
        Slope of the mixing MLP.
    random_state : int or None
        Draws the samples.
    mixing_state : int
        Draws the mixing ``g`` (kept fixed across sample draws, so train and test sets
        share one ``g``).
    box : float, optional
        Truncate every latent to ``[-box, box]`` (``>= 1``, so the grid lies inside) by
        rejection sampling, entry by entry: independent latents with a *rectangular*
        support (see :func:`actkit.synthetic.complete.truncated_generative_dgp`).

    Returns
    -------
    X : ndarray of shape (n_samples, n_features)
    Z : ndarray of shape (n_samples, n_latents)
    y : ndarray of shape (n_samples,), int64 in ``range(levels ** n_latents)``
    info : dict
    """
    n_samples = _check_positive_int(n_samples, "n_samples")
    n_latents = _check_positive_int(n_latents, "n_latents")
    if levels < 2:
        raise ValidationError(f"levels must be >= 2, got {levels!r}")
    if box is not None and not box >= 1.0:
        raise ValidationError(f"box must be >= 1 (the class means lie in [-1, 1]), got {box!r}")
    n_features = 2 * n_latents if n_features is None else n_features
    rng = check_random_state(random_state)
    digits = rng.randint(0, levels, size=(n_samples, n_latents))
    values = np.linspace(-1.0, 1.0, levels)
    mu = values[digits]
    Z = mu + sigma * rng.standard_normal((n_samples, n_latents))
    if box is not None:
        bad = np.abs(Z) > box
        while bad.any():  # the axes are independent: redraw the offending entries only
            Z[bad] = mu[bad] + sigma * rng.standard_normal(int(bad.sum()))
            bad = np.abs(Z) > box
    y = np.ravel_multi_index(tuple(digits.T), (levels,) * n_latents).astype(np.int64)
    g = invertible_leaky_mlp(n_latents, n_features, alpha=alpha, random_state=mixing_state)
    info = {"n_latents": n_latents, "levels": levels, "n_classes": levels ** n_latents,
            "sigma": sigma, "n_features": n_features, "mixing_alpha": alpha}
    if box is not None:
        info["box"] = box
    return g(Z), Z, y, info


def hadamard_frame(n_rows):
    """The measurement matrix ``[I, H / sqrt(D)]`` (D x 2D), unit-norm columns.

    ``D`` must be a power of two. Its mutual coherence is ``1 / sqrt(D)``, the smallest
    possible for a union of two orthonormal bases, and its spark is ``2 sqrt(D)``
    (Donoho & Huo 2001 for Dirac-Walsh pairs): the best-understood undercomplete setting.
    """
    if n_rows < 1 or n_rows & (n_rows - 1):
        raise ValidationError(f"n_rows must be a power of two, got {n_rows!r}")
    return np.hstack([np.eye(n_rows), hadamard(n_rows) / np.sqrt(n_rows)])


def mutual_coherence(A):
    """Mutual coherence ``max_{i != j} |a_i . a_j| / (|a_i| |a_j|)`` of the columns of ``A``.

    Parameters
    ----------
    A : ndarray of shape (D, d)

    Returns
    -------
    mu : float
        The spark satisfies ``spark(A) >= 1 + 1/mu``, so every ``k < (1 + 1/mu) / 2``
        meets the uniqueness (spark > 2k) condition.
    """
    A = np.asarray(A, dtype=np.float64)
    An = A / np.linalg.norm(A, axis=0, keepdims=True)
    G = np.abs(An.T @ An)
    np.fill_diagonal(G, 0.0)
    return float(G.max())


def discriminative_dgp(n_samples, *, measurement, k=2, n_labels=None, temperature=3.0,
                       alpha=0.2, random_state=None, mixing_state=0):
    """Zhou & Klindt's discriminative DGP: k-sparse latents cause labels.

    ``z`` has a uniformly random support of size ``k`` with non-zeros ``|N(0, 1)|``;
    ``x = g(z)`` with ``g`` a random invertible leaky MLP. **[actkit]** The labels are
    ``n_labels`` binary attributes, ``y_c ~ Bernoulli(sigmoid(temperature * v_c . A z))``,
    with ``A`` the ``D x d`` measurement matrix and ``V = [v_c]`` a fixed random
    ``n_labels x D`` read-out with orthogonal columns of norm ``sqrt(n_labels / D)`` (every
    direction of ``A z`` equally informative). The Bayes-optimal logits factor through
    the ``D``-dimensional ``A z``, so an optimal classifier with a ``D``-wide
    representation must represent ``A z`` up to an invertible linear map: the
    compressed-sensing measurement of the latents. (Many binary labels rather than one
    categorical label give the network enough bits per sample to learn that map well.)

    Parameters
    ----------
    n_samples : int
    measurement : ndarray of shape (D, d)
    k : int
        Active latents per sample (``1 <= k <= d``).
    n_labels : int, optional
        Number of binary labels, default ``4 D``.
    temperature : float
        Scale of the logits (higher = less label noise).

    Returns
    -------
    X : ndarray of shape (n_samples, d)
    Z : ndarray of shape (n_samples, d), non-negative, ``k`` non-zeros a row
    Y : ndarray of shape (n_samples, n_labels), float64 in {0, 1}
    info : dict
    """
    A = np.asarray(measurement, dtype=np.float64)
    D, d = A.shape
    if not 1 <= k <= d:
        raise ValidationError(f"k must be in [1, {d}], got {k!r}")
    n_labels = 4 * D if n_labels is None else n_labels
    if n_labels < D:
        raise ValidationError(f"n_labels ({n_labels}) must be >= D ({D}) for A z to be identifiable")
    rng = check_random_state(random_state)
    n_samples = _check_positive_int(n_samples, "n_samples")
    Z = np.zeros((n_samples, d))
    support = np.argsort(rng.random_sample((n_samples, d)), axis=1)[:, :k]
    rows = np.repeat(np.arange(n_samples), k)
    Z[rows, support.ravel()] = np.abs(rng.standard_normal(n_samples * k))
    V = random_orthogonal(n_labels, D, random_state=mixing_state + 1) * np.sqrt(n_labels / D)
    logits = temperature * (Z @ A.T) @ V.T
    p = 0.5 * (1 + np.tanh(0.5 * logits))
    Y = (rng.random_sample(p.shape) < p).astype(np.float64)
    g = invertible_leaky_mlp(d, d, alpha=alpha, random_state=mixing_state)
    info = {"k": int(k), "n_latents": d, "n_measurements": D, "n_labels": n_labels,
            "temperature": temperature, "mixing_alpha": alpha}
    return g(Z), Z, Y, info


# slot permutation of model 2 in the KL counterexample (docs/definitions.md §4)
KL_PERMUTATION = (5, 0, 2, 4, 6, 1, 3)


def kl_counterexample(rho, *, n_per_label=500, n_labels=7, permutation=KL_PERMUTATION,
                      random_state=None):
    """Nielsen et al.'s KL counterexample (Thm 3.1 / Cor 3.2), docs/definitions.md §4.

    Model 1: ``g(y_k) = rho (cos 2 pi k / C, sin 2 pi k / C)``; an input of label ``k`` has
    ``f = r (cos theta, sin theta)``, ``theta = 2 pi k / C + U(-pi/64, pi/64)``,
    ``r = 2 + |0.01 N(0, 1)|``. Model 2: the same with label ``k`` in angular slot
    ``permutation[k]``. Both models share the noise draws.

    Returns
    -------
    f1, f2 : ndarray of shape (n_labels * n_per_label, 2)
    g1, g2 : ndarray of shape (n_labels, 2)
    labels : ndarray of shape (n_labels * n_per_label,)
    """
    if len(permutation) != n_labels or sorted(permutation) != list(range(n_labels)):
        raise ValidationError(f"permutation must be a permutation of range({n_labels})")
    rng = check_random_state(random_state)
    labels = np.repeat(np.arange(n_labels), n_per_label)
    jitter = rng.uniform(-np.pi / 64, np.pi / 64, size=labels.shape)
    radius = 2 + np.abs(0.01 * rng.standard_normal(labels.shape))
    perm = np.asarray(permutation)

    def model(slot_of_label):
        angle_g = 2 * np.pi * slot_of_label / n_labels
        g = rho * np.stack([np.cos(angle_g), np.sin(angle_g)], axis=1)
        theta = angle_g[labels] + jitter
        f = radius[:, None] * np.stack([np.cos(theta), np.sin(theta)], axis=1)
        return f, g

    f1, g1 = model(np.arange(n_labels))
    f2, g2 = model(perm)
    return f1, g1, f2, g2, labels


def radial_classification(n_samples, *, n_classes=6, noise=0.1, random_state=None):
    """2-D inputs labelled by angular sector (Nielsen et al.'s synthetic 2-D task).

    **[actkit]** The paper's exact generator is not in the text we have: points are
    ``x = r (cos t, sin t)`` with ``t ~ U(0, 2 pi)``, ``r ~ U(0.5, 1.5)``, and label
    ``floor(C t' / 2 pi)`` where ``t' = t + noise * N(0, 1)`` (soft sector borders, so the
    Bayes-optimal model is not saturated and the softmax geometry is well defined).

    Returns
    -------
    X : ndarray of shape (n_samples, 2)
    y : ndarray of shape (n_samples,), int64 in ``range(n_classes)``
    """
    rng = check_random_state(random_state)
    n_samples = _check_positive_int(n_samples, "n_samples")
    t = rng.uniform(0, 2 * np.pi, n_samples)
    r = rng.uniform(0.5, 1.5, n_samples)
    X = np.stack([r * np.cos(t), r * np.sin(t)], axis=1)
    t_noisy = np.mod(t + noise * rng.standard_normal(n_samples), 2 * np.pi)
    y = np.minimum((t_noisy / (2 * np.pi) * n_classes).astype(np.int64), n_classes - 1)
    return X, y


def sparse_measurements(n_samples, *, n_latents=40, n_features=20, k=3, gaussian=False, random_state=None):
    """Planted dictionary: ``x = s A`` with k-sparse latents ``s`` and a random measurement
    matrix (Zhou & Klindt's compressed-sensing setting, observed directly).

    ``A`` (n_latents x n_features, unit rows: the planted atoms) has i.i.d. Gaussian entries,
    so every ``n_features`` of its rows are linearly independent almost surely: spark =
    n_features + 1, and the spark condition spark > 2k holds for ``k <= n_features / 2``.
    Each row of ``s`` has a uniformly random support of size ``k`` with values ``± U(0.5,
    1.5)`` (random signs). ``gaussian=True`` is the control: Gaussian rows with the sparse
    rows' sample covariance (same second moments, no sparse structure).

    Returns
    -------
    X : ndarray of shape (n_samples, n_features), float32
    S : ndarray of shape (n_samples, n_latents)
        The latents (of the sparse rows, also for the control, whose rows they do not generate).
    A : ndarray of shape (n_latents, n_features)
    """
    for v, name in ((n_samples, "n_samples"), (n_latents, "n_latents"), (n_features, "n_features"), (k, "k")):
        _check_positive_int(v, name)
    if k > n_latents:
        raise ValidationError(f"k={k} exceeds n_latents={n_latents}")
    rng = check_random_state(random_state)
    A = rng.normal(size=(n_latents, n_features))
    A /= np.linalg.norm(A, axis=1, keepdims=True)
    S = np.zeros((n_samples, n_latents))
    idx = np.argsort(rng.random_sample((n_samples, n_latents)), axis=1)[:, :k]
    values = rng.choice([-1.0, 1.0], (n_samples, k)) * rng.uniform(0.5, 1.5, (n_samples, k))
    np.put_along_axis(S, idx, values, 1)
    X = S @ A
    if gaussian:
        X = rng.multivariate_normal(np.zeros(n_features), np.cov(X, rowvar=False), size=n_samples)
    return X.astype(np.float32), S, A
