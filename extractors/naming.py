"""Layer names that mean the same on every model: ``embed``, ``resid.{i}``, ``resid.all``, ``final_hidden``.

``embed``
    the input of block 0: the input embeddings as the first block sees them (positions,
    scaling, a pre-norm or projection included; ``output_hidden_states[0]``).
``resid.{i}``
    the raw output of block ``i`` (from 0; negative ``i`` counts from the end). For a
    decoder's last block this is *before* the final norm (which ``output_hidden_states``
    does not return). For timm models the blocks are the modules of ``model.feature_info``:
    ``resid.{i}`` is ``forward_intermediates``' intermediate ``i`` (a stage of a
    hierarchical model: ResNet's stem then ``layer1..4``, Swin's ``layers.0..3``).
``resid.all``
    every ``resid.{i}``.
``final_hidden``
    ``last_hidden_state`` (after the final norm where the model has one); for timm the
    output of ``forward_features``.

Two-tower models (CLIP) take a tower prefix: ``vision.resid.3``, ``text.final_hidden``.

The blocks are found without a list of families: the ``nn.ModuleList`` holding the most
parameters (the outermost such list on a tie) of the model or tower, so a new family with
the usual layout (an embedding, a list of blocks, a final norm) needs no code here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch

from actkit.errors import LayerError

from ._hooks import resolve_layers
from ._options import FINAL_HIDDEN
from .hf_towers import TOWERS

EMBED, RESID = "embed", "resid"
_ALIAS = re.compile(r"^(?:(?P<tower>[a-z]+)\.)?(?P<what>embed|final_hidden|resid\.(?P<i>all|-?\d+))$")


class InputTap:
    """The input of ``module``, captured like a module output (a forward pre-hook).

    :class:`~actkit.extractors._hooks.Capture` calls ``register_forward_hook`` on it; the hook
    receives the first tensor argument (or ``hidden_states=``) of ``module``'s call.
    """

    def __init__(self, module: torch.nn.Module, path: str):
        self.module = module
        self.path = path
        self.type_name = f"input of {type(module).__name__}"

    def register_forward_hook(self, hook):
        def pre(mod, args, kwargs):
            hook(mod, args, first_input(args, kwargs))

        return self.module.register_forward_pre_hook(pre, with_kwargs=True)


def first_input(args, kwargs):
    """The hidden states a block is called with: its first tensor argument."""
    for value in args:
        if isinstance(value, torch.Tensor):
            return value
    value = kwargs.get("hidden_states")
    if isinstance(value, torch.Tensor):
        return value
    return next((v for v in kwargs.values() if isinstance(v, torch.Tensor)), None)


@dataclass
class Scheme:
    """The aliases of one model (or one tower).

    Attributes
    ----------
    prefix : str
        ``""``, or ``"vision."`` / ``"text."`` for a tower.
    blocks : list of str
        Module paths of the blocks, in order (``resid.0`` first).
    final : torch.nn.Module or None
        Module whose output (first tensor) is ``final_hidden``; ``final_path`` says what it is.
    embed : bool
        Whether ``embed`` (the input of block 0) is defined.
    kind : str or None
        Input kind that runs this tower (two-tower models), else ``None``.
    """

    prefix: str
    blocks: list
    final: object = None
    final_path: str = ""
    embed: bool = True
    kind: str | None = None
    source: str = "blocks"

    def targets(self, model) -> dict:
        """``{alias: (module path, module or tap)}`` for every alias of this scheme."""
        out = {}
        if self.embed and self.blocks:
            out[self.prefix + EMBED] = (f"input of {self.blocks[0]}", InputTap(model.get_submodule(self.blocks[0]),
                                                                               self.blocks[0]))
        for i, path in enumerate(self.blocks):
            out[f"{self.prefix}{RESID}.{i}"] = (path, model.get_submodule(path))
        if self.final is not None:
            out[self.prefix + FINAL_HIDDEN] = (self.final_path, self.final)
        return out


def find_blocks(root: torch.nn.Module, prefix: str = "") -> list[str]:
    """Module paths (under ``prefix``) of the block list of ``root``: the ``nn.ModuleList``
    with the most parameters, the outermost one on a tie; ``[]`` when there is none."""
    best = None
    for path, module in root.named_modules():
        if not isinstance(module, torch.nn.ModuleList) or len(module) == 0:
            continue
        n = sum(p.numel() for p in module.parameters())
        if n == 0:
            continue
        key = (-n, path.count(".") if path else -1)
        if best is None or key < best[0]:
            best = (key, path, len(module))
    if best is None:
        return []
    base = ".".join(x for x in (prefix, best[1]) if x)
    return [f"{base}.{i}" for i in range(best[2])]


def schemes(adapter) -> list[Scheme]:
    """The alias schemes of an adapter: one, or one per tower of a two-tower model."""
    towers = getattr(adapter, "towers", None)
    if towers:
        out = []
        for tower in towers:
            attr, kind = TOWERS[tower.tower]
            sub = getattr(adapter.model, attr)
            out.append(Scheme(prefix=tower.tower + ".", blocks=find_blocks(sub, attr), final=sub,
                              final_path=f"{attr} (last_hidden_state)", kind=kind))
        return out
    own = getattr(adapter, "alias_scheme", None)
    if own is not None:
        return [own()]
    blocks = find_blocks(adapter.model)
    final, final_path = _final(adapter)
    return [Scheme(prefix="", blocks=blocks, final=final, final_path=final_path)]


def _final(adapter):
    try:
        module = adapter.final_module()
    except Exception:  # noqa: BLE001 - a model without a final hidden state
        return None, ""
    path = next((n for n, m in adapter.model.named_modules() if m is module), None)
    label = "model" if path in (None, "") else path
    return module, f"{label} (last_hidden_state)"


def alias_table(adapter) -> dict:
    """``{alias: (module path, module or tap)}`` over every scheme of ``adapter``."""
    out = {}
    for scheme in schemes(adapter):
        out.update(scheme.targets(adapter.model))
    return out


def names_of(table: dict, name: str) -> list[str]:
    """Every name of the layer ``name`` (an alias or a module path): the module path, the
    alias ``resid.i`` and its count from the end ``resid.-k``."""
    path = table[name][0] if name in table else name
    out = [path]
    for alias, (target, _) in table.items():
        if target == path:
            out.append(alias)
            m = re.match(r"^(.*resid)\.(\d+)$", alias)
            if m:
                n = sum(1 for a in table if a.startswith(m.group(1) + ".") and a[len(m.group(1)) + 1:].isdigit())
                out.append(f"{m.group(1)}.{int(m.group(2)) - n}")
    return list(dict.fromkeys(out))


def expand(adapter, layers) -> tuple[list[str], dict]:
    """Check the aliases in ``layers`` against the model; ``resid.all`` becomes every ``resid.i``.

    Returns
    -------
    names : list of str
        The requested names in order, ``resid.all`` expanded, de-duplicated.
    table : dict
        :func:`alias_table` (``{alias: (module path, module or tap)}``) with negative indexes
        and ``resid.all`` resolved.

    Raises
    ------
    LayerError
        An alias this model does not have (with the names that replace it).
    """
    names = []
    table = alias_table(adapter)
    modules = {n for n, _ in adapter.model.named_modules()}
    for layer in layers:
        m = _ALIAS.match(layer)
        if m is None:
            names.append(layer)
            continue
        tower = m.group("tower")
        prefix = f"{tower}." if tower else ""
        if layer not in table and (layer in modules or (tower and not any(a.startswith(prefix) for a in table))):
            names.append(layer)  # a module path that looks like an alias (``foo.embed``)
            continue
        blocks = [a for a in table if a.startswith(prefix + RESID + ".")]
        if table and not tower and not any(a.startswith((RESID, EMBED, FINAL_HIDDEN)) for a in table):
            towers = sorted({a.split(".")[0] for a in table})
            raise LayerError(f"{adapter.name} has {len(towers)} towers: prefix the layer with one "
                             f"({', '.join(t + '.' + layer for t in towers)})")
        if not table or (m.group("i") is not None and not blocks):
            raise LayerError(f"{layer!r}: actkit finds no list of blocks in {adapter.name} "
                             f"({type(adapter.model).__name__}); pass module paths instead, e.g. --layers "
                             f"{_examples(adapter.model)} (`actkit layers MODEL` lists them all)")
        own = getattr(adapter, "tower", None)
        if tower and own and tower != own:
            raise LayerError(f"layer {layer!r} is in the {tower} tower of {adapter.name}, but {adapter.kind} inputs "
                             f"run the {own} tower")
        i = m.group("i")
        if i == "all":
            names.extend(blocks)
            continue
        if i is not None:
            k = int(i)
            if not -len(blocks) <= k < len(blocks):
                raise LayerError(f"layer {layer!r}: {adapter.name} has {len(blocks)} blocks "
                                 f"({prefix}resid.0 to {prefix}resid.{len(blocks) - 1}, or {prefix}resid.-1 to {prefix}resid.-{len(blocks)})")
            table[layer] = table[f"{prefix}{RESID}.{k % len(blocks)}"]
        elif layer not in table:
            what = "embedding input" if m.group("what") == EMBED else "final hidden state"
            raise LayerError(f"actkit finds no {what} in {adapter.name} ({layer!r}); pass a module path instead "
                             f"(`actkit layers MODEL` lists them)")
        names.append(layer)
    return list(dict.fromkeys(names)), table


def _examples(model) -> str:
    """A few module paths worth extracting: the top-level children that hold parameters."""
    kids = [n for n, c in model.named_children() if any(True for _ in c.parameters())]
    return ",".join(kids[:4]) or "NAME"


def resolve_names(adapter, layers, final_hidden=False):
    """Layer names -> ``(names, extra modules, module path of each, every name of each)``.

    A name is a module path (or a transformers 4.x path, :func:`~._hooks.legacy_alias`) or
    an alias of :mod:`.naming` (``embed``, ``resid.3``, ``resid.all``, ``final_hidden``,
    ``vision.resid.3``); ``final_hidden=True`` adds ``final_hidden``.
    """
    if isinstance(layers, str):
        layers = layers.split(",")
    requested = [str(name).strip() for name in layers if str(name).strip()]
    if final_hidden:
        tower = getattr(adapter, "tower", None)
        requested.append(f"{tower}.{FINAL_HIDDEN}" if tower else FINAL_HIDDEN)
    names, table = expand(adapter, list(dict.fromkeys(requested)))
    paths = [name for name in names if name not in table]
    legacy = {}  # transformers 4.x names -> current module paths
    if paths:
        resolve_layers(adapter.model, paths, model_name=adapter.name, aliases=legacy)
    extra = {name: adapter.model.get_submodule(path) for name, path in legacy.items()}
    extra.update({name: table[name][1] for name in names if name in table})
    modules_of = {name: table[name][0] if name in table else legacy.get(name, name) for name in names}
    aliases_of = {name: [a for a in names_of(table, modules_of[name]) if a not in (name, modules_of[name])]
                  for name in names}
    return names, extra, modules_of, aliases_of
