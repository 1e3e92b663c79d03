"""The conformance suite's systematic and random parts (docs/conformance.md,
"Optional parts", "Fuzz cases", "Large tensors", "First asynchronous error"):
a fuzz case id always means the same inputs, in any process; another
--fuzz-seed gives other cases; any fuzz id replays with --case alone; and the
new sections run and pass on cpu:0 (a quick subset; the full level runs in
test_conformance_catches.py).

Needs: cpu:0 (the reference CPU plugin).
"""

import hashlib
import json
import subprocess
import sys

import numpy as np
import pytest

from conftest import HUNG_S


def conformance(*args, env=None, timeout=HUNG_S):
    import os
    full = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", "devicekit", "conformance", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout, env=full)


def _digest(ops, seeds):
    """A hash of every drawn input (values, layouts, attributes) of the fuzz
    cases (op, float32 or the op's first dtype, seed)."""
    from devicekit.conformance.registry import spec_dtypes
    from devicekit.conformance_tests import fuzz, fuzz_nn

    h = hashlib.sha256()
    for op in ops:
        dtype = "float32" if "float32" in spec_dtypes(op)[0] else spec_dtypes(op)[0][0]
        for s in seeds:
            d = fuzz.draw(op, dtype, s)
            for name, o in sorted(d.inputs.items()):
                h.update(f"{name} {o} {o.value.dtype} {o.value.shape}".encode())
                h.update(np.ascontiguousarray(o.value).tobytes())
            h.update(repr(sorted(d.attrs.items())).encode())
    for op in fuzz_nn.OPS:
        for s in seeds:
            call, layouts, wrt = fuzz_nn.draw(op, "float32", s, backward=True)
            for a in call.args:
                h.update(b"-" if a is None else np.ascontiguousarray(a).tobytes())
            h.update(repr(sorted((str(k), str(v)) for k, v in layouts.items())).encode())
            h.update(repr((call.kwargs.get("eps"), wrt)).encode())
    return h.hexdigest()


def test_a_fuzz_id_means_the_same_inputs_in_every_process():
    from devicekit.conformance_tests import fuzz

    ops, seeds = sorted(fuzz.FAMILY), [0, 7, 2**32 - 1]
    here = _digest(ops, seeds)
    assert here == _digest(ops, seeds)  # drawing does not depend on what ran before
    code = (f"import sys; sys.path.insert(0, {str(__file__.rsplit('/', 1)[0])!r}); "
            f"import test_conformance_fuzz as t; print(t._digest({ops!r}, {seeds!r}))")
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=HUNG_S)
    assert other.returncode == 0, other.stderr[-2000:]
    assert other.stdout.strip() == here
    # and a case's inputs depend on its op, dtype and seed
    a, b = fuzz.draw("add", "float32", 7), fuzz.draw("add", "float32", 8)
    c = fuzz.draw("add", "float16", 7)
    assert str(a.inputs) != str(b.inputs) or not np.array_equal(
        a.inputs["a"].value, b.inputs["a"].value)
    assert str(a.inputs) != str(c.inputs) or not np.array_equal(
        a.inputs["a"].value.astype(np.float64), c.inputs["a"].value.astype(np.float64))


def test_seed_sets_per_release_and_per_fuzz_seed():
    from devicekit.conformance_tests import _fuzz

    assert _fuzz.release_seed("0.3.0") != _fuzz.release_seed("0.3.1")
    assert _fuzz.seed_set(12345, 4)[0] == 12345 and len(set(_fuzz.seed_set(12345, 50))) == 50
    assert _fuzz.seed_set(12345, 0) == []  # --fuzz-cases 0: no fuzz cases
    default = conformance("--device", "cpu:0", "--list", "-k", "fuzz/").stdout.split()
    other = conformance("--device", "cpu:0", "--list", "-k", "fuzz/", "--fuzz-seed", 12345,
                        "--fuzz-cases", 3).stdout.split()
    # the release's set: DEFAULT_CASES per (op, dtype); --fuzz-cases 3: three
    add32 = [i for i in default if i.startswith("fuzz/add/float32/")]
    assert len(add32) == _fuzz.DEFAULT_CASES
    assert sorted(i for i in other if i.startswith("fuzz/add/float32/")) == sorted(
        f"fuzz/add/float32/s{s}" for s in _fuzz.seed_set(12345, 3))
    assert not set(default) & set(other) and len(other) * _fuzz.DEFAULT_CASES == len(default) * 3
    # the level core has no fuzz cases
    core = conformance("--device", "cpu:0", "--list", "--level", "core").stdout.split()
    assert core and not [i for i in core if i.startswith("fuzz/")]
    bad = conformance("--device", "cpu:0", "--list", "--fuzz-seed", -1)
    assert bad.returncode == 2 and "--fuzz-seed" in bad.stderr


def test_any_fuzz_id_replays_with_case_alone(tmp_path):
    """A failure's replay command is --case <id>: it finds the case even when
    the run that failed used another --fuzz-seed."""
    case = "fuzz/matmul/float32/s987654321"  # in no release's set
    proc = conformance("--device", "cpu:0", "--case", case, "--jobs", "1", "--report", tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    report = json.loads((tmp_path / "report.json").read_text())
    assert [c["id"] for c in report["cases"]] == [case]
    assert report["cases"][0]["outcome"] == "pass" and report["cases"][0]["ran"]


@pytest.mark.parametrize("pattern", [
    "fuzz/add/", "fuzz/matmul/float32/", "fuzz/gather/", "fuzz/cast/int8/",
    "fuzz/scaled_dot_product_attention", "fuzz/layer_norm_backward/",
    "/opt_", "runtime/first_async_error", "large_bool_mask",
])
def test_new_cases_pass_on_cpu(tmp_path, pattern):
    proc = conformance("--device", "cpu:0", "-k", pattern, "--jobs", "2", "--report", tmp_path)
    report = json.loads((tmp_path / "report.json").read_text())
    bad = [(c["id"], c["message"][:300]) for c in report["cases"]
           if c["outcome"] not in ("pass", "skipped")]
    assert proc.returncode == 0 and not bad, bad[:5]
    assert report["summary"]["by_outcome"]["pass"] >= 2


def test_optional_inputs_are_every_combination_the_spec_allows():
    """Classes "opt_*" come from the spec's optional inputs: every subset of
    them is a class (attention's mask in both kinds, with and without GQA,
    is_causal only without a mask), and the backward cases take every
    non-empty subset of the floating inputs requiring grad."""
    from devicekit.conformance_tests import _nn

    assert _nn.optional_inputs("layer_norm") == ["weight", "bias"]
    opt = lambda op: sorted(c for c in _nn.CALLS[op] if c.startswith("opt_"))  # noqa: E731
    assert opt("layer_norm") == ["opt_bias", "opt_none", "opt_weight", "opt_weight_bias"]
    assert opt("rms_norm") == ["opt_none", "opt_weight"]
    assert len(opt("scaled_dot_product_attention")) == 8
    labels = [lab for lab, _ in _nn.grad_subsets("layer_norm", "opt_weight_bias")]
    assert len(labels) == 7 and labels[0] == "grad_x_weight_bias" and "grad_bias" in labels
    assert [lab for lab, _ in _nn.grad_subsets("layer_norm", "opt_bias")] == [
        "grad_x_bias", "grad_bias", "grad_x"]
