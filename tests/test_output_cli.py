"""The commands' outputs and signals end to end (``devicekit._util.output``,
``devicekit._util.workers``; docs/conformance.md "Exit codes"): an output location
that cannot be written is refused before any work (exit 3, one line); a write
that fails after the work (a real full disk) leaves the previous files intact
(exit 3, one line); SIGTERM to ``conformance`` and a terminal's Ctrl-C to
``models`` stop the workers, leave no process behind and write the partial
report (exit 143 / 130, one line, no traceback, no queued model counted as a
crash); a closed stdout (``| head``) is not an error.

The signal tests run the suites against tests/conformance_plugins/faulty.c
built with FAULT=11 (``add`` and ``cast`` into one dtype sleep), so the run is
still going when the signal comes; they wait for the first progress line (a
case has finished), never a blind sleep. A real full disk needs a 64 KiB
tmpfs (root with CAP_SYS_ADMIN; skipped otherwise).

Needs: cpu:0; a C compiler for the signal tests.
"""

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid

import pytest

from conftest import DEVICE_API_INCLUDE, REPO_ROOT, _find_c_compiler, compile_test_plugin
from conftest import HUNG_S

ONE_CASE = ("--case", "ops/add/float32/odd")


def dk(*args, timeout=HUNG_S, env=None):
    return subprocess.run([sys.executable, "-m", "devicekit", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL, env=env)


def _one_error_line(proc, *words):
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    for w in words:
        assert w in lines[0], lines[0]


def _leftovers(folder):
    return [n for n in os.listdir(folder) if n.startswith(".")]


@pytest.fixture(scope="module")
def slow_plugin(tmp_path_factory):
    """faulty.c FAULT=11: right results, float32 add slowed down."""
    import devicekit_cpu

    compiler = _find_c_compiler()
    if compiler is None:
        pytest.skip("no C compiler on PATH: the slow test plugin cannot be built")
    out = tmp_path_factory.mktemp("slow_plugin")
    return compile_test_plugin(
        compiler, REPO_ROOT / "tests" / "conformance_plugins" / "faulty.c", DEVICE_API_INCLUDE,
        out / "faulty_slow.so", libs=("-ldl", "-lm"),
        flags=("-Werror", "-DFAULT=11", f'-DREAL_PLUGIN="{devicekit_cpu.library_path()}"'))


@pytest.fixture(scope="module")
def small_report(tmp_path_factory):
    """A one-case conformance --report folder (seconds)."""
    out = tmp_path_factory.mktemp("small") / "rep"
    proc = dk("conformance", "--device", "cpu:0", *ONE_CASE, "--jobs", "1", "--report", out)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return out


# -- refused before any work ---------------------------------------------------

def test_models_report_that_cannot_be_written_is_refused_before_any_model(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    proc = dk("models", "--device", "cpu:0", "--model", "mlp", "--jobs", "1",
              "--report", blocker / "rep")
    assert proc.returncode == 3, proc.stdout[-2000:] + proc.stderr[-2000:]
    _one_error_line(proc, "devicekit models: error: --report", str(blocker))
    # no model ran: nothing printed, nothing written (not a time, which load stretches)
    assert proc.stdout == "" and os.listdir(tmp_path) == ["file"]


def test_conformance_diff_html_that_cannot_be_written(tmp_path, small_report):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    for target in (blocker / "d.html", tmp_path):  # under a file; a folder
        proc = dk("conformance", "diff", small_report, small_report, "--html", target)
        assert proc.returncode == 3, proc.stdout + proc.stderr
        _one_error_line(proc, "--html", str(target))
        assert proc.stdout == ""  # refused before comparing
    assert sorted(os.listdir(tmp_path)) == ["file"] and blocker.read_text() == "x"


def test_bench_json_that_cannot_be_written_is_refused_before_measuring(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    proc = dk("bench", "--device", "cpu:0", "--op", "add", "--size", "256", "--repeats", "1",
              "--json", blocker / "b.json")
    assert proc.returncode == 3 and proc.stdout == "", proc.stdout + proc.stderr
    _one_error_line(proc, "devicekit bench: error: --json")


# -- a real full disk ----------------------------------------------------------

@pytest.fixture
def full_disk(tmp_path):
    """A 64 KiB tmpfs; ``fill()`` then takes every free byte of it."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs to fill (needs root and CAP_SYS_ADMIN): "
                    f"{mounted.stderr.strip()}")

    def fill():
        with open(mnt / "filler", "wb", buffering=0) as f:
            try:
                while True:
                    f.write(b"\0" * 1024)
            except OSError:
                pass
        with open(mnt / "filler", "ab", buffering=0) as f:
            try:
                while True:
                    f.write(b"\0")
            except OSError:
                pass
    try:
        yield mnt, fill
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def test_a_full_disk_keeps_the_previous_report_set(full_disk):
    """The disk fills between two runs and the new report is larger than the
    old one (more cases): the old set stays, whole and valid."""
    mnt, fill = full_disk
    rep = mnt / "rep"
    first = dk("conformance", "--device", "cpu:0", *ONE_CASE, "--jobs", "1", "--report", rep)
    assert first.returncode == 0, first.stderr[-2000:]
    before = {n: (rep / n).read_bytes() for n in os.listdir(rep)}
    fill()
    proc = dk("conformance", "--device", "cpu:0", "-k", "ops/add/float32/", "--jobs", "1",
              "--report", rep)
    assert proc.returncode == 3, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "PASSED" in proc.stdout and "reports:" not in proc.stdout
    err = [line for line in proc.stderr.splitlines() if "error" in line]
    assert len(err) == 1 and "No space left on device" in err[0] and "Traceback" not in proc.stderr
    assert {n: (rep / n).read_bytes() for n in os.listdir(rep)} == before  # no temporaries either
    json.loads(before["report.json"])


def test_a_full_disk_leaves_no_empty_diff_html(full_disk, small_report):
    mnt, fill = full_disk
    fill()
    proc = dk("conformance", "diff", small_report, small_report, "--html", mnt / "d.html")
    assert proc.returncode == 3, proc.stdout + proc.stderr
    _one_error_line(proc, "d.html", "No space left on device")
    assert sorted(os.listdir(mnt)) == ["filler"]


# -- signals -------------------------------------------------------------------

def _tagged_processes(tag):
    """Pids of live processes whose environment carries ``tag`` (ours and their children)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if tag.encode() in f.read():
                    with open(f"/proc/{pid}/stat") as s:
                        if s.read().rsplit(")", 1)[1].split()[0] != "Z":
                            found.append(int(pid))
        except OSError:
            pass
    return found


def _start(args, tag, slow_dtype="float32", **popen):
    env = dict(os.environ, FAULTY_SLOW_MS="400", FAULTY_SLOW_DTYPE=slow_dtype,
               DEVICEKIT_TEST_RUN=tag)
    proc = subprocess.Popen([sys.executable, "-m", "devicekit", *map(str, args)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL, env=env, **popen)
    progressed, lines = threading.Event(), []

    def read():
        for line in proc.stderr:
            lines.append(line)
            if line.startswith("["):  # the progress counter: a case has finished
                progressed.set()
    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    return proc, progressed, lines, reader


def _finish(proc, reader, lines, tag):
    out = proc.stdout.read()
    proc.wait(timeout=HUNG_S)
    reader.join(60)
    deadline = time.monotonic() + 120  # a killed process needs a moment to be reaped
    while _tagged_processes(tag) and time.monotonic() < deadline:
        time.sleep(0.2)
    return out, "".join(lines), _tagged_processes(tag)


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="finds leftover processes in /proc")
def test_sigterm_stops_conformance_with_a_partial_report_and_no_orphans(tmp_path, slow_plugin):
    tag = uuid.uuid4().hex
    rep = tmp_path / "rep"
    proc, progressed, lines, reader = _start(
        ["conformance", "--plugin", slow_plugin, "-k", "ops/add/float32", "--jobs", "2",
         "--report", rep], tag)
    try:
        assert progressed.wait(1200), "".join(lines)  # bounds a hung run, not a slow one
        assert proc.poll() is None, "the run ended before the signal: make it slower"
        proc.send_signal(signal.SIGTERM)  # the parent alone, as timeout(1) does
    finally:
        out, err, left = _finish(proc, reader, lines, tag)
    assert proc.returncode == 143, out[-2000:] + err[-2000:]
    assert "Traceback" not in err and "stopped by SIGTERM" in err.splitlines()[-1]
    assert left == [], f"worker processes outlived the run: {left}"
    report = json.loads((rep / "report.json").read_text())
    assert report["run"]["partial"] and report["run"]["interrupted"]
    assert "SIGTERM" in report["corpus"]["reason"] and not report["summary"]["passed"]
    assert 0 < report["summary"]["total"] < 19 and report["summary"]["by_outcome"]["crash"] == 0
    assert _leftovers(rep) == []


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="finds leftover processes in /proc")
def test_ctrl_c_stops_models_without_false_crashes(tmp_path, slow_plugin):
    """Ctrl-C in a terminal signals the whole foreground process group: here
    the command leads its own group and the group gets SIGINT."""
    tag = uuid.uuid4().hex
    rep = tmp_path / "rep"
    proc, progressed, lines, reader = _start(
        ["models", "--plugin", slow_plugin, "--model", "mlp,cnn,gpt2", "--dtype",
         "float32,float16", "--jobs", "1", "--report", rep], tag, slow_dtype="float16",
        start_new_session=True)
    try:
        assert progressed.wait(1200), "".join(lines)  # mlp float32 answered; float16 is slow
        assert proc.poll() is None, "the run ended before the signal: make it slower"
        os.killpg(proc.pid, signal.SIGINT)
    finally:
        out, err, left = _finish(proc, reader, lines, tag)
    assert proc.returncode == 130, out[-2000:] + err[-2000:]
    assert "Traceback" not in err and "CRASH" not in err + out, err[-3000:]
    assert err.splitlines()[-1].startswith("devicekit models: stopped by Ctrl-C")
    assert left == [], f"worker or reference processes outlived the run: {left}"
    report = json.loads((rep / "report.json").read_text())
    assert report["run"]["partial"] and report["run"]["interrupted"]
    models = {c["op"] for c in report["cases"]}
    assert models == {"mlp"} and report["summary"]["by_outcome"]["crash"] == 0
    assert 0 < report["summary"]["total"] < 10 and list(report["models"]) == ["mlp"]
    assert _leftovers(rep) == []


# -- a closed stdout -----------------------------------------------------------

@pytest.mark.parametrize("args", [("devices",), ("conformance", "--device", "cpu:0", "--list")])
def test_a_closed_stdout_is_not_an_error(args, tmp_path):
    """``devicekit ... | head -1``, as a shell runs it."""
    cmd = " ".join([sys.executable, "-m", "devicekit", *args])
    proc = subprocess.run(["bash", "-c", f"{cmd} 2>stderr.txt | head -1; "
                                         f"echo rc=${{PIPESTATUS[0]}}; cat stderr.txt"],
                          capture_output=True, text=True, timeout=HUNG_S, cwd=tmp_path)
    first, rc, *err = proc.stdout.splitlines()
    assert rc == "rc=0" and "Traceback" not in proc.stdout and not err, proc.stdout
    # the reader gone before the first write
    p = subprocess.Popen([sys.executable, "-m", "devicekit", *args], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    p.stdout.close()
    _, err = p.communicate(timeout=HUNG_S)
    assert p.returncode == 0 and b"Traceback" not in err and b"Exception ignored" not in err, err

