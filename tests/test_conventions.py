"""The house rules of issue 12: one implementation of each idea, scikit-learn's conventions,
and a Python API that does everything the CLI does."""

import ast
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from sklearn.base import clone

import actkit
from actkit.alignment import ICAAlignment, LinearAlignment, PermutationAlignment, RigidAlignment
from actkit.errors import ActkitError, ParameterError, ValidationError

REPO = Path(__file__).resolve().parents[1]


def _pair(seed=0, n=1500, d=5):
    rng = np.random.default_rng(seed)
    S = rng.laplace(size=(n, d))
    return S @ rng.normal(size=(d, d)), S @ rng.normal(size=(d, d)) + 1.0


# ----------------------------------------------------------------------------- the layout
def test_align_is_the_function_and_alignment_the_module():
    import types

    assert callable(actkit.align) and isinstance(actkit.align, types.FunctionType)
    assert isinstance(actkit.alignment, types.ModuleType)
    for name in ("compare", "compare_many", "CompareResult", "list_layers", "transform_store",
                 "CrossMoments", "RunningMoments"):
        assert name in dir(actkit), name
    assert actkit.compare_many is actkit.alignment.compare_many


def test_no_module_over_500_lines_in_the_refactored_rooms():
    rooms = ["actkit/alignment", "actkit/ica", "actkit/store", "actkit/dictionary", "actkit/zoo",
             "extractors"]
    for room in rooms:
        for path in (REPO / room).glob("*.py"):
            n = len(path.read_text().splitlines())
            assert n <= 500, f"{path.relative_to(REPO)} has {n} lines"


def _imports(path):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            yield node.module, [a.name for a in node.names]
        elif isinstance(node, ast.Import):
            for a in node.names:
                yield a.name, []


def _room(module):
    parts = module.split(".")
    return ".".join(parts[:2])


def test_one_way_imports_and_no_private_cross_imports():
    edges = {}
    for path in (REPO / "actkit").rglob("*.py"):
        me = _room(".".join(path.relative_to(REPO).with_suffix("").parts))
        for module, names in _imports(path):
            if not module.startswith("actkit."):
                continue
            other = _room(module)
            edges.setdefault(me, set()).add(other)
            if other != me:
                # a private *module* of a shared helper (actkit._rows, ...) is fine; another
                # room's private *name* is not
                folder = REPO / module.replace(".", "/")
                bad = [n for n in names if n.startswith("_") and not n.startswith("__")
                       and not (folder / f"{n}.py").exists()]
                assert not bad, f"{path.relative_to(REPO)} imports {bad} from {module}"
    assert "actkit.report" not in edges.get("actkit.alignment", ())
    assert "actkit.store" not in edges.get("actkit.stats", ())
    rooms = {r for r in edges if not r.startswith(("actkit._", "actkit.errors"))}

    def reach(start):
        seen, todo = set(), [start]
        while todo:
            node = todo.pop()
            for nxt in edges.get(node, ()):
                if nxt != node and nxt in rooms and nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return seen

    for room in rooms:
        assert room not in reach(room), f"import cycle through {room}"


def test_zoo_training_is_off_the_runtime_path():
    code = ("import sys, actkit, actkit.zoo, actkit.demo, actkit.synthetic.reproduce\n"
            "import actkit.cli; actkit.cli.build_parser()\n"
            "print(sorted(m for m in sys.modules if m.startswith('actkit.zoo.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    loaded = eval(out.stdout.strip())
    assert not [m for m in loaded if m.split(".")[2] in ("training", "_families", "_fitting", "_corpus")]


def test_extractors_install_as_actkit_extractors():
    import actkit.extractors.registry as registry

    assert Path(registry.__file__).parent == REPO / "extractors"
    assert "extractors" not in sys.modules  # never a top-level package


# ----------------------------------------------------------------------------- one of each
def test_sample_rows_one_seeding_rule():
    from actkit._rows import sample_rows

    a = sample_rows(1000, 50, 3)
    assert np.array_equal(a, np.sort(np.random.default_rng(3).choice(1000, 50, replace=False)))
    assert np.all(np.diff(a) > 0)
    rows = np.arange(10, 200, 2)
    b = sample_rows(rows, 20, 1)
    assert set(b) <= set(rows) and len(b) == 20
    assert np.array_equal(sample_rows(rows, 500, 1), rows)
    rng = np.random.RandomState(0)
    c = sample_rows(1000, 5, rng)
    assert np.array_equal(c, np.sort(np.random.RandomState(0).choice(1000, 5, replace=False)))


def test_block_rows_policy():
    from actkit._rows import block_rows

    assert block_rows(1024) == 32 * 2**20 // 4096
    assert block_rows(10**7) == 256
    assert block_rows(8, max_rows=16384) == 16384


def test_cross_moments_merge_state_dict_and_sides():
    from actkit.metrics import linear_cka
    from actkit.stats import CrossMoments, RunningMoments

    X, Y = _pair(1)
    a = CrossMoments().add(X[:600], Y[:600])
    b = CrossMoments(shift_x=a.shift_x, shift_y=a.shift_y).add(X[600:], Y[600:])
    whole = a.copy().merge(b)
    assert whole.n == len(X)
    assert _cka(whole) == pytest.approx(linear_cka(X, Y), rel=1e-10)
    restored = CrossMoments().load_state_dict(whole.state_dict())
    assert _cka(restored, True) == pytest.approx(_cka(whole, True), rel=1e-12)
    # side scatters from each side's own RunningMoments (compare's per-side cache)
    c = CrossMoments(compute_xx=False, compute_yy=False, shift_x=a.shift_x, shift_y=a.shift_y)
    c.add(X, Y)
    mx = RunningMoments(shift=a.shift_x).add(X)
    my = RunningMoments(shift=a.shift_y).add(Y)
    c.attach_sides(mx, my)
    np.testing.assert_allclose(c.scatter_xx(), whole.scatter_xx(), rtol=1e-10)
    with pytest.raises(ValueError, match="not of these rows"):
        CrossMoments(compute_xx=False, compute_yy=False).add(X[:10], Y[:10]).attach_sides(mx, my)


# ----------------------------------------------------------------------------- scikit-learn
@pytest.mark.parametrize("est", [PermutationAlignment(), RigidAlignment(), LinearAlignment(alpha=0.5),
                                 ICAAlignment(n_components=3, random_state=1, max_iter=300)])
def test_alignments_are_estimators(est):
    A, B = _pair(2)
    c = clone(est)
    assert c.get_params() == est.get_params()
    c.fit(A[:1200], B[:1200])
    pred = c.transform(A[1200:])
    assert pred.shape == (300, B.shape[1])
    score = c.score(A[1200:], B[1200:])
    assert 0 <= score < 1
    diam = actkit.alignment.diameter(B[1200:])
    manual = np.linalg.norm(pred - B[1200:], axis=1).mean() / diam
    assert score == pytest.approx(manual, rel=1e-9)


def test_alignment_parameters_are_validated():
    A, B = _pair(3, n=300)
    with pytest.raises(ParameterError, match="alpha"):
        LinearAlignment(alpha=-1.0).fit(A, B)
    with pytest.raises(ParameterError, match="fun"):
        ICAAlignment(fun="tanh").fit(A, B)
    with pytest.raises(ValueError, match="not fitted"):
        RigidAlignment().transform(A)


def test_fastica_whiten_values_and_return_order():
    from sklearn.decomposition import fastica as sk_fastica

    rng = np.random.default_rng(0)
    S = rng.laplace(size=(3000, 3))
    X = S @ rng.normal(size=(3, 3)).T + 2.0
    for whiten in ("unit-variance", "arbitrary-variance"):
        Y = actkit.FastICA(whiten=whiten, random_state=0).fit_transform(X)
        std = Y.std(axis=0)
        if whiten == "unit-variance":
            np.testing.assert_allclose(std, 1.0, atol=1e-6)
        else:
            np.testing.assert_allclose(Y.std(axis=0, ddof=1), 1.0, atol=1e-6)
    with pytest.raises(ParameterError, match="whiten"):
        actkit.FastICA(whiten=True).fit(X)
    ours = actkit.fastica(X, random_state=0, return_X_mean=True, return_n_iter=True)
    ref = sk_fastica(X, random_state=0, return_X_mean=True, return_n_iter=True)
    assert len(ours) == len(ref) == 5
    for a, b in zip(ours[:4], ref[:4]):
        assert np.shape(a) == np.shape(b)
    np.testing.assert_allclose(ours[3], X.mean(axis=0), atol=1e-12)
    K, W, S_none = actkit.fastica(X, random_state=0, compute_sources=False)
    assert S_none is None and K.shape == (3, 3)
    K0, W0, S0 = actkit.fastica(actkit.Whitener().fit_transform(X), whiten=False, random_state=0)
    assert K0 is None


def test_sparse_dictionary_takes_n_components():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(600, 8))
    sd = actkit.SparseDictionary(n_components=12, k=2, random_state=0).fit(X)
    assert sd.components_.shape == (12, 8)
    with pytest.raises(ParameterError, match="n_components"):
        actkit.SparseDictionary(n_components=0).fit(X)


# ----------------------------------------------------------------------------- the API
def test_compare_notes_and_compare_many_metric_check():
    A, B = _pair(4, n=600)
    with pytest.warns(UserWarning, match="fit rows"):
        res = actkit.compare(A, B, ica_max_rows=50)
    assert any("fit rows" in note for note in res.notes)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = actkit.compare(A, B, ica_max_iter=1)
    assert any("did not converge" in note for note in res.notes)

    class Exploding:
        shape = (600, 5)

        def __getattr__(self, name):
            raise AssertionError("read before the metric was checked")

    with pytest.raises(ValidationError, match="unknown metric"):
        actkit.compare_many([A, B, Exploding()], metric="nope")


def test_transform_store_matches_the_command(tmp_path, capsys):
    from actkit.cli import main
    from actkit.store import LayerSpec, create_store

    rng = np.random.default_rng(0)
    X = (rng.laplace(size=(400, 4)) @ rng.normal(size=(4, 6))).astype(np.float32)
    src = tmp_path / "src.h5"
    w = create_store(src, [LayerSpec("l1", 400, 6)], n_samples=400, request={"t": 1})
    w.append("l1", X)
    w.checkpoint(400, force=True)
    w.finalize()
    source = actkit.open_store(src)
    layer = source["l1"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")                 # rank 4 of 6 features: noted, fine
        white = actkit.Whitener(method="pca", eps=1e-10).fit(layer)
        zca = actkit.Whitener(method="zca").fit(layer)
    out_api = actkit.transform_store(white, layer, tmp_path / "api.h5",
                                     settings={"method": "pca", "eps": 1e-10})
    assert main(["whiten", str(src), "--layer", "l1", "--out", str(tmp_path / "cli.h5"),
                 "--quiet"]) == 0
    with actkit.open_store(out_api) as a, actkit.open_store(tmp_path / "cli.h5") as b:
        np.testing.assert_array_equal(np.asarray(a["l1"]), np.asarray(b["l1"]))
        assert a.request == b.request
        assert sorted(a.params) == ["dewhitening", "explained_variance", "mean", "whitening"]
    # the identical request again is a no-op; another store at the path needs overwrite
    assert actkit.transform_store(white, layer, out_api, settings={"method": "pca", "eps": 1e-10}) == out_api
    with pytest.raises(ActkitError, match="overwrite"):
        actkit.transform_store(zca, layer, out_api)
    with pytest.raises(ActkitError, match="store layer"):
        actkit.transform_store(white, X, tmp_path / "x.h5")


def test_cli_prints_exactly_actkit_errors(monkeypatch, capsys):
    """An ActkitError is one line and exit 2; any other exception is a bug: its traceback shows."""
    import actkit.cli as cli

    real = cli.build_parser

    def with_info(func):
        def build():
            parser = real()
            parser._subparsers._group_actions[0].choices["info"].set_defaults(func=func)
            return parser
        return build

    def mistake(args):
        raise ValidationError("a user mistake")

    def bug(args):
        raise KeyError("a bug")

    monkeypatch.setattr(cli, "build_parser", with_info(mistake))
    assert cli.main(["info", "x.h5"]) == 2
    assert capsys.readouterr().err.strip() == "actkit: error: a user mistake"
    monkeypatch.setattr(cli, "build_parser", with_info(bug))
    with pytest.raises(KeyError):
        cli.main(["info", "x.h5"])


def _cka(cm, debiased=False):
    """CKA of a CrossMoments through the measure (the one place CKA is computed)."""
    from actkit.measures import Moments, get_measure

    return get_measure("linear_cka_debiased" if debiased else "linear_cka").compute(Moments.from_cross(cm))
