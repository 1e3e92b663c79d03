"""``devicekit._util.output``, the one way commands write files, and the report
writers built on it: a set of files is replaced whole or not at all (an
interrupt or a full disk leaves the previous set exactly as it was, and no
temporary file behind), the early output check names the path in one line,
and the files of one report set carry one run id.

In process, no subprocess; the commands' behaviour end to end (exit codes,
signals, a real full disk, ``| head``) is in test_output_cli.py.
Needs: nothing but the SDK (no device, no compiler).
"""

import contextlib
import errno
import json
import os
import select
import signal
import sys
import threading
import xml.etree.ElementTree as ET

import pytest

from devicekit._util import output as _output
from devicekit.conformance import report as conformance_report
from devicekit.models import report as models_report


def _listing(folder):
    return sorted(os.listdir(folder))


def _snapshot(folder):
    return {name: (folder / name).read_bytes() for name in _listing(folder)}


# -- write_files ---------------------------------------------------------------

def test_write_files_writes_the_set_and_leaves_no_temporaries(tmp_path):
    files = {tmp_path / "a.json": '{"x": 1}', tmp_path / "sub" / "b.bin": b"\x00\x01"}
    _output.write_files({str(p): c for p, c in files.items()})
    assert (tmp_path / "a.json").read_text() == '{"x": 1}'
    assert (tmp_path / "sub" / "b.bin").read_bytes() == b"\x00\x01"
    assert _listing(tmp_path) == ["a.json", "sub"] and _listing(tmp_path / "sub") == ["b.bin"]
    umask = os.umask(0)
    os.umask(umask)
    assert (tmp_path / "a.json").stat().st_mode & 0o777 == 0o666 & ~umask  # not mkstemp's 0600


@pytest.mark.parametrize("fail_at", [0, 1, 2])
def test_a_full_disk_replaces_nothing(tmp_path, monkeypatch, fail_at):
    """ENOSPC while writing any file of the set: OutputError, one line naming
    the path; the previous files are untouched and no temporary is left."""
    names = ["report.json", "junit.xml", "report.html"]
    _output.write_files({str(tmp_path / n): f"old {n}" for n in names})
    before = _snapshot(tmp_path)
    real_fsync, calls = os.fsync, []

    def fsync(fd):
        calls.append(fd)
        if len(calls) == fail_at + 1:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    with pytest.raises(_output.OutputError) as e:
        _output.write_files({str(tmp_path / n): f"new {n}" for n in names})
    msg = str(e.value)
    assert "\n" not in msg and names[fail_at] in msg and "No space left" in msg
    assert _snapshot(tmp_path) == before


def test_keyboard_interrupt_while_writing_replaces_nothing(tmp_path, monkeypatch):
    (tmp_path / "a").write_text("old a")
    (tmp_path / "b").write_text("old b")
    real_fsync, calls = os.fsync, []

    def fsync(fd):
        calls.append(fd)
        if len(calls) == 2:  # the first temporary is complete, the second not
            raise KeyboardInterrupt
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    with pytest.raises(KeyboardInterrupt):
        _output.write_files({str(tmp_path / "a"): "new a", str(tmp_path / "b"): "new b"})
    assert _snapshot(tmp_path) == {"a": b"old a", "b": b"old b"}


@contextlib.contextmanager
def _signal_seen():
    """Yields ``wait()``: it returns once the C-level signal handler has run
    (Python writes the signal number to its wakeup fd there, in whichever
    thread the kernel picked), so a test waits for the signal's arrival, not
    for a time that a busy machine may overrun."""
    r, w = os.pipe()
    os.set_blocking(w, False)
    old = signal.set_wakeup_fd(w, warn_on_full_buffer=False)

    def wait():
        ready, _, _ = select.select([r], [], [], 300)  # bounds a lost signal, not the speed
        assert ready, "the signal never arrived"
        os.read(r, 64)
    try:
        yield wait
    finally:
        signal.set_wakeup_fd(old)
        os.close(r)
        os.close(w)


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
@pytest.mark.parametrize("target", ["process", "other thread"])
def test_a_signal_during_the_renames_waits_for_the_whole_set(tmp_path, monkeypatch, target):
    """SIGINT arriving between two renames takes effect after the last one,
    also while another thread is alive (the kernel may hand the signal to that
    thread; Python still raises in the main thread, so a per-thread signal
    mask is not enough). "other thread" sends it to that thread itself."""
    names = ["report.json", "junit.xml", "report.html"]
    _output.write_files({str(tmp_path / n): "old" for n in names})
    idle = threading.Event()
    other = threading.Thread(target=idle.wait, daemon=True)
    other.start()
    real_replace, calls = os.replace, []

    def replace(src, dst):
        calls.append(dst)
        if len(calls) == 2:  # after the first rename
            if target == "process":
                os.kill(os.getpid(), signal.SIGINT)
            else:
                signal.pthread_kill(other.ident, signal.SIGINT)
            seen()  # delivered; an undeferred KeyboardInterrupt lands here, before this rename
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    try:
        with _signal_seen() as seen, pytest.raises(KeyboardInterrupt):
            _output.write_files({str(tmp_path / n): "new" for n in names})
    finally:
        idle.set()
    assert len(calls) == 3
    assert {n: (tmp_path / n).read_text() for n in _listing(tmp_path)} == \
        {n: "new" for n in names}  # the whole new set, then the interrupt


def test_a_folder_in_the_way_replaces_nothing(tmp_path):
    (tmp_path / "a").write_text("old")
    (tmp_path / "b").mkdir()
    with pytest.raises(_output.OutputError, match="b: cannot write: it is a folder"):
        _output.write_files({str(tmp_path / "a"): "new", str(tmp_path / "b"): "new"})
    assert (tmp_path / "a").read_text() == "old" and _listing(tmp_path) == ["a", "b"]


def test_held_signals_defers_or_drops():
    got = []
    old = signal.signal(signal.SIGUSR1, lambda *a: got.append("usr1"))  # not a stop signal
    try:
        with pytest.raises(KeyboardInterrupt):
            with _output.held_signals():
                signal.raise_signal(signal.SIGINT)
                got.append("inside")
        assert got == ["inside"]
        with _output.held_signals(redeliver=False):
            signal.raise_signal(signal.SIGINT)
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGUSR1, old)


# -- output_problem ------------------------------------------------------------

def test_output_problem_cases(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert _output.output_problem(str(tmp_path / "new" / "deeper"), "--report", folder=True) is None
    assert _output.output_problem(str(tmp_path / "x.html"), "--html") is None
    assert _output.output_problem(str(blocker), "--json") is None  # replaced atomically
    cases = [
        (str(blocker / "sub"), "--report", True, f"--report {blocker / 'sub'}: {blocker} is not a folder"),
        (str(blocker), "--report", True, f"--report {blocker}: exists and is not a folder"),
        (str(tmp_path), "--html", False, f"--html {tmp_path}: is a folder, not a file"),
        (str(blocker / "x.html"), "--html", False, f"--html {blocker / 'x.html'}: {blocker} is not a folder"),
    ]
    for path, option, folder, want in cases:
        assert _output.output_problem(path, option, folder=folder) == want
    assert os.listdir(tmp_path) == ["file"]  # the probe leaves nothing behind
    if os.path.isdir("/proc/self"):  # a folder no one can create files in, root included
        why = _output.output_problem("/proc/self/devicekit-report", "--report", folder=True)
        assert why.startswith("--report /proc/self/devicekit-report: /proc/self is not writable")


# -- the report writers --------------------------------------------------------

def _conformance_report(run_id, outcome="pass"):
    case = {"id": "ops/add/float32/odd", "section": "ops", "op": "add", "dtype": "float32",
            "seed": 1, "required": True, "level": "core", "outcome": outcome, "message": "",
            "duration_s": 0.01, "details": {}}
    run = {"run_id": run_id, "level": "core", "jobs": 1, "filter": [], "partial": False,
           "interrupted": False, "device_arg": "cpu:0", "plugin_arg": None,
           "duration_s": 0.1, "started": "2026-01-01T00:00:00+0000"}
    meta = {"devicekit_version": "0", "device_api_version": "1.4",
            "plugin": {"name": "cpu", "vendor": "v", "version": "0", "api_version": "1.4",
                       "library_path": "/x.so", "sha256": "0" * 64},
            "device": {"name": "cpu:0", "properties": {"name": "cpu", "dtypes": ["float32"]}},
            "kernels": []}
    return conformance_report.assemble(meta, run, [case], {"checked": False, "ok": True,
                                                           "reason": "test"}, {})


def _run_ids(folder):
    """The run id each file of a report set carries."""
    rep = json.loads((folder / "report.json").read_text())
    suites = ET.parse(folder / "junit.xml").getroot().findall("testsuite")
    junit = {p.get("value") for s in suites for p in s.iter("property")
             if p.get("name") == "devicekit.run_id"}
    html = (folder / "report.html").read_text()
    return rep["run"]["run_id"], junit, html


def test_a_report_set_carries_one_run_id(tmp_path):
    rid = conformance_report.new_run_id()
    conformance_report.write(_conformance_report(rid), str(tmp_path))
    json_id, junit_ids, html = _run_ids(tmp_path)
    assert json_id == rid and junit_ids == {rid}
    assert f'<meta name="devicekit-run-id" content="{rid}">' in html
    assert rid != conformance_report.new_run_id()


@pytest.mark.parametrize("renderer", ["html", "junit"])
def test_an_interrupted_report_write_leaves_the_previous_set(tmp_path, monkeypatch, renderer):
    """Ctrl-C while the new set is being made: the previous run's three files,
    byte for byte; never the new report.json next to the old report.html."""
    conformance_report.write(_conformance_report("a" * 32), str(tmp_path))
    before = _snapshot(tmp_path)

    def interrupted(report):
        raise KeyboardInterrupt

    if renderer == "html":
        monkeypatch.setattr("devicekit.conformance.html.render", interrupted)
    else:
        monkeypatch.setattr(conformance_report, "junit_xml", interrupted)
    with pytest.raises(KeyboardInterrupt):
        conformance_report.write(_conformance_report("b" * 32, "fail"), str(tmp_path))
    assert _snapshot(tmp_path) == before
    assert _run_ids(tmp_path)[:2] == ("a" * 32, {"a" * 32})


def test_a_full_disk_leaves_the_previous_models_report(tmp_path, monkeypatch):
    rep = _conformance_report("a" * 32)
    rep.update(suite="models", models={})
    rep["run"].update(steps=1, criterion="c")
    models_report.write(rep, str(tmp_path))
    before = _snapshot(tmp_path)
    real_fsync, calls = os.fsync, []

    def fsync(fd):
        calls.append(fd)
        if len(calls) == 3:  # report.html's temporary
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    with pytest.raises(_output.OutputError, match="report.html: cannot write: No space left"):
        models_report.write(dict(rep, run=dict(rep["run"], run_id="b" * 32)), str(tmp_path))
    assert _snapshot(tmp_path) == before
    json.loads((tmp_path / "report.json").read_text())


def test_report_html_lists_real_problems_first_and_folds_optional_gaps_per_op():
    """An op with 2 problems and 153 optional not-implemented cases
    shows the 2 as rows and the 153 as one line, after every real problem."""
    from devicekit.conformance import html as conformance_html

    def row(cid, outcome, required):
        _, op, dt, _ = cid.split("/")
        return {"id": cid, "section": "ops", "op": op, "dtype": dt, "seed": 1,
                "required": required, "level": "core", "outcome": outcome,
                "message": "", "duration_s": 0.01, "details": {}, "replay": f"devicekit replay {cid}"}
    optional = ["float16", "bfloat16", "int8"]
    rows = [row(f"ops/add/{optional[i % 3]}/c{i}", "not-implemented", False) for i in range(153)]
    rows += [row("ops/add/float32/bad", "fail", True),
             row("ops/add/float32/req", "not-implemented", True),
             row("ops/mul/float16/c0", "not-implemented", False),
             row("ops/exp/float32/odd", "crash", True)]
    rep = _conformance_report("r")
    rep = conformance_report.assemble({k: rep[k] for k in ("devicekit_version", "device_api_version",
                                                          "plugin", "device", "kernels")},
                                      rep["run"], rows, rep["corpus"], {})
    page = conformance_html.render(rep)
    folded = "add: 153 optional cases not implemented (float16, bfloat16, int8)"
    assert page.count(folded) == 1
    assert "ops/add/float16/c0" not in page and "ops/add/int8/c152" not in page
    assert "add (2 + 153 optional not implemented)" in page
    order = [page.index(s) for s in ("crash: ops/exp/float32/odd", "fail: ops/add/float32/bad",
                                     "not-implemented: ops/add/float32/req", folded,
                                     "mul: 1 optional cases not implemented (float16)")]
    assert order == sorted(order)
    for d in optional:  # the table's "missing" cells still link somewhere
        assert f'id="c-add-{d}"' in page
