"""Every command accepts ``--quiet`` and says "wrote X" on stderr, never on stdout (issue 49):
stdout is the command's result (a table, a path), stderr what it did."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from actkit.cli import build_parser

COMMANDS = Path(__file__).resolve().parents[1] / "actkit" / "_commands"


def _subparsers():
    parser = build_parser()
    action = next(a for a in parser._actions if a.dest == "command")
    return action.choices


@pytest.mark.parametrize("name", sorted(_subparsers()))
def test_every_command_accepts_quiet(name):
    sub = _subparsers()[name]
    flags = {s for a in sub._actions for s in a.option_strings}
    assert "--quiet" in flags, name


def test_extract_keeps_no_progress_as_the_same_flag():
    sub = _subparsers()["extract"]
    base = ["m", "--inputs", "x.txt", "--layers", "a", "--out", "o.h5"]
    assert sub.parse_args([*base, "--no-progress"]).quiet is True
    assert sub.parse_args([*base, "--quiet"]).quiet is True
    assert sub.parse_args(base).quiet is False


def _prints_wrote_to_stdout(path):
    """``print(...)`` calls whose text starts with "wrote" and that name no ``file=``."""
    bad = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "print" and node.args):
            continue
        first = node.args[0]
        text = first.value if isinstance(first, ast.Constant) else (
            first.values[0].value if isinstance(first, ast.JoinedStr) and first.values
            and isinstance(first.values[0], ast.Constant) else "")
        if isinstance(text, str) and text.startswith("wrote") and not any(k.arg == "file" for k in node.keywords):
            bad.append(f"{path.name}:{node.lineno}")
    return bad


def test_no_command_prints_wrote_on_stdout(tmp_path):
    bad = [b for p in sorted(COMMANDS.glob("*.py")) for b in _prints_wrote_to_stdout(p)]
    assert bad == []
    probe = tmp_path / "probe.py"  # the check finds what it looks for
    probe.write_text('import sys\nprint(f"wrote {x}")\nprint("wrote y", file=sys.stderr)\n')
    assert _prints_wrote_to_stdout(probe) == ["probe.py:2"]
