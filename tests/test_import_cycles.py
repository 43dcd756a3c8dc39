"""No import cycle between modules of ``actkit/`` and ``extractors/`` (issue 22), counting the
imports inside functions, relative imports and ``importlib.import_module("...")`` with a
literal name. ``test_conventions`` checks rooms (``actkit.store`` -> ``actkit.stats``); this
checks modules, private ones included, which is where the circles ran.

No circle is known: any circle fails (KNOWN is kept for a deferred one, which may only
shrink)."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# none left: the runner seam of issue 22 took stats, the Dask passes and the store out of the
# circle, the store's private modules import one way, and a layer describes itself to the loader
KNOWN: list[set] = []


def _modules() -> dict:
    """``{dotted name: (path, is package)}``; ``extractors`` installs as ``actkit.extractors``."""
    out = {}
    for folder, name in (("actkit", "actkit"), ("extractors", "actkit.extractors")):
        for p in (REPO / folder).rglob("*.py"):
            parts = [x for x in p.relative_to(REPO / folder).with_suffix("").parts if x != "__init__"]
            out[".".join([name, *parts])] = (p, p.name == "__init__.py")
    return out


def _targets(mod, is_pkg, node, mods):
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if isinstance(node, ast.Call):  # importlib.import_module("actkit.x")
        return [node.args[0].value]
    base = mod.split(".") if is_pkg else mod.split(".")[:-1]
    if node.level:
        base = base[: len(base) - node.level + 1]
        prefix = ".".join(base + ([node.module] if node.module else []))
    else:
        prefix = node.module
    subs = [f"{prefix}.{a.name}" for a in node.names]
    known = [m for m in subs if m in mods]  # ``from pkg import submodule`` needs the submodule
    return known if len(known) == len(subs) else [prefix, *known]


def import_graph() -> dict:
    mods = _modules()
    graph = {}
    for mod, (path, is_pkg) in mods.items():
        deps = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            literal_import = (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", ""))
                              == "import_module" and node.args and isinstance(node.args[0], ast.Constant))
            if not (isinstance(node, (ast.Import, ast.ImportFrom)) or literal_import):
                continue
            for t in _targets(mod, is_pkg, node, mods):
                t = "actkit." + t if t.split(".")[0] == "extractors" else t
                while t and t not in mods:  # a name inside a module: the module
                    t = t.rpartition(".")[0]
                if t and t != mod:
                    deps.add(t)
        graph[mod] = deps
    return graph


def cycles(graph) -> list[set]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = set()
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.add(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(comp)
    return out


def test_the_checker_finds_a_cycle_through_a_function_level_import():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [{"a", "b", "c"}]
    tree = ast.parse("def f():\n    from .hf_datasets import read_hf\n")
    node = tree.body[0].body[0]
    assert _targets("actkit.extractors.inputs", False, node, _modules()) == ["actkit.extractors.hf_datasets"]


def test_no_import_cycle_but_the_deferred_one():
    found = cycles(import_graph())
    new = [sorted(c) for c in found if not any(c <= k for k in KNOWN)]
    assert not new, f"import cycle(s) (function-level imports count): {new}"
