"""`gate check` times performance now, alternately, instead of trusting two
records' stored figures (policy ``performance.timing = "alternate"``, the
release policy's; docs/gate.md "Performance timed alternately").

Three builds of tests/conformance_plugins/faulty.c (it wraps the reference
CPU plugin): FAULT=0 (the baseline), FAULT=0 built with -g (the same code in
another binary) and FAULT=12 (add sleeps 2 ms per call: a real slowdown),
each certified for real without performance figures (--no-perf: this mode
needs none). Proven, with busy-loop processes loading the machine the whole
time: the same binary is admitted without being timed; the same code in
another binary is timed and admitted; the slow build is refused on add and
only on add. The statistic and the verdicts of each timing state are
checked on their own, without plugins.

Needs: a C compiler and the reference CPU plugin (cpu:0). About 40 s on the
shared 2-core development machine (most of it the timing under load).
"""

import contextlib
import shutil
import subprocess
import sys
import zipfile

import pytest

from conftest import DEVICE_API_INCLUDE, REPO_ROOT, _find_c_compiler, compile_test_plugin
from conftest import CI_MODELS_LINE
from devicekit.gate import paired, policy, record
from devicekit.gate.errors import MissingInput

ADD = "add/float32/1048576"


def gate(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "devicekit", "gate", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout)


@contextlib.contextmanager
def busy_machine(processes=2):
    """Busy-loop processes for the duration of the block: the load that made
    comparing stored figures flap."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
             for _ in range(processes)]
    try:
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait()


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    import devicekit_cpu

    compiler = _find_c_compiler()
    if compiler is None:
        pytest.skip("no C compiler on PATH: the faulty plugins cannot be built")
    out = tmp_path_factory.mktemp("gate_timing")
    real = f'-DREAL_PLUGIN="{devicekit_cpu.library_path()}"'
    source = REPO_ROOT / "tests" / "conformance_plugins" / "faulty.c"
    b = {}
    for name, flags in (("base", ("-DFAULT=0",)), ("same_code", ("-DFAULT=0", "-g")),
                        ("slow", ("-DFAULT=12",))):
        lib = compile_test_plugin(compiler, source, DEVICE_API_INCLUDE, out / f"{name}.so",
                                  flags=("-Werror", *flags, real), libs=("-ldl", "-lm"))
        rec = out / f"{name}.json"
        proc = gate("certify", "--plugin", lib, "--case", "ops/add/float32/odd", "--model", "mlp",
                    "--model-dtype", "float32", "--no-perf", "--jobs", "2", "--out", rec)
        assert proc.returncode == 0 and rec.exists(), proc.stdout + proc.stderr[-3000:]
        b[name], b[name + "_rec"] = lib, rec
    assert record.sha256_file(b["base"]) != record.sha256_file(b["same_code"])
    # DeviceKit's release policy as it ships (performance timed alternately),
    # accepting these narrowed records and requiring only the MLP
    text = (REPO_ROOT / "ci" / "policy.toml").read_text()
    assert 'timing = "alternate"' in text
    for old, new in (("allow_partial = false", "allow_partial = true"),
                     (CI_MODELS_LINE,
                      'required = ["mlp"]')):
        assert old in text
        text = text.replace(old, new)
    (out / "policy.toml").write_text(text)
    b["policy"] = out / "policy.toml"
    return b


def _perf_lines(stdout):
    return [line for line in stdout.splitlines() if line.startswith("performance.")]


def test_the_same_binary_is_admitted_without_timing_under_load(builds, tmp_path):
    """sha256 equal to the baseline's: nothing to time, nothing to refuse
    (also as a copy at another path, passed with --binary)."""
    copy = tmp_path / "copy.so"
    shutil.copy(builds["base"], copy)
    with busy_machine():
        for extra in ((), ("--binary", copy)):
            proc = gate("check", builds["base_rec"], "--baseline", builds["base_rec"],
                        "--policy", builds["policy"], *extra)
            assert proc.returncode == 0 and "ADMITTED" in proc.stdout, proc.stdout + proc.stderr
            assert "the candidate is the baseline's binary" in proc.stdout
            assert "timing the baseline" not in proc.stderr


def test_the_same_code_in_another_binary_is_timed_and_admitted_under_load(builds):
    with busy_machine():
        proc = gate("check", builds["same_code_rec"], "--baseline", builds["base_rec"],
                    "--policy", builds["policy"])
    assert "timing the baseline's and the candidate's binaries alternately" in proc.stderr
    assert "performance timed alternately on this machine" in proc.stdout
    assert proc.returncode == 0 and _perf_lines(proc.stdout) == [], proc.stdout + proc.stderr


def test_a_slower_build_is_refused_on_the_slow_figure_only(builds):
    with busy_machine():
        proc = gate("check", builds["slow_rec"], "--baseline", builds["base_rec"],
                    "--policy", builds["policy"])
    assert proc.returncode == 1 and "REFUSED" in proc.stdout, proc.stdout + proc.stderr
    rows = [line.split()[:2] for line in _perf_lines(proc.stdout)]
    assert rows == [["performance.slowdown", ADD]], proc.stdout
    assert "alternating rounds on this machine" in proc.stdout


def test_baseline_binary_option(builds, tmp_path):
    """The baseline's binary is the library its record names, or
    --baseline-binary (which must be that binary: exit 2; and exist: exit 3).
    Without it, a baseline library that is gone is a note under
    other_machine = "skip" and a refusal under "refuse"."""
    base = record.load(builds["base_rec"])
    base["plugin"]["library_path"] = str(tmp_path / "not-here.so")
    new = record.load(builds["same_code_rec"])
    pol = policy.load(builds["policy"])
    t = paired.time_check(new, base, pol)
    assert t.state == "unavailable" and "--baseline-binary" in t.detail
    refusals, notes = paired.judge(t, pol)
    assert refusals == [] and "not on this machine" in notes[0]
    strict = policy.parse(builds["policy"].read_text().replace(
        'other_machine = "skip"', 'other_machine = "refuse"'), "strict")
    assert [r[0] for r in paired.judge(t, strict)[0]] == ["performance.machine"]
    with pytest.raises(MissingInput, match="--baseline-binary not found"):
        paired.time_check(new, base, pol, baseline_binary=str(tmp_path / "nothing.so"))
    proc = gate("check", builds["same_code_rec"], "--baseline", builds["base_rec"],
                "--policy", builds["policy"], "--baseline-binary", builds["slow"])
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert "is not the binary the baseline certifies" in lines[0]


def test_the_released_wheel_and_the_baseline_wheel_are_timed(builds, tmp_path):
    """A wheel (--binary / --baseline-binary) is timed through the library
    member its record names."""
    def wheel(lib, name):
        path = tmp_path / f"{name}-1.0-py3-none-any.whl"
        with zipfile.ZipFile(path, "w") as z:
            z.write(lib, f"{name}/lib{name}.so")
        return path, f"{name}/lib{name}.so"

    base = record.load(builds["base_rec"])
    new = record.load(builds["slow_rec"])
    bw, bm = wheel(builds["base"], "base")
    nw, nm = wheel(builds["slow"], "slow")
    base["plugin"]["wheel"] = {"library_member": bm, "sha256": record.sha256_file(bw)}
    new["plugin"]["wheel"] = {"library_member": nm, "sha256": record.sha256_file(nw)}
    pol = policy.parse(builds["policy"].read_text().replace("rounds = 15", "rounds = 5"), "p")
    t = paired.time_check(new, base, pol, binary=str(nw), baseline_binary=str(bw))
    assert t.state == "timed" and t.candidate.endswith(nm) and t.baseline.endswith(bm)
    assert [f["key"] for f in t.figures][0] == ADD and t.figures[0]["median"] > 3


def test_median_interval_from_order_statistics():
    xs = [float(i) for i in range(1, 16)]  # 15 rounds: the 4th and 12th smallest
    med, low, high, cover = paired.median_interval(xs)
    assert (med, low, high) == (8.0, 4.0, 12.0) and cover == pytest.approx(0.9648, abs=1e-4)
    med, low, high, cover = paired.median_interval([3.0, 1.0, 2.0, 5.0, 4.0])
    assert (med, low, high) == (3.0, 1.0, 5.0) and cover == pytest.approx(0.9375)


def _timing(ratios, missing=()):
    med, low, high, cover = paired.median_interval(ratios)
    return paired.Timing("timed", figures=[{
        "key": ADD, "rounds": len(ratios), "median": med, "low": low, "high": high,
        "coverage": cover, "baseline_s": 1e-4, "candidate_s": 1e-4 * med}],
        missing=list(missing), seconds=1.0)


def test_verdicts_of_each_timing_state():
    pol = policy.parse('[performance]\nmax_slowdown = 1.5\n', "p")
    # shown slower: refused
    refusals, _ = paired.judge(_timing([2.0] * 12 + [0.5] * 3), pol)
    assert [(r[0], r[1]) for r in refusals] == [("performance.slowdown", ADD)]
    # median above the threshold, interval reaching below it: a note, not a refusal
    refusals, notes = paired.judge(_timing([2.0] * 9 + [1.0] * 6), pol)
    assert refusals == [] and any("not shown" in n for n in notes)
    # noise around 1: nothing
    refusals, notes = paired.judge(_timing([0.3, 3.0, 1.0, 0.9, 1.1] * 3), pol)
    assert refusals == [] and len(notes) == 1
    # a figure the candidate cannot time any more
    refusals, _ = paired.judge(_timing([1.0] * 15, [{"key": "mul/float32/1048576",
                                                     "reason": "not implemented"}]), pol)
    assert [r[:2] for r in refusals] == [("performance.missing", "mul/float32/1048576")]
    assert paired.judge(paired.Timing("same", sha256="ab" * 32), pol) == (
        [], ["performance: the candidate is the baseline's binary (sha256 abababababababab): "
             "the same code, nothing to time"])
    assert paired.judge(paired.Timing("failed", "the candidate's timing worker exited"),
                        pol)[0][0][0] == "performance.missing"
    # records alone (gate matrix): nothing judged, a note says why
    refusals, notes = paired.judge(None, pol)
    assert refusals == [] and "not judged from the records" in notes[0]


@pytest.mark.parametrize("text,words", [
    ('[performance]\ntiming = "alternating"\n', "must be one of alternate, recorded"),
    ('[performance]\nrounds = 3\n', "'performance.rounds' = 3 is below"),
    ('[performance]\nrounds = 0\nmin_repeats = 1\n', "must be from 1 to 1000"),
])
def test_timing_keys_are_validated(text, words):
    from devicekit.gate.errors import BadPolicy

    with pytest.raises(BadPolicy, match=words):
        policy.parse(text, "p.toml")
