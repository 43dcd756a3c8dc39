"""Input readers, the inputs fingerprint, and the rule that analysis code never imports extractors."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from actkit.errors import InputError
from conftest import SENTENCES, make_images
from actkit.extractors.inputs import inputs_fingerprint, read_inputs

REPO = Path(__file__).resolve().parents[1]


def test_text_skips_blank_lines_and_max_samples(text_file):
    data = read_inputs(text_file)
    assert data.kind == "text" and data.texts == SENTENCES
    assert read_inputs(text_file, max_samples=2).texts == SENTENCES[:2]
    with pytest.raises(InputError, match="positive"):
        read_inputs(text_file, max_samples=0)


def test_jsonl_and_txt_have_the_same_digest(text_file, tmp_path):
    jsonl = tmp_path / "a.jsonl"
    jsonl.write_text("\n".join(json.dumps({"text": s}) for s in SENTENCES))
    assert read_inputs(jsonl).digest == read_inputs(text_file).digest


def test_fingerprint_changes_with_content_and_preprocessing(text_file, tmp_path):
    other = tmp_path / "b.txt"
    other.write_text("\n".join(SENTENCES[:-1] + ["End!"]))
    a, b = read_inputs(text_file), read_inputs(other)
    assert inputs_fingerprint(a, {"max_length": None}) != inputs_fingerprint(b, {"max_length": None})
    assert inputs_fingerprint(a, {"max_length": None}) != inputs_fingerprint(a, {"max_length": 8})
    assert inputs_fingerprint(a, {"max_length": 8}) == inputs_fingerprint(read_inputs(text_file), {"max_length": 8})


def test_image_folder_sorted_recursive_equals_npy(image_dir, image_npy):
    folder, arr = read_inputs(image_dir), read_inputs(image_npy)
    assert len(folder) == len(arr) == 7
    rel = [p.relative_to(image_dir).as_posix() for p in folder.image_files]
    assert rel == sorted(rel) and rel[2] == "b/c/2.png"
    for i in range(7):
        np.testing.assert_array_equal(np.asarray(folder.image(i)), np.asarray(arr.image(i)))
        np.testing.assert_array_equal(np.asarray(arr.image(i)), make_images()[i])
    (image_dir / "notes.txt").write_text("ignored")
    assert len(read_inputs(image_dir)) == 7
    (image_dir / "notes.txt").unlink()


def test_bad_inputs(tmp_path):
    with pytest.raises(InputError, match="not found"):
        read_inputs(tmp_path / "missing.txt")
    (tmp_path / "latin1.txt").write_bytes("caf\xe9\n".encode("latin-1"))
    with pytest.raises(InputError, match="not UTF-8"):
        read_inputs(tmp_path / "latin1.txt")
    np.save(tmp_path / "f.npy", np.zeros((2, 4, 4, 3), np.float32))
    with pytest.raises(InputError, match=r"uint8 array of shape \(N, H, W, 3\)"):
        read_inputs(tmp_path / "f.npy")
    np.save(tmp_path / "empty.npy", np.zeros((0, 4, 4, 3), np.uint8))
    with pytest.raises(InputError, match="no samples"):
        read_inputs(tmp_path / "empty.npy")
    (tmp_path / "x.jsonl").write_text("{not json\n")
    with pytest.raises(InputError, match="x.jsonl:1: not valid JSON"):
        read_inputs(tmp_path / "x.jsonl")
    (tmp_path / "img.png").write_bytes(b"garbage")
    with pytest.raises(InputError, match="single image"):
        read_inputs(tmp_path / "img.png")
    (tmp_path / "imgs").mkdir()
    (tmp_path / "imgs" / "a.jpg").write_bytes(b"garbage")
    with pytest.raises(InputError, match=r"cannot read image .*a\.jpg"):
        read_inputs(tmp_path / "imgs")


def test_analysis_side_never_imports_extractors():
    code = (
        "import sys, importlib\n"
        "for m in ['actkit', 'actkit.store', 'actkit.errors', 'actkit.cli']:\n"
        "    importlib.import_module(m)\n"
        "for m in ['actkit.alignment', 'actkit.whitening', 'actkit.ica', 'actkit.stats', 'actkit._data',\n"
        "          'actkit.dictionary', 'actkit.metrics', 'actkit.report', 'actkit.zoo']:\n"
        "    try:\n"
        "        importlib.import_module(m)\n"
        "    except ModuleNotFoundError as e:\n"
        "        if e.name != m: raise\n"
        "from actkit.cli import build_parser\n"
        "build_parser()\n"
        "bad = sorted(m for m in sys.modules if m == 'actkit.extractors' or m.startswith('actkit.extractors.'))\n"
        "heavy = sorted(m for m in ('transformers', 'timm') if m in sys.modules)\n"
        "print(bad, heavy)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[] []"
    # and no module of the analysis side imports it at all; the sub-commands only inside functions
    # (the parser imports every one of them; ``import actkit`` resolves ``actkit.extract`` lazily);
    # actkit/pipeline.py (extract-then-compare) and actkit/sweep.py (extract every checkpoint, then
    # compare) are jobs on the floor above both rooms (the floors: tests/test_architecture.py), and
    # are loaded only to extract; actkit.units (what a unit responds to, beside the measures)
    # reads inputs as extraction does only to re-attach them to a store that did not record them
    # (``inputs=PATH``), inside that one function: a hand-off (actkit/_architecture.py)
    jobs = {REPO / "actkit" / "pipeline.py", REPO / "actkit" / "sweep.py"}
    late_only = {REPO / "actkit" / "_units" / "_api.py"}
    pattern = re.compile(r"^\s*(from|import)\s+actkit\.extractors\b|^\s*from\s+actkit\s+import\s+extractors\b", re.M)
    for path in sorted((REPO / "actkit").rglob("*.py")):
        text = path.read_text()
        if path in jobs:
            continue
        if path.parent.name == "_commands" or path in late_only:
            top_level = re.compile(r"^(from|import)\s+actkit\.extractors\b", re.M)
            assert not top_level.search(text), f"{path} imports extractors at module level"
            continue
        assert not pattern.search(text), f"{path} imports extractors"
