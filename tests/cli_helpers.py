"""Helpers shared by the CLI tests: run ``actkit`` in-process and check one-line errors."""

from __future__ import annotations

from actkit.cli import main


def run_cli(capsys, *argv):
    """Run ``actkit ARGV...`` in this process; returns ``(exit code, stdout, stderr)``."""
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def cli_error(capsys, *argv) -> str:
    """Run a command that must fail as a user mistake: exit code 2 and exactly one line on
    stderr, ``actkit: error: ...``. Returns that line."""
    code, out, err = run_cli(capsys, *argv)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, (code, out, err)
    assert len(lines) == 1 and lines[0].startswith("actkit: error: "), err
    return lines[0]
