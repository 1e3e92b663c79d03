"""``devicekit._util.workers.finish``: how the suites' and ``gate check``'s worker
processes end (a last request, end of input, a bounded wait, then the whole
process group killed)."""

import os
import subprocess
import sys
import time

from devicekit._util import workers as _workers

# A worker that answers "bye" to a quit line and exits 0 at end of input.
POLITE = ("import sys\n"
          "for line in sys.stdin:\n"
          "    if line.strip() == 'quit':\n"
          "        sys.exit(7)\n")
# A worker that starts a grandchild (printing its pid) and then ignores its
# input: only killing the process group ends both.
STUBBORN = ("import subprocess, sys, time\n"
            "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
            "print(c.pid, flush=True)\n"
            "sys.stdin.close()\n"
            "time.sleep(600)\n")


def _spawn(code):
    return _workers.spawn([sys.executable, "-c", code], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE)


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie is gone for our purpose
        return f.read().split(")")[-1].split()[0] != "Z"


def test_last_line_is_delivered_and_the_exit_status_returned():
    proc = _spawn(POLITE)
    assert _workers.finish(proc, last=b"quit\n", timeout=10) == 7


def test_end_of_input_alone_ends_a_worker_that_reads_to_the_end():
    proc = _spawn(POLITE)
    assert _workers.finish(proc, timeout=10) == 0


def test_a_worker_that_ignores_its_input_is_killed_with_its_children():
    proc = _spawn(STUBBORN)
    grandchild = int(proc.stdout.readline())
    t0 = time.monotonic()
    rc = _workers.finish(proc, last=b"quit\n", timeout=1)
    assert rc == -9 and time.monotonic() - t0 < 300  # far from the worker's own 600 s
    deadline = time.monotonic() + 120  # the kill is sent; this only bounds a hung reap
    while _alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(grandchild)


def test_now_kills_without_waiting():
    proc = _spawn(STUBBORN)
    proc.stdout.readline()
    t0 = time.monotonic()
    assert _workers.finish(proc, now=True, timeout=600) == -9
    assert time.monotonic() - t0 < 300  # did not wait out the 600 s


def test_a_worker_that_already_died_is_reaped_without_error():
    proc = _spawn("import sys; sys.exit(3)")
    proc.wait()
    assert _workers.finish(proc, last=b"quit\n", timeout=5) == 3


# A worker that, on SIGTERM, writes a file named by its argument and exits 143
# (as a coverage build's handler writes its counters): stdin is ignored.
TERM_WRITER = ("import signal, sys, time\n"
               "def on_term(sig, frame):\n"
               "    open(sys.argv[1], 'w').write('counters')\n"
               "    sys.exit(143)\n"
               "signal.signal(signal.SIGTERM, on_term)\n"
               "print('ready', flush=True)\n"
               "time.sleep(600)\n")


def test_grace_sends_sigterm_first_and_waits_for_the_worker(tmp_path):
    out = tmp_path / "counters"
    proc = _workers.spawn([sys.executable, "-c", TERM_WRITER, str(out)], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE)
    assert proc.stdout.readline().strip() == b"ready"
    assert _workers.finish(proc, now=True, grace=60) == 143
    assert out.read_text() == "counters"


def test_grace_ends_in_sigkill_for_a_worker_that_ignores_sigterm():
    proc = _spawn("import signal, time\n"
                  "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                  "print('ready', flush=True)\n"
                  "time.sleep(600)\n")
    assert proc.stdout.readline().strip() == b"ready"
    t0 = time.monotonic()
    assert _workers.finish(proc, now=True, grace=0.5) == -9
    assert time.monotonic() - t0 < 300


def test_without_grace_no_sigterm_is_sent(tmp_path):
    out = tmp_path / "counters"
    proc = _workers.spawn([sys.executable, "-c", TERM_WRITER, str(out)], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE)
    assert proc.stdout.readline().strip() == b"ready"
    assert _workers.finish(proc, now=True) == -9
    assert not out.exists()
