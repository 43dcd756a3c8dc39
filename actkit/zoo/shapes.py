"""A procedurally rendered image dataset with known discrete factors (a Shapes3D stand-in).

The real Shapes3D / dSprites archives cannot be downloaded on offline machines, so actkit
renders its own: one flat object on a plain background, with seven independent discrete
factors of variation (the same kinds as Shapes3D's)::

    shape           4  square, ellipse, triangle, cross
    scale           6  object radius 0.13 .. 0.22 of the image side
    orientation     8  -40 .. +40 degrees (every shape is distinguishable over this span)
    x_position      8  object centre, 0.28 .. 0.72 of the image width
    y_position      8  object centre, 0.28 .. 0.72 of the image height
    object_hue      8  hue of the object (saturation 0.9, value 0.95)
    background_hue  8  hue of the background (saturation 0.45, value 0.5: darker than any object)

``style="disentanglement"`` renders the same factors with larger objects (radius 0.28 .. 0.42,
centres 0.32 .. 0.68) and both hues on a non-wrapping arc (8 levels over 0 .. 0.66 of the hue
circle instead of the whole circle), so that every ordered factor is an interval, not a
circle; it is the data of ``actkit reproduce disentanglement`` (see :data:`STYLES`). The
default style is the data of the shipped zoo and does not change.

Rendering is pure numpy, vectorised over images, with 2x2 super-sampling for smooth edges.
It is deterministic: the same factors give bitwise the same images on every machine, and
:func:`render_shapes` with the same ``random_state`` gives the same dataset.

Examples
--------
>>> from actkit.zoo.shapes import render_shapes
>>> images, factors, names = render_shapes(16, size=32, random_state=0)
>>> images.shape, images.dtype, factors.shape, names[0]
((16, 32, 32, 3), dtype('uint8'), (16, 7), 'shape')
"""

from __future__ import annotations

import numpy as np

from actkit.errors import ValidationError

__all__ = [
    "FACTOR_NAMES",
    "FACTOR_SIZES",
    "SHAPE_NAMES",
    "STYLES",
    "factor_values",
    "render_factors",
    "render_shapes",
    "sample_factors",
]

#: Names of the factors, in the column order of ``factors``.
FACTOR_NAMES: tuple[str, ...] = (
    "shape",
    "scale",
    "orientation",
    "x_position",
    "y_position",
    "object_hue",
    "background_hue",
)
#: Number of discrete values of each factor (same order as :data:`FACTOR_NAMES`).
FACTOR_SIZES: tuple[int, ...] = (4, 6, 8, 8, 8, 8, 8)
#: Names of the values of the ``shape`` factor.
SHAPE_NAMES: tuple[str, ...] = ("square", "ellipse", "triangle", "cross")

#: Rendering styles: level values that differ from the default (the zoo's data).
#: ``disentanglement``: larger objects and non-wrapping hues (the data of
#: ``actkit reproduce disentanglement``; docs/reproduction.md says why).
STYLES: dict[str, dict[str, tuple[float, float]]] = {
    "default": {"scale": (0.13, 0.22), "position": (0.28, 0.72), "hue": (0.0, 1.0)},
    "disentanglement": {"scale": (0.28, 0.42), "position": (0.32, 0.68), "hue": (0.0, 0.75)},
}

_CHUNK = 512  # images rendered at once (bounds memory: ~chunk * (2*size)^2 * 4 bytes per array)


def factor_values(name: str, *, style: str = "default") -> np.ndarray:
    """Physical value of each level of one factor.

    Parameters
    ----------
    name : str
        One of :data:`FACTOR_NAMES`.
    style : str, default="default"
        One of :data:`STYLES`.

    Returns
    -------
    values : ndarray of shape (n_levels,)
        ``shape``: the level index (see :data:`SHAPE_NAMES`); ``scale``: object radius as a
        fraction of the image side; ``orientation``: degrees; ``x_position``/``y_position``:
        object centre as a fraction of the image side; hues: in [0, 1) (8 equal steps of
        the style's hue arc, starting at its first end).
    """
    st = _style(style)
    if name == "shape":
        return np.arange(4, dtype=np.float64)
    if name == "scale":
        return np.linspace(*st["scale"], 6)
    if name == "orientation":
        return np.linspace(-40.0, 40.0, 8)
    if name in ("x_position", "y_position"):
        return np.linspace(*st["position"], 8)
    if name in ("object_hue", "background_hue"):
        lo, hi = st["hue"]
        return lo + (hi - lo) * np.arange(8) / 8.0
    raise ValidationError(f"unknown factor {name!r}; factors are {', '.join(FACTOR_NAMES)}")


def sample_factors(n: int, *, random_state=None) -> np.ndarray:
    """Draw ``n`` factor combinations, each factor independently and uniformly.

    Parameters
    ----------
    n : int
        Number of samples (>= 1).
    random_state : int, numpy.random.Generator or None
        Seed (or generator) for the draw.

    Returns
    -------
    factors : ndarray of shape (n, 7), int64
        Level index of each factor, columns in :data:`FACTOR_NAMES` order.
    """
    n = _check_n(n)
    rng = np.random.default_rng(random_state)
    return np.stack([rng.integers(0, k, size=n) for k in FACTOR_SIZES], axis=1).astype(np.int64)


def _hsv_to_rgb(h: np.ndarray, s: float, v: float) -> np.ndarray:
    """Vectorised HSV -> RGB; ``h`` of shape (n,) in [0, 1); returns (n, 3) in [0, 1]."""
    h6 = (np.asarray(h, dtype=np.float64) % 1.0) * 6.0
    i = np.floor(h6).astype(np.int64) % 6
    f = h6 - np.floor(h6)
    p, q, t = v * (1 - s), v * (1 - s * f), v * (1 - s * (1 - f))
    vv = np.full_like(f, v)
    pp = np.full_like(f, p)
    table = np.stack(
        [
            np.stack([vv, t, pp], 1),
            np.stack([q, vv, pp], 1),
            np.stack([pp, vv, t], 1),
            np.stack([pp, q, vv], 1),
            np.stack([t, pp, vv], 1),
            np.stack([vv, pp, q], 1),
        ],
        0,
    )  # (6, n, 3)
    return table[i, np.arange(len(h6))]


def _masks(shape_idx: np.ndarray, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Inside-the-object mask in the object's own frame (unit radius); arrays (n, P, P)."""
    au, av = np.abs(u), np.abs(v)
    square = np.maximum(au, av) <= 0.8
    ellipse = u * u + (v / 0.55) ** 2 <= 1.0
    # equilateral triangle, circumradius 1, apex up (inradius 0.5); image y grows downwards
    tri = (v <= 0.5) & (0.8660254 * u - 0.5 * v <= 0.5) & (-0.8660254 * u - 0.5 * v <= 0.5)
    cross = ((au <= 0.3) & (av <= 0.9)) | ((av <= 0.3) & (au <= 0.9))
    s = shape_idx[:, None, None]
    return np.where(s == 0, square, np.where(s == 1, ellipse, np.where(s == 2, tri, cross)))


def _style(style):
    if style not in STYLES:
        raise ValidationError(f"unknown style {style!r}; styles are {', '.join(STYLES)}")
    return STYLES[style]


def render_factors(factors, *, size: int = 32, style: str = "default") -> np.ndarray:
    """Render the images of given factor combinations.

    Parameters
    ----------
    factors : array-like of int, shape (n_samples, 7)
        Level index of each factor, columns in :data:`FACTOR_NAMES` order.
    size : int, default=32
        Image height and width in pixels (>= 8).
    style : str, default="default"
        One of :data:`STYLES` (the level values of scale, position and hues).

    Returns
    -------
    images : ndarray of shape (n_samples, size, size, 3), uint8
        RGB images.
    """
    _style(style)
    factors = np.asarray(factors)
    if factors.ndim != 2 or factors.shape[1] != len(FACTOR_NAMES):
        raise ValidationError(
            f"factors must have shape (n_samples, {len(FACTOR_NAMES)}), got {factors.shape}"
        )
    if not np.issubdtype(factors.dtype, np.integer):
        raise ValidationError("factors must be integer level indices")
    bad = (factors < 0) | (factors >= np.asarray(FACTOR_SIZES))
    if bad.any():
        col = int(np.nonzero(bad.any(0))[0][0])
        raise ValidationError(
            f"factor {FACTOR_NAMES[col]!r} has levels 0..{FACTOR_SIZES[col] - 1}, "
            f"got {int(factors[bad.any(1)][0, col])}"
        )
    size = int(size)
    if size < 8:
        raise ValidationError(f"size must be >= 8 pixels, got {size}")

    n = len(factors)
    out = np.empty((n, size, size, 3), dtype=np.uint8)
    ss = 2  # super-sampling per axis
    grid = (np.arange(size * ss, dtype=np.float32) + 0.5) / ss  # sub-pixel centres in pixels
    scale_v = factor_values("scale", style=style)
    orient_v = np.deg2rad(factor_values("orientation", style=style))
    pos_v = factor_values("x_position", style=style)
    hue_v = factor_values("object_hue", style=style)
    for start in range(0, n, _CHUNK):
        f = factors[start : start + _CHUNK]
        m = len(f)
        radius = (scale_v[f[:, 1]] * size).astype(np.float32)[:, None, None]
        theta = orient_v[f[:, 2]]
        cos = np.cos(theta).astype(np.float32)[:, None, None]
        sin = np.sin(theta).astype(np.float32)[:, None, None]
        cx = (pos_v[f[:, 3]] * size).astype(np.float32)[:, None, None]
        cy = (pos_v[f[:, 4]] * size).astype(np.float32)[:, None, None]
        dx = grid[None, None, :] - cx  # (m, 1, P)
        dy = grid[None, :, None] - cy  # (m, P, 1)
        u = (cos * dx + sin * dy) / radius
        v = (-sin * dx + cos * dy) / radius
        mask = _masks(f[:, 0], u, v).astype(np.float32)
        alpha = mask.reshape(m, size, ss, size, ss).mean(axis=(2, 4))[..., None]  # (m, S, S, 1)
        obj = _hsv_to_rgb(hue_v[f[:, 5]], 0.9, 0.95).astype(np.float32)[:, None, None, :]
        bg = _hsv_to_rgb(hue_v[f[:, 6]], 0.45, 0.5).astype(np.float32)[:, None, None, :]
        img = alpha * obj + (1.0 - alpha) * bg
        out[start : start + m] = np.rint(img * 255.0).astype(np.uint8)
    return out


def render_shapes(n: int, *, size: int = 32, random_state=None, style: str = "default"):
    """Render a random Shapes3D-like dataset with known factors.

    Each factor is drawn independently and uniformly over its levels (see
    :data:`FACTOR_NAMES`, :data:`FACTOR_SIZES`, :func:`factor_values`).

    Parameters
    ----------
    n : int
        Number of images (>= 1).
    size : int, default=32
        Image height and width in pixels (>= 8).
    random_state : int, numpy.random.Generator or None
        Seed of the factor draw; the same seed gives the same dataset, bitwise.
    style : str, default="default"
        One of :data:`STYLES`; the factor draw does not depend on it.

    Returns
    -------
    images : ndarray of shape (n, size, size, 3), uint8
        RGB images.
    factors : ndarray of shape (n, 7), int64
        Level index of each factor, columns in ``factor_names`` order.
    factor_names : tuple of str
        :data:`FACTOR_NAMES`.
    """
    _style(style)
    factors = sample_factors(n, random_state=random_state)
    return render_factors(factors, size=size, style=style), factors, FACTOR_NAMES


def _check_n(n) -> int:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValidationError(f"n must be a positive integer, got {n!r}")
    return int(n)
