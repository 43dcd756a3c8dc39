"""The house plan (issue 35): the import graph read from the source -- every ``import``, those
inside functions, relative ones, ``importlib.import_module`` and the names the lazy facades
resolve (``actkit.open_store``, ``actkit.metrics.linear_cka``) -- has no circle between files
or rooms, no room imports a room above it (but the documented hand-offs), no room reaches into
another room's private modules (but the allow-list below), and ``docs/architecture.md``'s room
table is the one ``python -m actkit._architecture`` prints."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from actkit import _architecture as arch

REPO = Path(__file__).resolve().parents[1]

# (importer, private module of another room) -> why it may. Keep it short; it may only shrink.
ALLOWED_PRIVATE = {
    ("actkit.report", "actkit.evaluation._result"):
        "the evaluation figure draws the result's own row, metric and title tables",
    ("actkit.export", "actkit.evaluation._labels"):
        "an export writes the label columns under the store parameter name the labels reader defines",
}


@pytest.fixture(scope="module")
def found():
    return arch.imports()


def _without_handoffs(found):
    return {m: {i.target for i in recs if (m, i.scope) not in arch.HANDOFFS} for m, recs in found.items()}


# ----------------------------------------------------------------------------- the checker itself
def _tree(tmp_path, files):
    for rel, text in files.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text))
    (tmp_path / "extractors").mkdir(exist_ok=True)
    return tmp_path


def test_the_checker_sees_through_the_lazy_facade_and_function_level_imports(tmp_path):
    root = _tree(tmp_path, {
        "actkit/__init__.py": """
            from actkit._lazy import lazy_attributes
            _LAZY = {"open_store": "actkit.store._reader"}
            __getattr__, __dir__, __all__ = lazy_attributes(__name__, _LAZY, ("runners",))
            """,
        "actkit/_lazy.py": "",
        "actkit/store/__init__.py": "",
        "actkit/store/_reader.py": "",
        "actkit/store/_layer.py": """
            def to_dask(self):
                from actkit.runners._dask import from_h5
            """,
        "actkit/runners/__init__.py": "",
        "actkit/runners/_dask.py": """
            def task(path):
                import actkit
                return actkit.open_store(path)
            """,
        "actkit/sweep.py": """
            import importlib
            def f():
                importlib.import_module("actkit.runners._dask")
            """,
    })
    found = arch.imports(root)
    dask = {i.target: i for i in found["actkit.runners._dask"]}
    assert "actkit.store._reader" in dask and dask["actkit.store._reader"].written == "actkit.open_store"
    assert dask["actkit.store._reader"].scope == "task"
    assert [i.target for i in found["actkit.store._layer"]] == ["actkit.runners._dask"]
    assert [i.scope for i in found["actkit.store._layer"]] == ["to_dask"]
    assert "actkit.runners._dask" in {i.target for i in found["actkit.sweep"]}
    graph = arch.import_graph(root)
    graph["actkit.store._reader"] = {"actkit.store._layer"}  # the reader builds layers
    assert arch.cycles(graph) == [{"actkit.store._reader", "actkit.store._layer", "actkit.runners._dask"}]
    assert arch.is_private_of_other("actkit.store._layer", "actkit.runners._dask.from_h5")
    assert not arch.is_private_of_other("actkit.store._layer", "actkit.runners.chunked_rows")
    assert not arch.is_private_of_other("actkit.store._layer", "actkit.store._format.FORMAT")  # its own room
    assert not arch.is_private_of_other("actkit.ica._source", "actkit._rows.sample_rows")  # a shared helper


# ----------------------------------------------------------------------------- the house
def test_every_module_has_a_room(found):
    assert not [m for m in found if arch.room_of(m) == "?"], "add the module's room to actkit/_architecture.py"


def test_no_circle_between_files(found):
    assert arch.cycles(_without_handoffs(found)) == []


def test_no_circle_between_rooms(found):
    assert arch.cycles(arch.room_graph(found)) == []


def test_no_room_imports_a_room_above_it(found):
    order = [name for _f, name, _m, _h in arch.rooms()]
    bad = []
    for mod, recs in found.items():
        me = order.index(arch.room_of(mod))
        for i in recs:
            if order.index(arch.room_of(i.target)) > me and (mod, i.scope) not in arch.HANDOFFS:
                bad.append(f"{mod} -> {i}")
    assert not bad, "imports of a room above (docs/architecture.md, the floors):\n" + "\n".join(bad)


def test_the_handoffs_are_late_imports_in_the_named_methods_only(found):
    for (mod, func), room in arch.HANDOFFS.items():
        recs = [i for i in found[mod] if i.scope == func and arch.room_of(i.target) == room]
        assert recs, f"hand-off {mod}:{func} -> {room} is gone: remove it from HANDOFFS"
        assert all(not any(p.startswith("_") for p in i.written.split(".")[2:]) for i in recs), recs


def test_the_store_is_the_bottom_floor(found):
    """The store imports nothing of runners, alignment, metrics, loader or compare (but the two
    hand-offs, Layer.to_dask and Layer.to_torch)."""
    for mod, recs in found.items():
        if arch.room_of(mod) != "store":
            continue
        for i in recs:
            if (mod, i.scope) not in arch.HANDOFFS:
                assert arch.room_of(i.target) in ("store", "errors", "helpers"), f"{mod} -> {i}"


def test_no_import_of_another_rooms_private_module_beyond_the_allow_list(found):
    seen, bad = set(), []
    for mod, recs in found.items():
        for i in recs:
            if arch.is_private_of_other(mod, i.written):
                parts = i.written.split(".")
                first = next(k for k in range(1, len(parts)) if parts[k].startswith("_"))
                key = (mod, ".".join(parts[: first + 1]))
                if key in ALLOWED_PRIVATE:
                    seen.add(key)
                else:
                    bad.append(f"{mod} -> {i}")
    assert not bad, "imports of another room's private module (use its public name):\n" + "\n".join(bad)
    assert seen == set(ALLOWED_PRIVATE), f"stale allow-list entries: {set(ALLOWED_PRIVATE) - seen}"
    assert len(ALLOWED_PRIVATE) <= 5


def test_no_import_module_with_a_literal_actkit_name():
    """``importlib.import_module("actkit.x")`` hid an import from the rules (``sweep``); write
    it as an import. (The CLI loads its sub-commands by name: an f-string.)"""
    for path in sorted([*(REPO / "actkit").rglob("*.py"), *(REPO / "extractors").rglob("*.py")]):
        text = path.read_text(encoding="utf-8")
        assert not re.search(r"import_module\(\s*[\"']actkit", text), path


def test_no_private_module_of_another_library():
    """No ``from sklearn.utils._param_validation import ...`` or the like: private modules of other
    libraries change without notice."""
    pattern = re.compile(r"^\s*(?:from|import)\s+(?!actkit\b|extractors\b|\.)([\w.]*\._[a-z]\w*)", re.M)
    bad = []
    for path in sorted([*(REPO / "actkit").rglob("*.py"), *(REPO / "extractors").rglob("*.py")]):
        bad += [f"{path.relative_to(REPO)}: {m}" for m in pattern.findall(path.read_text(encoding="utf-8"))]
    assert not bad, bad


# ----------------------------------------------------------------------------- the document
def test_the_room_table_of_the_document_is_the_code_s():
    doc = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    begin, end = "<!-- room table: python -m actkit._architecture -->", "<!-- end of room table -->"
    assert begin in doc and end in doc
    table = doc.split(begin, 1)[1].split(end, 1)[0].strip("\n") + "\n"
    assert table == arch.room_table(), "docs/architecture.md is stale: paste `python -m actkit._architecture`"


def test_the_module_prints_the_table():
    out = subprocess.run([sys.executable, "-m", "actkit._architecture"], capture_output=True, text=True,
                         cwd=REPO, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout == arch.room_table()


# ----------------------------------------------------------------------------- import cost
# every module of actkit/ and extractors/ (issue 35): an import stays inside a function only for an
# optional dependency, a measured import cost or a hand-off to a room above, and says which on its line
REVIEWED = ["actkit", "extractors"]


def test_imports_inside_functions_carry_a_reason():
    import ast

    bad = []
    for entry in REVIEWED:
        path = REPO / entry
        for p in sorted(path.rglob("*.py") if path.is_dir() else [path]):
            lines = p.read_text(encoding="utf-8").splitlines()
            for f in ast.walk(ast.parse("\n".join(lines))):
                if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    bad += [f"{p.relative_to(REPO)}:{n.lineno}: {lines[n.lineno - 1].strip()}" for n in ast.walk(f)
                            if isinstance(n, (ast.Import, ast.ImportFrom)) and "#" not in lines[n.lineno - 1]]
    assert not bad, "move these imports to the module top, or say why they are late:\n" + "\n".join(sorted(set(bad)))


@pytest.mark.parametrize("module", ["actkit", "actkit.store", "actkit.loader", "actkit.matrix_files",
                                    "actkit.alignment", "actkit.cli"])
def test_import_stays_cheap(module):
    code = (f"import sys, {module}\n"
            "print(sorted(m for m in ('torch', 'transformers', 'timm') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", f"import {module} imports {out.stdout.strip()}"


def test_every_name_and_path_the_document_mentions_exists():
    import importlib

    doc = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    names = sorted(set(re.findall(r"`(actkit(?:\.\w+)+)`", doc)))
    assert len(names) > 20
    for name in names:
        if name == "actkit.__main__":  # importing it runs the CLI
            assert (REPO / "actkit" / "__main__.py").is_file()
            continue
        parts = name.split(".")
        for k in range(len(parts), 0, -1):
            try:
                obj = importlib.import_module(".".join(parts[:k]))
                break
            except ModuleNotFoundError:
                continue
        for attr in parts[k:]:
            assert hasattr(obj, attr), f"docs/architecture.md names {name}, which does not exist"
            obj = getattr(obj, attr)
    paths = sorted(set(re.findall(r"`((?:actkit|extractors|tests|docs|benchmarks)/[\w/.]*)`", doc)))
    assert paths and all((REPO / p).exists() for p in paths), [p for p in paths if not (REPO / p).exists()]


# ----------------------------------------------------------------------------- function length
# Issue 43: no function of actkit/ or extractors/ runs past MAX_LINES lines of code. Lines of code
# of a function (a def or async def anywhere: module level, a method, a nested function, each under
# its qualified name "path:Class.method" / "path:outer.inner"): the lines from its first statement
# after its docstring to its last line that are neither blank nor only a comment, and not inside a
# docstring (its own, or one of a function or class nested in it). The signature, the decorators
# and the docstring do not count; a nested function counts in its own right AND within its parent
# (the parent is what one reads from top to bottom: a closure does not make it shorter).
MAX_LINES = 80
# "path:qualname" -> why it may run longer for now. It may only shrink: an entry that fits
# MAX_LINES again must go, and no entry is ever added without the lead's word.
LONG_FUNCTIONS = {
}


def _docstring_lines(node) -> set:
    """Line numbers of every docstring in ``node`` (its own and those of nested defs/classes)."""
    import ast

    lines = set()
    for n in ast.walk(node):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.body:
            first = n.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                    and isinstance(first.value.value, str):
                lines.update(range(first.lineno, first.end_lineno + 1))
    return lines


def function_lengths(root=REPO, folders=("actkit", "extractors")) -> dict:
    """``{"path:qualname": lines of code}`` of every function under ``folders`` of ``root``
    (the definition above; where one qualified name is defined twice, the longer)."""
    import ast

    out = {}
    for folder in folders:
        for path in sorted((Path(root) / folder).rglob("*.py")):
            text = path.read_text(encoding="utf-8").splitlines()
            rel = path.relative_to(root).as_posix()

            def visit(node, prefix):
                for child in ast.iter_child_nodes(node):
                    if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        name = f"{prefix}{child.name}"
                        skip = _docstring_lines(child)
                        n = sum(1 for i in range(child.body[0].lineno, child.end_lineno + 1)
                                if i not in skip and text[i - 1].strip()
                                and not text[i - 1].strip().startswith("#"))
                        out[f"{rel}:{name}"] = max(n, out.get(f"{rel}:{name}", 0))
                        visit(child, name + ".")
                    elif isinstance(child, ast.ClassDef):
                        visit(child, f"{prefix}{child.name}.")
                    else:
                        visit(child, prefix)

            visit(ast.parse("\n".join(text)), "")
    return out


def test_the_line_counter_counts_code_not_docstrings_comments_or_blanks(tmp_path):
    _tree(tmp_path, {"actkit/m.py": '''
        def f(x):
            """Docstring,

            three lines."""
            # a comment
            y = x + 1   # code with a comment counts

            def inner(z):
                """Not counted, in inner nor in f."""
                return z
            s = """a string
            that is not a docstring"""
            return inner(y), s


        class C:
            """A class."""

            @property
            def g(self):
                return 1
        '''})
    assert function_lengths(tmp_path, ("actkit",)) == {
        "actkit/m.py:f": 6, "actkit/m.py:f.inner": 1, "actkit/m.py:C.g": 1}


def test_no_function_runs_past_80_lines_of_code():
    """Split a long function into named steps, each a function with a docstring that states its
    inputs and outputs (docs/architecture.md, "Short functions")."""
    lengths = function_lengths()
    long = {name: n for name, n in lengths.items() if n > MAX_LINES}
    bad = sorted(f"{name}: {n} lines" for name, n in long.items() if name not in LONG_FUNCTIONS)
    assert not bad, f"functions over {MAX_LINES} lines of code (split them into named steps):\n" + "\n".join(bad)
    gone = sorted(name for name in LONG_FUNCTIONS if name not in lengths)
    assert not gone, f"allow-list entries that name no function (remove them): {gone}"
    fit = sorted(f"{name}: {lengths[name]} lines" for name in LONG_FUNCTIONS if name not in long)
    assert not fit, f"allow-list entries now within {MAX_LINES} lines (remove them):\n" + "\n".join(fit)
    assert all(reason.strip() for reason in LONG_FUNCTIONS.values())
    assert len(LONG_FUNCTIONS) <= 5


# ----------------------------------------------------------------------------- module length
# Issue 51: no module of actkit/ or extractors/ runs past MAX_MODULE_LINES lines (every line of the
# file, as ``wc -l`` counts them: one idea a module, split where it grows), as the functions keep
# to MAX_LINES. No allow-list.
MAX_MODULE_LINES = 500


def module_lengths(root=REPO, folders=("actkit", "extractors")) -> dict:
    """``{path: lines}`` of every ``.py`` file under ``folders`` of ``root`` (newlines counted,
    a last line without one included)."""
    out = {}
    for folder in folders:
        for path in sorted((Path(root) / folder).rglob("*.py")):
            text = path.read_text(encoding="utf-8")
            out[path.relative_to(root).as_posix()] = text.count("\n") + (1 if text and not text.endswith("\n") else 0)
    return out


def test_the_module_counter_counts_every_line(tmp_path):
    _tree(tmp_path, {"actkit/m.py": "a = 1\n\n# c\n", "extractors/e.py": "x = 2"})
    (tmp_path / "actkit" / "n.py").write_text("\n" * 501, encoding="utf-8")
    assert module_lengths(tmp_path) == {"actkit/m.py": 3, "actkit/n.py": 501, "extractors/e.py": 1}


def test_no_module_runs_past_500_lines():
    """Split a module that grows past 500 lines by its ideas (issue 51: ``measures/_structures.py``
    lost its kNN structures, ``_commands/compare.py`` its options)."""
    long = sorted(f"{p}: {n} lines" for p, n in module_lengths().items() if n > MAX_MODULE_LINES)
    assert not long, f"modules over {MAX_MODULE_LINES} lines (split them by their ideas):\n" + "\n".join(long)


def test_compare_reads_as_its_steps():
    """``compare()`` is a short sequence of named steps (issue 43): its body, docstring aside,
    under 60 lines; each step a function of ``actkit.alignment.steps`` (issue 51: not the
    package top) with a docstring, reachable without going through ``compare()``."""
    import inspect

    import actkit.alignment as alignment
    from actkit.alignment import steps as step_module

    assert function_lengths()["actkit/alignment/_compare.py:compare"] < 60
    steps = ["resolve_request", "split_by_sample", "moment_pass", "fit_maps", "heldout_errors",
             "ica_report", "similarities", "matched_sources", "resample", "result_info", "result"]
    source = inspect.getsource(inspect.unwrap(alignment.compare))
    at = [source.index(f"{step}(") for step in steps]
    assert at == sorted(at), "compare() calls its steps in the order actkit.alignment.steps lists them"
    for step in steps:
        fn = getattr(step_module, step)
        assert not hasattr(alignment, step) or step == "steps", step       # not at the package top
        assert len(inspect.getdoc(fn) or "") > 40, step


def test_the_architecture_document_names_compares_steps_in_order():
    """docs/architecture.md, "compare's steps", lists compare's steps in the order they run."""
    text = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = text[text.index("### compare's steps"):]
    steps = ["resolve_request", "split_by_sample", "moment_pass", "fit_maps", "heldout_errors",
             "ica_report", "similarities", "matched_sources", "resample", "result_info", "result"]
    at = [section.index(f"`{step}`") for step in steps]
    assert at == sorted(at)
