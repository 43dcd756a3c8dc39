"""The house plan of actkit, read from the source: every module's imports (function-level ones,
relative ones, ``importlib.import_module`` with a literal name and the names that the lazy
facades resolve included), the rooms they belong to, and the room table of
``docs/architecture.md``.

``python -m actkit._architecture`` prints the room table; ``tests/test_architecture.py``
fails when the table in the document and the one printed here differ, and checks the graph
(no circle between files or rooms, no room importing a room above it, no import of another
room's private module beyond a short allow-list). Only the standard library is used: the
source is parsed, nothing is imported.
"""

from __future__ import annotations

import ast
from pathlib import Path

__all__ = ["FLOORS", "HANDOFFS", "ROOT", "Import", "cycles", "import_graph", "imports", "is_private_of_other", "modules",
           "room_graph", "room_of", "room_table", "rooms"]

ROOT = Path(__file__).resolve().parents[1]

# The floors, bottom first, and their rooms in order: a room may import the rooms listed before
# it (its own modules too), nothing listed after it -- but for the HANDOFFS below. A room is one
# or more top-level modules or packages of ``actkit/`` (``actkit.extractors`` is
# ``extractors/``); the private modules of a package (``actkit.store._layer``) belong to its room
# and nobody else imports them (the test keeps a short allow-list). Each room:
# (name, its top-level modules, what it holds).
FLOORS: list = [
    ("ground: the shared helpers", [
        ("errors", ["actkit.errors"],
         "`ActkitError` and its subclasses: a user mistake, one line at the CLI"),
        ("helpers", ["actkit._rows", "actkit._threads", "actkit._device", "actkit._atomic", "actkit._h5",
                     "actkit._faults", "actkit._progress", "actkit._versions", "actkit._lazy", "actkit._architecture", "actkit._warn", "actkit._frames",
                     "actkit._pipes", "actkit._groups", "actkit._matching", "actkit._json", "actkit._signals"],
         "one idea each: row blocks and `sample_rows` (`_rows`), rows as input samples: lengths, "
         "re-pairings, draws, a clustered standard error (`_groups`), the one-to-one matching of two sets of columns (`_matching`), numpy values as "
         "JSON, NaN as null (`_json`), "
         "the thread budget, torch devices, atomic "
         "files, opening HDF5 for reading, fault injection for tests, progress bars, library versions, "
         "lazy attributes, this plan, warnings that point at the user's line (`_warn`), pandas for `to_frame()` and "
         "notebook tables (`_frames`), a pipe whose reader has gone (`_pipes`), SIGTERM ending a command "
         "(`_signals`)"),
        ("actkit", ["actkit"],
         "the package: `__version__` and the lazy public names (`_LAZY`, resolved where they are used)"),
    ]),
    ("data at rest", [
        ("store", ["actkit.store"],
         "the only code that knows the HDF5 layout: create, write, resume, read, verify, shards; "
         "a layer described by paths (`Source`) for other processes"),
        ("zoo", ["actkit.zoo"], "the shipped checkpoints (the training half runs only as `python -m actkit.zoo`)"),
    ]),
    ("rows", [
        ("data", ["actkit._data"],
         "any row source (numpy, torch, h5py, store layer, embedding file) read in blocks, prefetched"),
        ("matrix_files", ["actkit.matrix_files"],
         "embedding files (`.npy`, `.safetensors`, `.parquet`) as a one-layer read-only store; `actkit import`"),
    ]),
    ("where a pass runs", [
        ("runners", ["actkit.runners"],
         "`RowPass` and its runners: this process (threads) or Dask (chunked arrays, futures, task lists)"),
    ]),
    ("statistics, parameters, the loader", [
        ("stats", ["actkit.stats"], "mergeable streaming moments: `RunningMoments`, `CrossMoments`"),
        ("params", ["actkit._params"], "hyperparameter and input validation of the estimators"),
        ("loader", ["actkit.loader"],
         "stores as torch training data: `ActivationDataset`, `DataLoader`, the read plan, the workers' ring"),
    ]),
    ("estimators", [
        ("whitening", ["actkit.whitening"], "`Whitener`: PCA / ZCA whitening from streamed moments"),
        ("ica", ["actkit.ica"], "`FastICA` (Picard-O, fixed point), its reduction and its rows rule"),
        ("dictionary", ["actkit.dictionary"], "`SparseDictionary`: top-k / L1 dictionary learning; `dictionary_stability`"),
        ("sae", ["actkit.sae"], "the community's sparse autoencoders (SAELens, sparsify) as estimators: "
         "`load_sae`, `save_sae`, `sae_metrics`"),
    ]),
    ("measuring and comparing", [
        ("measures", ["actkit.measures"],
         "the measure protocol (`Measure`, `Moments`, the registry) and one module per similarity measure"),
        ("inference", ["actkit.inference"],
         "permutation p-values and bootstrap intervals by input sample: per-sample blocks, re-weighted or re-paired"),
        ("metrics", ["actkit.metrics"], "CKA, CCA, R^2, Amari, MCC, Hoyer, InfoMEC, softmax distances"),
        ("units", ["actkit._units"],
         "`units`, `match_units`, `UnitReport`, `UnitMatch`: what each unit of any basis responds to (top-k, "
         "bands, histograms, moments in one pass of declared states; logit lens; label selectivity; matched units); "
         "per-unit token scores; `compare_bases`, `BasisComparison`: bases side by side"),
        ("alignment", ["actkit.alignment"],
         "`align`, `compare` (its steps: `alignment.steps`), `compare_many` (and their task lists), "
         "`compare_stores` / `compare_store_matrix` (what `actkit compare` prints and writes), maps, splits, "
         "`CompareResult`, tables"),
        ("evaluation", ["actkit.evaluation"], "the downstream protocol of `actkit evaluate` and its result"),
    ]),
    ("outputs", [
        ("derived", ["actkit._derived"], "`transform_store`: a fitted transform of a layer written as a store"),
        ("export", ["actkit.export"], "`export_store`: a store as parquet / a Hugging Face dataset"),
        ("report", ["actkit.report"], "figures of a comparison, an ICA, an evaluation"),
        ("pages", ["actkit.pages"], "one self-contained HTML page per result (compare, evaluate, units): "
         "templates, CSS and JavaScript as package files, the data as inert JSON"),
    ]),
    ("models", [
        ("extractors", ["actkit.extractors"],
         "model adapters, hooks, inputs, the extraction driver: the only code that imports transformers and timm"),
    ]),
    ("jobs", [
        ("sweep", ["actkit.sweep"], "`actkit sweep`: the checkpoints of a training run, extracted and compared"),
        ("pipeline", ["actkit.pipeline"], "`compare_models`: extract two models, then compare"),
        ("demo", ["actkit.demo"], "`actkit demo`: the Table 1 protocol on the zoo"),
        ("synthetic", ["actkit.synthetic"], "data-generating processes and the paper reproductions"),
    ]),
    ("presentation", [
        ("cli", ["actkit.cli", "actkit._commands", "actkit.__main__"],
         "argparse and one module per sub-command, each a thin shell over one public call"),
    ]),
]

# The only imports of a room above: conveniences that hand an object to the room that consumes
# it, late (inside the method), so that nothing below imports them at import time.
# (module, function) -> room it hands over to.
HANDOFFS = {
    ("actkit.store._layer", "Layer.to_dask"): "runners",
    ("actkit.store._layer", "Layer.to_torch"): "loader",
    ("actkit.matrix_files._files", "MatrixLayer.to_dask"): "runners",
    ("actkit.matrix_files._files", "MatrixLayer.to_torch"): "loader",
    ("actkit._units._api", "_inputs"): "extractors",
    ("actkit._units._api", "_labels"): "evaluation",
    ("actkit._units._report", "UnitReport.to_html"): "pages",
    ("actkit._units._report", "UnitReport._repr_html_"): "pages",
    ("actkit._units._comparison", "BasisComparison.to_html"): "pages",
    ("actkit.alignment._stores", "StoreComparison.to_html"): "pages",
    ("actkit.alignment._stores", "StoreMatrices.to_html"): "pages",
}


def rooms() -> list:
    """``[(floor, room, members, holds)]``, bottom first."""
    return [(floor, name, members, holds) for floor, group in FLOORS for name, members, holds in group]


def room_of(module: str) -> str:
    """The room of a module: ``actkit.store._layer`` -> ``store``, ``actkit.cli`` -> ``cli``
    (``"?"`` for a module that no room holds)."""
    for _floor, name, members, _holds in rooms():
        if any(module == m or module.startswith(m + ".") for m in members if m != "actkit"):
            return name
    return "actkit" if module == "actkit" else "?"


def is_private_of_other(importer: str, written: str) -> bool:
    """Whether ``written`` (an import as written: module path and name) reaches into a private
    module or name of a room other than ``importer``'s (``actkit.store._source``,
    ``actkit.metrics._similarity.rank_cut``). The top-level private modules (``actkit._rows``,
    ``actkit._params``) are the house's shared helpers, private to actkit, not to a room."""
    room = room_of(importer)
    parts = written.split(".")
    for k in range(2, len(parts)):
        if parts[k].startswith("_") and not parts[k].startswith("__"):
            return room_of(".".join(parts[:k])) != room
    return False


def modules(root: Path = ROOT) -> dict:
    """``{dotted name: (path, is package)}`` of every module of ``actkit/`` and ``extractors/``
    (installed as ``actkit.extractors``)."""
    out = {}
    for folder, name in (("actkit", "actkit"), ("extractors", "actkit.extractors")):
        for p in sorted((root / folder).rglob("*.py")):
            parts = [x for x in p.relative_to(root / folder).with_suffix("").parts if x != "__init__"]
            out[".".join([name, *parts])] = (p, p.name == "__init__.py")
    return out


def _lazy_tables(mods: dict) -> dict:
    """``{package: ({name: module}, submodule names)}`` of every package whose ``__init__``
    calls ``lazy_attributes(__name__, names, modules)``."""
    out = {}
    for mod, (path, is_pkg) in mods.items():
        if not is_pkg:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        assigned = {t.id: node.value for node in tree.body if isinstance(node, ast.Assign)
                    for t in node.targets if isinstance(t, ast.Name)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "lazy_attributes":
                args = [assigned.get(a.id, a) if isinstance(a, ast.Name) else a for a in node.args[1:]]
                names = ast.literal_eval(args[0]) if args else {}
                subs = ast.literal_eval(args[1]) if len(args) > 1 else ()
                out[mod] = (dict(names), tuple(subs))
    return out


def _resolve(target: str, attrs: list, mods: dict, lazy: dict) -> str | None:
    """The module that defines ``target.attrs[0].attrs[1]...`` (as far as it is known)."""
    cur = target
    while cur and cur not in mods:  # ``pkg.module.name``: the module
        cur = cur.rpartition(".")[0]
    if not cur:
        return None
    for a in attrs:
        if f"{cur}.{a}" in mods:
            cur = f"{cur}.{a}"
        elif cur in lazy and a in lazy[cur][0]:
            cur = lazy[cur][0][a]
            while cur not in mods:
                cur = cur.rpartition(".")[0]
        else:
            break
    return cur


def _attr_chain(node):
    """``a.b.c`` -> ("a", ["b", "c"]), or None."""
    attrs = []
    while isinstance(node, ast.Attribute):
        attrs.append(node.attr)
        node = node.value
    return (node.id, attrs[::-1]) if isinstance(node, ast.Name) else None


class Import:
    """One import: the module it reaches, as written (``actkit.store._source.Source``), its line
    and the function it sits in (``Layer.to_torch``; ``""`` at module level)."""

    __slots__ = ("target", "written", "line", "scope")

    def __init__(self, target, written, line, scope):
        self.target, self.written, self.line, self.scope = target, written, line, scope

    def __repr__(self):
        return f"{self.written} (line {self.line}{', in ' + self.scope if self.scope else ''})"


def _scopes(tree) -> dict:
    """``{id(node): qualified name of the function or class it sits in}``."""
    out = {}

    def visit(node, scope):
        for child in ast.iter_child_nodes(node):
            inner = scope
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                inner = f"{scope}.{child.name}" if scope else child.name
            out[id(child)] = inner
            visit(child, inner)

    visit(tree, "")
    return out


def _edges(mod: str, path: Path, is_pkg: bool, mods: dict, lazy: dict) -> list:
    """The :class:`Import` records of one module."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    scope = _scopes(tree)
    package = mod if is_pkg else mod.rpartition(".")[0]
    out: list = []
    bound: dict = {}  # local name -> module (``import actkit``, ``import actkit.x as y``)

    def add(target, attrs, node):
        target = "actkit." + target if target.split(".")[0] == "extractors" else target
        if not target.startswith("actkit"):
            return
        found = _resolve(target, attrs, mods, lazy)
        if found and found != mod:
            out.append(Import(found, ".".join([target, *attrs]), node.lineno, scope.get(id(node), "")))

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                add(a.name, [], node)
                bound[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module
            for a in node.names:
                if a.name == "*":
                    add(source, [], node)
                    continue
                add(source, [a.name], node)
                if f"{source}.{a.name}" in mods:
                    bound[a.asname or a.name] = f"{source}.{a.name}"
        elif (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None))
              == "import_module" and node.args):
            arg = node.args[0]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                add(arg.value, [], node)
            elif isinstance(arg, ast.JoinedStr) and arg.values and isinstance(arg.values[0], ast.Constant):
                prefix = arg.values[0].value  # f"actkit._commands.{name}": every public module under it
                for m in mods:
                    rest = m[len(prefix):]
                    if m.startswith(prefix) and rest and not rest.startswith("_"):
                        add(m, [], node)
    for node in ast.walk(tree):  # ``actkit.open_store``, ``actkit.metrics.linear_cka`` after ``import actkit``
        chain = _attr_chain(node) if isinstance(node, ast.Attribute) else None
        if chain and chain[0] in bound:
            add(bound[chain[0]], chain[1], node)
    return out


def imports(root: Path = ROOT) -> dict:
    """``{module: [Import, ...]}`` for every module of ``actkit/`` and ``extractors/``."""
    mods = modules(root)
    lazy = _lazy_tables(mods)
    return {m: _edges(m, p, pkg, mods, lazy) for m, (p, pkg) in mods.items()}


def import_graph(root: Path = ROOT) -> dict:
    """``{module: {imported module, ...}}`` for every module of ``actkit/`` and ``extractors/``."""
    return {m: {i.target for i in found} for m, found in imports(root).items()}


def cycles(graph: dict) -> list[set]:
    """The strongly connected components of more than one node (Tarjan, iterative)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]
    for root in sorted(graph):
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
                if w not in graph:
                    continue
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


def room_graph(found: dict | None = None, handoffs: bool = False) -> dict:
    """``{room: {room it imports, ...}}`` (the hand-offs left out unless ``handoffs``)."""
    found = imports() if found is None else found
    out = {name: set() for _f, name, _m, _h in rooms()}
    for mod, records in found.items():
        me = room_of(mod)
        for i in records:
            other = room_of(i.target)
            if other != me and (handoffs or (mod, i.scope) not in HANDOFFS):
                out.setdefault(me, set()).add(other)
    return out


def room_table(found: dict | None = None) -> str:
    """The room table of ``docs/architecture.md``: floors bottom first, what each room holds,
    which rooms it imports (read from the code; ``->`` a hand-off to a room above)."""
    graph = room_graph(found)
    order = [name for _f, name, _m, _h in rooms()]
    ups = {}
    for (mod, func), room in HANDOFFS.items():
        ups.setdefault(room_of(mod), []).append(f"-> `{room}` (`{func.split('.')[-1]}`)")
    lines = ["| floor | room | modules | holds | imports (from the code) |", "| --- | --- | --- | --- | --- |"]
    for n, (floor, group) in enumerate(FLOORS):
        for name, members, holds in group:
            mods = ", ".join(f"`{m.replace('actkit.extractors', 'extractors/')}`" for m in members)
            deps = [f"`{d}`" for d in sorted(graph.get(name, ()), key=order.index)]
            deps += sorted(set(ups.get(name, [])))
            lines.append(f"| {n} {floor} | `{name}` | {mods} | {holds} | {', '.join(deps) or '(nothing of actkit)'} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(room_table(), end="")
