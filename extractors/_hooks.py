"""Capture module outputs by dotted path and stop the forward pass after the deepest one.

Layer names are the dotted paths of ``model.named_modules()`` (``gpt_neox.layers.3``,
``encoder.layer.1``, ``layer3``, ``blocks.5``): one naming scheme, resolved in one place
(:func:`resolve_layers`). :class:`Capture` registers forward hooks on the requested
modules; each hook hands the module's output to a callback (which pools and copies only
what is stored), and once every requested module has fired the last hook raises a
private exception that ends the forward pass: later blocks and the head are never run.
"""

from __future__ import annotations

import difflib
import re

import torch

from actkit.errors import LayerError, ModelError


class _StopForward(Exception):
    """Raised by the last hook to end the forward pass early (never escapes Capture)."""


def first_tensor(output):
    """The tensor a module returned: itself, the first element of a tuple/list, or the
    first value of a ``ModelOutput``/dict. ``None`` when there is none."""
    if isinstance(output, torch.Tensor):
        return output
    if isinstance(output, dict):  # transformers ModelOutput is an OrderedDict
        for value in output.values():
            if isinstance(value, torch.Tensor):
                return value
        return None
    if isinstance(output, (tuple, list)) and output and isinstance(output[0], torch.Tensor):
        return output[0]
    return None


def module_names(model: torch.nn.Module) -> list[str]:
    """Dotted names of every sub-module (the root module, named ``""``, excluded)."""
    return [name for name, _ in model.named_modules() if name]


# transformers 4.x module paths that transformers 5 renamed (ViT, ViTMAE...): accepted as aliases
_LEGACY = re.compile(r"^encoder\.layers?\.(\d+)((?:\..*)?)$")


def legacy_alias(name: str, known) -> str | None:
    """The current module path for a transformers 4.x path (``encoder.layer.3`` ->
    ``layers.3``), or ``None`` when there is none in ``known``."""
    m = _LEGACY.match(name)
    if m:
        target = f"layers.{m.group(1)}{m.group(2)}"
        if target in known:
            return target
    return None


def resolve_layers(model: torch.nn.Module, layers, *, model_name: str = "the model",
                   aliases: dict | None = None) -> list[str]:
    """Validate a layer selection against ``model.named_modules()``.

    Parameters
    ----------
    layers : str or sequence of str
        Dotted module paths; a string may hold several separated by commas.
    aliases : dict, optional
        When given, transformers 4.x paths (``encoder.layer.3``) of modules that
        transformers 5 renamed (``layers.3``) are accepted: ``aliases[name] = path``.

    Returns
    -------
    list of str
        The names, de-duplicated, in the order given.

    Raises
    ------
    LayerError
        A name is not a module of the model (the message lists the closest names).
    """
    if isinstance(layers, str):
        layers = [part for part in layers.split(",")]
    names = []
    for layer in layers:
        layer = str(layer).strip()
        if layer and layer not in names:
            names.append(layer)
    if not names:
        raise LayerError("no layers requested; pass --layers NAME[,NAME...] (see `actkit layers MODEL`)")
    known = module_names(model)
    known_set = set(known)
    for name in names:
        if name not in known_set and aliases is not None:
            target = legacy_alias(name, known_set)
            if target is not None:
                aliases[name] = target
                continue
        if name not in known_set:
            close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
            hint = f"; closest: {', '.join(close)}" if close else ""
            raise LayerError(
                f"unknown layer {name!r} in {model_name}{hint} (list them with `actkit layers MODEL`)"
            )
    return names


class Capture:
    """Forward hooks on named modules; optionally stop after the last one fires.

    Parameters
    ----------
    model : torch.nn.Module
    names : list of str
        Dotted module paths (already resolved).
    callback : callable ``callback(name, tensor)``
        Called with each module's output tensor (see :func:`first_tensor`) during the
        forward pass. It must copy what it keeps: later in-place operations may change
        the tensor.
    stop_early : bool
        Raise (and swallow) a private exception once every module has fired, so the
        rest of the forward pass is not computed.
    """

    def __init__(self, model, names, callback, *, stop_early: bool = True, extra_modules=None):
        self.model = model
        self.names = list(names)
        self.callback = callback
        self.stop_early = stop_early
        modules = dict(model.named_modules())
        if extra_modules:
            modules.update(extra_modules)
        self._modules = {name: modules[name] for name in self.names}
        self._handles = []
        self.fired: dict[str, int] = {}

    def __enter__(self):
        for name, module in self._modules.items():
            self._handles.append(module.register_forward_hook(self._make_hook(name)))
        return self

    def __exit__(self, *exc):
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        return False

    def _make_hook(self, name):
        def hook(module, args, output):
            self.fired[name] = self.fired.get(name, 0) + 1
            self.callback(name, first_tensor(output))
            if self.stop_early and len(self.fired) == len(self.names):
                raise _StopForward

        return hook

    def run(self, forward):
        """Call ``forward()`` with the hooks active; return ``True`` when it was stopped early."""
        self.fired = {}
        try:
            forward()
        except _StopForward:
            return True
        return False


def probe_all(model, forward, names=None, extra_modules=None):
    """Run ``forward()`` once with a hook on every module (or ``names``).

    Returns
    -------
    dict name -> (n_calls, shape or None, type name)
        Output shape of the first call (``None`` when the module returned no tensor).
        Modules that did not run are absent.
    """
    names = module_names(model) if names is None else list(names)
    seen: dict[str, list] = {}

    def callback(name, tensor):
        if name in seen:
            seen[name][0] += 1
        else:
            seen[name] = [1, None if tensor is None else tuple(tensor.shape)]

    cap = Capture(model, names, callback, stop_early=False, extra_modules=extra_modules)
    with cap:
        cap.run(forward)
    modules = {**dict(model.named_modules()), **(extra_modules or {})}
    return {n: (v[0], v[1], type(modules[n]).__name__) for n, v in seen.items()}


def probe_forward(adapter, batch, names=None, extra_modules=None):
    """:func:`probe_all` on ``adapter.forward(batch)``; a forward pass that fails on the probe
    input is one :class:`~actkit.errors.ModelError` line (not a traceback)."""
    try:
        with torch.inference_mode():
            return probe_all(adapter.model, lambda: adapter.forward(batch), names, extra_modules)
    except (RuntimeError, ValueError, TypeError, AttributeError, IndexError, KeyError) as exc:
        msg = " ".join(str(exc).split())[:200]
        if getattr(getattr(adapter.model, "config", None), "is_encoder_decoder", False):
            raise ModelError(f"{adapter.name} is an encoder-decoder ({type(adapter.model).__name__}), whose forward "
                             "pass needs decoder inputs; save its encoder alone (e.g. T5EncoderModel.from_pretrained"
                             "(PATH).save_pretrained(OUT)) and extract from that folder") from None
        raise ModelError(f"the forward pass of {adapter.name} ({type(adapter.model).__name__}) fails on a probe "
                         f"input: {type(exc).__name__}: {msg}") from None
