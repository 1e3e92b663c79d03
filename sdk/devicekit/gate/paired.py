"""``gate check``'s performance rule, timed now: the baseline's binary and the
candidate's, alternately, on this machine (policy ``performance.timing =
"alternate"``, the release policy's choice; docs/gate.md "Performance timed
alternately").

Why: comparing the figures two records stored flaps. They were timed at
different times under whatever else the machine did then; on a loaded
2-core machine (load 12) the untouched reference plugin, byte-identical to
its baseline, was refused at 1.57x, 3.07x and 1.61x. Timing both
binaries in one run makes the load they see the same.

How (:func:`time_check`):

- the same file (the candidate's sha256 is the baseline's): nothing is
  timed, and the rule cannot refuse. Identical code has identical speed; any
  difference a timer would show is noise;
- otherwise each binary is loaded in its own worker process
  (:mod:`.perf_worker`: two builds of one plugin share a name and symbols),
  which prepares certify's performance set (:data:`.perf.SET`);
- figure by figure, a **round** times one side, then the other, alternating
  which goes first (ABBA...), so a drift in load falls on both; the round's
  paired ratio is candidate / baseline time per call;
- a side's time in a round is the best of :data:`BATCHES` back-to-back
  batches of calls (each ending with a device synchronize), per call: the
  best-of drops the batches another process preempted. Both sides run the
  same number of calls (together ~5 ms on the faster one): batches of
  different lengths see different shares of preemption under load, which
  made a binary look 11x slower than itself;
- a figure's rounds run in sessions of :data:`SESSION_ROUNDS`, each in a
  fresh pair of worker processes that prepare that one figure and time
  nothing else. Two kinds of history biased whole sessions when a pair of
  processes lived on: where the scheduler had placed a process's threads
  (the same code timed against itself gave medians from 0.3x to 4.9x with
  one pair at load 5 on 2 cores), and what the previous figure did to a
  process (a candidate that had slept through a slow add's rounds then ran
  mul 2.7x faster than the baseline when rounds went across figures, and
  3.45x slower, interval 2.97-4.34x over three pairs, when they followed
  each other, in CI under load). With a pair per figure and session, a bias
  must strike several independent pairs the same way to move a verdict, and
  no figure inherits another's;
- per figure the statistic is the **median of the paired ratios** (robust to
  the rounds a burst of other work hit), with a distribution-free interval
  from order statistics (:func:`median_interval`, ~95%) as its noise;
- a figure is refused when the whole interval is above ``max_slowdown``
  (slower than allowed at ~97.5% one-sided). A figure whose median is above
  the threshold but whose interval reaches below it after
  ``performance.rounds`` rounds gets more rounds, up to :data:`EXTEND` times
  as many; if it is still not shown slower, it is admitted with a note that
  gives its median and interval (a machine too noisy to tell must not flip
  the verdict from run to run).

Certify's plugin-vs-numpy figures (perf.py) use a ratio of bests because
there the two sides do different work and a median of per-round ratios
spread more; here both sides run the same calls, each round's ratio is
already a best-of, and the median with its interval says both the figure and
how sure it is.
"""

import json
import math
import os
import select
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass, field
from typing import List

from .._util import workers as _workers
from .errors import GateError, MissingInput
from .record import sha256_file

CONFIDENCE = 0.95
EXTEND = 3  # undecided figures run up to EXTEND x performance.rounds rounds
SESSION_ROUNDS = 5  # rounds per pair of worker processes (see "sessions" above)
BATCHES = 3  # a side's time in a round: the best of this many short batches
ANSWER_TIMEOUT_S = 120  # one batch, or a worker's start-up; a hung plugin ends here


class BaselineBinaryMismatch(GateError):
    """``--baseline-binary`` is not the binary the baseline record certifies."""

    exit_code = 2


@dataclass
class Timing:
    """What :func:`time_check` found; :func:`judge` turns it into reasons.

    ``state``: "same" (one binary: not timed), "absent" (no candidate file:
    the sha256 rule refuses it), "unavailable" (the baseline's binary is not
    here or does not run), "failed" (the candidate's worker failed), "timed"."""

    state: str
    detail: str = ""
    sha256: str = ""
    baseline: str = ""
    candidate: str = ""
    figures: List[dict] = field(default_factory=list)
    missing: List[dict] = field(default_factory=list)
    seconds: float = 0.0


def median_interval(xs, confidence=CONFIDENCE):
    """(median, low, high, coverage) of ``xs``: [low, high] is the
    distribution-free confidence interval of the median from order
    statistics (the k-th smallest and k-th largest, k from the binomial
    distribution), of coverage >= ``confidence`` where ``len(xs)`` allows it
    (5 values: at most 93.75%, the whole range)."""
    xs = sorted(xs)
    n = len(xs)
    tail, k, below = (1 - confidence) / 2, 0, 0.0
    while k < (n - 1) // 2:
        p = math.comb(n, k) / 2 ** n
        if below + p > tail:
            break
        below, k = below + p, k + 1
    k = max(k, 1)
    below = sum(math.comb(n, i) for i in range(k)) / 2 ** n
    return statistics.median(xs), xs[k - 1], xs[n - k], 1 - 2 * below


class WorkerFailed(Exception):
    def __init__(self, side, why):
        super().__init__(f"the {side}'s timing worker {why}")
        self.side = side


class _Worker:
    """One :mod:`.perf_worker` process; requests and answers are JSON lines."""

    def __init__(self, side, library, index, keys=()):
        self.side, self._buf = side, b""
        self._err = tempfile.TemporaryFile()
        # its own process group, killed whole (a plugin may start processes)
        self.proc = _workers.spawn(
            [sys.executable, "-m", "devicekit.gate.perf_worker", library, str(index), *keys],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._err)

    def _failed(self, why):
        self._err.seek(0)
        tail = " | ".join(self._err.read()[-1500:].decode("utf-8", "replace").strip()
                          .splitlines()[-3:])
        return WorkerFailed(self.side, why + (f"; stderr: {tail}" if tail else ""))

    def answer(self):
        fd, deadline = self.proc.stdout.fileno(), time.monotonic() + ANSWER_TIMEOUT_S
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise self._failed(f"gave no answer in {ANSWER_TIMEOUT_S} s")
            if select.select([fd], [], [], left)[0]:
                chunk = os.read(fd, 65536)
                if not chunk:
                    raise self._failed(f"exited with code {self.proc.wait()}")
                self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        msg = json.loads(line)
        if "error" in msg:
            raise self._failed(f"failed: {msg['error']}")
        return msg

    def batch(self, key, calls):
        """Seconds per call: the best of :data:`BATCHES` batches of ``calls``."""
        try:
            self.proc.stdin.write(f"{key} {calls} {BATCHES}\n".encode())
            self.proc.stdin.flush()
        except OSError:
            raise self._failed(f"exited with code {self.proc.wait()}") from None
        return self.answer()["seconds"]

    def close(self):
        _workers.finish(self.proc, last=b"quit\n", timeout=10)
        self.proc.stdout.close()
        self._err.close()


def _library(path, plugin, role, tmp):
    """(the library file to load for ``path``, None) or (None, why not).
    ``path`` is a library or a wheel; from a wheel, the member the record
    names (``plugin.wheel.library_member``), extracted with the rest of the
    wheel (a library may load siblings of its own)."""
    if not path.endswith(".whl"):
        return path, None
    member = (plugin.get("wheel") or {}).get("library_member")
    if not member:
        return None, f"the {role} record names no library in a wheel (certify with --wheel)"
    folder = os.path.join(tmp, role)
    try:
        with zipfile.ZipFile(path) as z:
            z.extractall(folder)
    except (OSError, zipfile.BadZipFile) as e:
        return None, f"{path}: cannot unpack the wheel ({e})"
    return os.path.join(folder, member), None


def _device_index(rec):
    try:
        return int(str(rec["device"]["name"]).rsplit(":", 1)[1])
    except (KeyError, IndexError, ValueError, TypeError):
        return 0


def time_check(new, base, policy, binary=None, baseline_binary=None, progress=None):
    """A :class:`Timing` of the candidate (``binary``, else the library the
    new record names) against the baseline's binary (``baseline_binary``, a
    library or wheel, else the library the baseline record names, if it is
    still that file). Raises :class:`MissingInput` (exit 3) for a
    ``baseline_binary`` that does not exist and
    :class:`BaselineBinaryMismatch` (exit 2) for one that is another binary."""
    want = base["plugin"]["sha256"]
    with tempfile.TemporaryDirectory(prefix="devicekit-gate-timing-") as tmp:
        cand, why = _library(binary or new["plugin"]["library_path"], new["plugin"],
                             "candidate", tmp)
        if cand is None or not os.path.isfile(cand):
            return Timing("absent", why or f"the candidate binary {cand} is not there")
        sha = sha256_file(cand)
        if sha == want:
            return Timing("same", sha256=sha, candidate=cand)
        if baseline_binary:
            if not os.path.exists(baseline_binary):
                raise MissingInput(baseline_binary, "--baseline-binary not found")
            lib, why = _library(baseline_binary, base["plugin"], "baseline", tmp)
            got = sha256_file(lib) if lib and os.path.isfile(lib) else None
            if got != want:
                raise BaselineBinaryMismatch(baseline_binary, why or (
                    f"--baseline-binary is not the binary the baseline certifies (its library's "
                    f"sha256 {str(got)[:16]}, the baseline's {want[:16]})"))
        else:
            lib = base["plugin"]["library_path"]
            if not os.path.isfile(lib):
                return Timing("unavailable", f"the baseline's binary is not on this machine (its "
                                             f"record names {lib}); pass it with "
                                             f"--baseline-binary")
            if sha256_file(lib) != want:
                return Timing("unavailable", f"{lib} is no longer the baseline's binary (its "
                                             f"sha256 changed: rebuilt or reinstalled since); "
                                             f"pass the certified one with --baseline-binary")
        return _time_both(lib, cand, _device_index(new), policy, progress)


def _start(base_lib, cand_lib, index, keys=()):
    """Both workers, started together, preparing ``keys`` (none: every
    figure); ({side: worker}, {side: ready answer})."""
    workers = {"baseline": _Worker("baseline", base_lib, index, keys),
               "candidate": _Worker("candidate", cand_lib, index, keys)}
    try:
        return workers, {side: w.answer() for side, w in workers.items()}
    except WorkerFailed:
        for w in workers.values():
            w.close()
        raise


def _time_both(base_lib, cand_lib, index, policy, progress):
    t0, target, limit = time.monotonic(), policy.rounds, EXTEND * policy.rounds
    try:
        # which figures both sides time: one pair, started and closed
        workers, ready = _start(base_lib, cand_lib, index)
        for w in workers.values():
            w.close()
        keys, missing = _figures(ready)
        if progress:
            progress(f"timing the baseline's and the candidate's binaries alternately: "
                     f"{len(keys)} figures x {target} rounds (up to {limit}), in sessions of "
                     f"{SESSION_ROUNDS}, each a fresh pair of processes ...")
        ratios = {k: [] for k in keys}
        per_call = {k: {"baseline": [], "candidate": []} for k in keys}
        active, done = list(keys), 0
        while active and done < limit:
            n = min(SESSION_ROUNDS, (target if done < target else limit) - done)
            for k in active:
                _session(base_lib, cand_lib, index, k, done, n, ratios, per_call)
            done += n
            if done >= target:
                active = [k for k in active if _undecided(ratios[k], policy.max_slowdown)]
    except WorkerFailed as e:
        return Timing("unavailable" if e.side == "baseline" else "failed", str(e),
                      baseline=base_lib, candidate=cand_lib)
    figures = []
    for k in keys:
        med, low, high, cover = median_interval(ratios[k])
        figures.append({"key": k, "rounds": len(ratios[k]), "median": med, "low": low,
                        "high": high, "coverage": cover,
                        "baseline_s": statistics.median(per_call[k]["baseline"]),
                        "candidate_s": statistics.median(per_call[k]["candidate"]),
                        "ratios": [round(r, 4) for r in ratios[k]]})
    return Timing("timed", baseline=base_lib, candidate=cand_lib, figures=figures,
                  missing=missing, seconds=time.monotonic() - t0)


def _figures(ready):
    """(figure keys both sides time, in certify's order; [{key, reason}] the
    baseline times and the candidate cannot)."""
    have = {f["key"] for f in ready["candidate"]["figures"]}
    why = {s["key"]: s["reason"] for s in ready["candidate"]["skipped"]}
    keys = [f["key"] for f in ready["baseline"]["figures"] if f["key"] in have]
    missing = [{"key": f["key"], "reason": why.get(f["key"], "the candidate has no such figure")}
               for f in ready["baseline"]["figures"] if f["key"] not in have]
    return keys, missing


def _undecided(ratios, threshold):
    """Whether a figure looks slower than allowed (its median is above the
    threshold) but is not shown to be (its interval reaches below): only then
    can more rounds change the verdict."""
    median, low, _, _ = median_interval(ratios)
    return low <= threshold < median


def _session(base_lib, cand_lib, index, key, first, n, ratios, per_call):
    """Rounds ``first`` .. ``first + n - 1`` of figure ``key``, in a fresh pair
    of workers that prepare only that figure, appended to ``ratios``
    ({key: [candidate / baseline per round]}) and ``per_call`` ({key: {side:
    [seconds per call]}}). Both sides run the same calls per batch: ~5 ms of
    the faster side's, split over :data:`BATCHES` batches."""
    workers, ready = _start(base_lib, cand_lib, index, (key,))
    try:
        base, cand = workers["baseline"], workers["candidate"]
        calls = max(f["calls"] for side in ready.values() for f in side["figures"]
                    if f["key"] == key)
        calls = max(1, calls // BATCHES)
        base.batch(key, calls)  # a warm-up pair, not counted
        cand.batch(key, calls)
        for r in range(first, first + n):
            if r % 2 == 0:
                b, c = base.batch(key, calls), cand.batch(key, calls)
            else:
                c, b = cand.batch(key, calls), base.batch(key, calls)
            per_call[key]["baseline"].append(b)
            per_call[key]["candidate"].append(c)
            ratios[key].append(c / max(b, 1e-12))
    finally:
        for w in workers.values():
            w.close()


def judge(timing, policy):
    """(refusals as (rule, subject, baseline, new, detail), notes) of a
    :class:`Timing` under ``policy``; ``timing`` None: nothing was timed
    (``gate matrix``, or check() called on records alone)."""
    if timing is None:
        return [], ['performance not judged from the records: the policy times the binaries '
                    'alternately (performance.timing = "alternate"), which `devicekit gate '
                    'check` does']
    if timing.state == "same":
        return [], [f"performance: the candidate is the baseline's binary (sha256 "
                    f"{timing.sha256[:16]}): the same code, nothing to time"]
    if timing.state == "absent":
        return [], [f"performance not timed: {timing.detail}"]
    if timing.state == "unavailable":
        if policy.other_machine == "refuse":
            return [("performance.machine", "performance", "timed here", "not timed",
                     timing.detail)], []
        return [], [f"performance not compared: {timing.detail} "
                    f'(performance.other_machine = "skip")']
    if timing.state == "failed":
        return [("performance.missing", "performance", "timed", "not timed", timing.detail)], []
    t = policy.max_slowdown
    refusals = [("performance.missing", m["key"], "timed", "not timed", m["reason"])
                for m in timing.missing]
    notes, summary = [], []
    for f in timing.figures:
        what = (f"{f['median']:.2f}x (median of {f['rounds']} alternating rounds on this "
                f"machine; {f['coverage']:.0%} interval {f['low']:.2f}-{f['high']:.2f}x)")
        summary.append(f"{f['key']} {f['median']:.2f}x [{f['low']:.2f}-{f['high']:.2f}]")
        if f["low"] > t:
            refusals.append(("performance.slowdown", f["key"], f"{f['baseline_s'] * 1e6:.1f} us",
                             f"{f['candidate_s'] * 1e6:.1f} us",
                             f"{what} > threshold {t:g}x"))
        elif f["median"] > t:
            notes.append(f"performance: {f['key']} {what}: the interval contains the threshold "
                         f"{t:g}x, so a slowdown is not shown on this machine now (too noisy to "
                         f"tell); not refused")
    notes.insert(0, f"performance timed alternately on this machine in {timing.seconds:.1f} s, "
                    f"candidate / baseline: {'; '.join(summary)}")
    return refusals, notes


def progress_line(message):
    print(f"devicekit gate check: {message}", file=sys.stderr)


__all__ = ["BaselineBinaryMismatch", "Timing", "judge", "median_interval", "time_check"]
