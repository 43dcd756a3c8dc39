"""``actkit COMMAND --help`` prints what its author wrote (issue 30): argparse %-formats help
strings but not descriptions, so a ``%%`` in a description reached the reader as ``25%%``."""

from __future__ import annotations

import pytest

from actkit.cli import build_parser, main

COMMANDS = sorted(build_parser()._subparsers._group_actions[0].choices)


def test_evaluate_help_prints_25_percent(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["evaluate", "--help"])
    assert exc.value.code == 0
    out = " ".join(capsys.readouterr().out.split())  # the help is wrapped: join its lines
    assert "top 25% of features" in out
    assert "%%" not in out


@pytest.mark.parametrize("command", COMMANDS)
def test_no_help_text_prints_a_doubled_percent_sign(command, capsys):
    with pytest.raises(SystemExit):
        main([command, "--help"])
    out = capsys.readouterr().out
    assert out.startswith("usage: actkit " + command)
    assert "%%" not in out, [line for line in out.splitlines() if "%%" in line]
