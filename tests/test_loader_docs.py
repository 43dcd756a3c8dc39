"""docs/loader.md's SAE example learns (test_docs_examples runs it as written; this checks what it
prints). docs/sweep.md's commands run, print what the page shows and write their JSON and plot
in test_docs_examples."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _blocks(page, lang):
    text = (REPO / "docs" / page).read_text()
    return re.findall(rf"```{lang}\n(.*?)```", text, flags=re.S)


def _env():
    return dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", PYTHONPATH=str(REPO))


@pytest.mark.slow
def test_the_topk_sae_example_of_docs_loader_runs(tmp_path):
    (code,) = _blocks("loader.md", "python")
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=_env(), capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    mse = [float(x) for x in re.findall(r"normalised MSE ([0-9.]+)", proc.stdout)]
    assert len(mse) == 3 and mse[-1] < mse[0]  # the SAE learns
    assert (tmp_path / "sae.pt").exists()
