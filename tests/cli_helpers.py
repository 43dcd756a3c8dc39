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


def perturbed_copy(src, dst, scale=0.05, seed=5):
    """Save a copy of the causal LM at ``src`` to ``dst`` with every weight perturbed by
    ``scale`` x N(0, 1) noise (seeded), tokenizer files copied: a second, related checkpoint."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(src)
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(scale * torch.randn_like(p))
    model.save_pretrained(dst, safe_serialization=True)
    for f in src.iterdir():
        if "token" in f.name or f.name.endswith(".txt") or f.name == "special_tokens_map.json":
            (dst / f.name).write_bytes(f.read_bytes())


def wait_at_gate(proc, gate, timeout: float = 300) -> None:
    """Wait until ``proc`` (started with ``ACTKIT_FAULT=wait:POINT`` and
    ``ACTKIT_FAULT_RELEASE=gate``) stops at POINT; fail if it ends first."""
    import time
    from pathlib import Path

    deadline = time.monotonic() + timeout
    while not Path(str(gate) + ".waiting").exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert proc.poll() is None, proc.communicate()[1][-3000:]
