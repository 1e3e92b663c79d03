"""``devicekit report merge``: the reports of ``--shard K/N`` runs joined into
the report of the single run (docs/scale.md).

The merged report.json, junit.xml and report.html are the ones the single
run writes: case rows come back in the single run's order (the shards are
interleaved, :mod:`.shard`), the summary and the corpus check are computed
again over all rows by the suites' own code (``conformance.report.assemble``,
``conformance.registry.judge_corpus``). Only :data:`RUN_SPECIFIC` fields
differ from a single run's, and :func:`comparable` drops them.

Inputs are refused, with one line naming the file and the problem, an exit
code per kind and nothing written, when they cannot make one run: a missing
file, a truncated or corrupted one or a report made without ``--shard``
(:class:`BadReport`); shards of different plugin binaries (sha256); of
different DeviceKit versions; or that do not form one run (another split,
suite, level, filter, model list; a shard given twice or missing).

Shard reports are untrusted input (they travel between machines and CI jobs),
so nothing in one decides how much work the merge does: a file is
``stat``-ed before it is read (:data:`MAX_REPORT_BYTES`, regular files only),
its nesting is bounded (:data:`MAX_DEPTH`; no ``RecursionError``), every field
the merge and the renderers read is checked for its type (:func:`parse`), and
counts such as ``units_total`` are only compared with the rows that are there,
never used to size anything. A case id that appears twice, in one shard or in
two, is refused naming it: it would be counted twice.
"""

import json
import math
import os
import re

from .._util.bounded import Unreadable, read_bounded, truncated_or_corrupted
from ..errors import InputFileError
from . import shard as sharding

# The report of the whole conformance suite (5000 cases) is ~2 MB, a models
# report less; 256 MiB leaves room for suites 100x larger and still
# refuses a runaway or hostile file before reading a byte of it.
MAX_REPORT_BYTES = 256 << 20
MAX_DEPTH = 32  # reports nest 6 deep; a deeper one is not a report

# Fields that differ between two runs of the same cases on the same machine,
# and so between a merged report and the single run's. Everything else is
# identical. cases[].duration_s: per case (models: since its worker started);
# run.duration_s (merged: the sum over the shards, machine time), run.started
# (merged: the earliest shard's), run.jobs (merged: the sum), run.shards
# (merged only: where each shard came from); device.properties.total_memory
# is host state (the reference CPU plugin sizes its device from the memory
# free when it loads; the gate's record treats it the same way).
RUN_SPECIFIC = ("cases[].duration_s", "run.run_id", "run.duration_s", "run.started", "run.jobs",
                "run.shards", "device.properties.total_memory")


class MergeError(InputFileError):
    """Why shard reports cannot be merged; ``exit_code`` is the CLI's."""


class MissingReport(MergeError):
    exit_code = 3


class BadReport(MergeError):
    """Not valid JSON (truncated, corrupted), not a report, or not a shard's."""

    exit_code = 4


class PluginMismatch(MergeError):
    exit_code = 5


class VersionMismatch(MergeError):
    exit_code = 6


class ShardSetMismatch(MergeError):
    """The shards do not form one run: another split or selection, overlap, a gap."""

    exit_code = 7


def load(path):
    """(report.json path, report) of a shard; ``path`` may be its --report folder.
    The file is looked at before it is read: a shard report larger than
    :data:`MAX_REPORT_BYTES` or not a regular file is refused unread."""
    file = os.path.join(path, "report.json") if os.path.isdir(path) else path
    try:  # looked at before it is read
        raw = read_bounded(file, MAX_REPORT_BYTES)
    except Unreadable as e:
        if e.kind == "missing":
            raise MissingReport(file, "shard report not found") from None
        if e.kind == "unreadable":
            raise MissingReport(file, f"cannot read the shard report: {e.reason}") from None
        if e.kind == "not_regular":
            raise BadReport(file, "not a regular file (a shard report is a report.json)") from None
        size = f"{e.size} bytes: larger" if e.size is not None else "larger"
        raise BadReport(file, f"{size} than a shard report can be ({MAX_REPORT_BYTES} "
                              f"bytes); not read") from None
    return file, parse(raw, file)


def _too_deep(value, limit=MAX_DEPTH):
    """Whether ``value`` nests lists/dicts deeper than ``limit`` (iterative:
    the check itself cannot overflow the stack)."""
    todo = [(value, 0)]
    while todo:
        v, d = todo.pop()
        if isinstance(v, (list, dict)):
            if d >= limit:
                return True
            todo.extend((x, d + 1) for x in (v.values() if isinstance(v, dict) else v))
    return False


def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


# field -> (check, what it must be); the fields the merge and the suites'
# renderers read. Rows: every case; "unit key" is checked per suite below.
_ROW = {
    "id": (lambda v: isinstance(v, str) and v != "", "a non-empty string"),
    "section": (lambda v: isinstance(v, str), "a string"),
    "op": (lambda v: v is None or isinstance(v, str), "a string or null"),
    "dtype": (lambda v: v is None or isinstance(v, str), "a string or null"),
    "required": (lambda v: isinstance(v, bool), "true or false"),
    "duration_s": (lambda v: _is_number(v) and v >= 0, "a finite number >= 0"),
}
_ROW_OPTIONAL = {
    "message": (lambda v: isinstance(v, str), "a string"),
    "replay": (lambda v: isinstance(v, str), "a string"),
    "details": (lambda v: isinstance(v, dict), "an object"),
    "ran": (lambda v: isinstance(v, list) and all(
        isinstance(p, list) and len(p) == 2 and all(isinstance(x, str) for x in p) for p in v),
        "a list of [op, dtype] pairs"),
}
_RUN = {
    "duration_s": (lambda v: _is_number(v) and v >= 0, "a finite number >= 0"),
    "started": (lambda v: isinstance(v, str), "a string"),
    "jobs": (lambda v: _is_int(v) and v >= 0, "an integer >= 0"),
}


def _check_fields(name, where, obj, fields, optional=False):
    for key, (ok, what) in fields.items():
        if key not in obj:
            if optional:
                continue
            raise BadReport(name, f"{where}: field '{key}' is missing")
        if not ok(obj[key]):
            raise BadReport(name, f"{where}: field '{key}' is not {what}: {str(obj[key])[:60]!r}")


def _check_rows(rep, name):
    from ..conformance.case import OUTCOMES

    models = rep.get("suite") == "models"
    seen = set()
    for i, row in enumerate(rep["cases"]):
        if not isinstance(row, dict):
            raise BadReport(name, f"cases[{i}] is not an object")
        _check_fields(name, f"cases[{i}]", row, _ROW)
        _check_fields(name, f"cases[{i}] ({row['id']})", row, _ROW_OPTIONAL, optional=True)
        if row.get("outcome") not in OUTCOMES:
            raise BadReport(name, f"case {row['id']}: outcome {str(row.get('outcome'))[:40]!r} "
                                  f"is not one of {', '.join(OUTCOMES)}")
        if models and not isinstance(row["op"], str):
            raise BadReport(name, f"case {row['id']}: field 'op' (the model) is not a string")
        if row["id"] in seen:
            raise BadReport(name, f"case id {row['id']} appears twice in this shard (it would "
                                  f"be counted twice); the report was edited or is corrupted")
        seen.add(row["id"])


def parse(raw, name):
    """A shard report from its bytes; ``name`` (a path) is what errors cite."""
    try:
        rep = json.loads(raw.decode("utf-8") if isinstance(raw, bytes) else raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        text = raw if isinstance(raw, bytes) else raw.encode()
        raise BadReport(name, f"not valid JSON ({truncated_or_corrupted(text, e)}?): {e}") from None
    except RecursionError:
        raise BadReport(name, "nests deeper than a report does (not a report)") from None
    if _too_deep(rep):
        raise BadReport(name, f"nests deeper than {MAX_DEPTH} levels (not a report)")
    if not isinstance(rep, dict) or not isinstance(rep.get("cases"), list) or \
            not isinstance(rep.get("run"), dict) or not isinstance(rep.get("plugin"), dict):
        raise BadReport(name, "not a devicekit conformance or models report.json")
    blk = rep["run"].get("shard")
    if not isinstance(blk, dict):
        raise BadReport(name, "not a shard report (made without --shard K/N)")
    for key, kind in (("index", int), ("count", int), ("unit", str), ("units_total", int),
                      ("units_sha256", str)):
        if not isinstance(blk.get(key), kind) or isinstance(blk.get(key), bool):
            raise BadReport(name, f"field 'run.shard.{key}' is missing or not {kind.__name__}")
    if not 1 <= blk["index"] <= blk["count"] <= blk["units_total"]:
        raise BadReport(name, f"run.shard is {blk['index']}/{blk['count']} of "
                              f"{blk['units_total']} units: not 1 <= K <= N <= units")
    if blk["unit"] not in ("case", "model"):
        raise BadReport(name, f"run.shard.unit is {blk['unit'][:40]!r}, not 'case' or 'model'")
    if rep["run"].get("interrupted"):
        raise BadReport(name, f"shard {blk['index']}/{blk['count']} was interrupted; run it again")
    suite = rep.get("suite", "conformance")
    if suite not in ("conformance", "models"):
        raise BadReport(name, f"field 'suite' is {str(suite)[:40]!r}, not conformance or models")
    for key in ("device", "corpus"):
        if not isinstance(rep.get(key), dict):
            raise BadReport(name, f"field '{key}' is missing or not an object")
    if not isinstance(rep["device"].get("name"), str) or \
            not isinstance(rep["device"].get("properties", {}), dict):
        raise BadReport(name, "field 'device' lacks its name or properties")
    for key in ("implementation", "unavailable_sections", "models"):
        if rep.get(key) is not None and not isinstance(rep[key], dict):
            raise BadReport(name, f"field '{key}' is not an object")
    _check_fields(name, "run", rep["run"], _RUN, optional=True)
    if suite == "models":
        for key in ("executed", "expected_min"):
            if not _is_int(rep["corpus"].get(key, 0)):
                raise BadReport(name, f"field 'corpus.{key}' is not an integer")
    else:
        floor = blk.get("floor")
        if floor is not None and not (
                isinstance(floor, dict) and isinstance(floor.get("sections"), dict)
                and all(_is_int(n) for n in floor["sections"].values())
                and isinstance(floor.get("pairs"), list)
                and all(isinstance(p, list) and len(p) == 3 and isinstance(p[0], str)
                        and (p[1] is None or isinstance(p[1], str)) and _is_int(p[2])
                        for p in floor["pairs"])):
            raise BadReport(name, "field 'run.shard.floor' is not {pairs: [[op, dtype, n]], "
                                  "sections: {name: n}}")
        if not _is_int(blk.get("cases_all", 0)):
            raise BadReport(name, "field 'run.shard.cases_all' is not an integer")
    _check_rows(rep, name)
    return rep


def _unit_rows(rep):
    """{unit id: [rows]} in report order: a case, or a model's cases."""
    key = "op" if rep["run"]["shard"]["unit"] == "model" else "id"
    out = {}
    for row in rep["cases"]:
        out.setdefault(row[key], []).append(row)
    return out


def _check_set(items):
    """Refuses shards that cannot make one run; returns them ordered by index."""
    (p0, r0), b0 = items[0], items[0][1]["run"]["shard"]
    suite0 = r0.get("suite", "conformance")
    for path, rep in items[1:]:
        blk, suite = rep["run"]["shard"], rep.get("suite", "conformance")
        if rep["plugin"].get("sha256") != r0["plugin"].get("sha256"):
            raise PluginMismatch(path, f"plugin {rep['plugin'].get('name')} sha256 "
                                       f"{str(rep['plugin'].get('sha256'))[:16]} differs from "
                                       f"{p0}'s ({r0['plugin'].get('name')} sha256 "
                                       f"{str(r0['plugin'].get('sha256'))[:16]}); shards must "
                                       f"test one plugin binary")
        mine = (rep.get("devicekit_version"), rep.get("device_api_version"))
        theirs = (r0.get("devicekit_version"), r0.get("device_api_version"))
        if mine != theirs:
            raise VersionMismatch(path, f"made by DeviceKit {mine[0]} (device API {mine[1]}) but "
                                        f"{p0} by DeviceKit {theirs[0]} (device API {theirs[1]}); "
                                        f"run every shard with one DeviceKit")
        if suite != suite0:
            raise ShardSetMismatch(path, f"a {suite} report, but {p0} is a {suite0} report")
        if blk["count"] != b0["count"]:
            raise ShardSetMismatch(path, f"shard {blk['index']}/{blk['count']}, but {p0} is "
                                         f"shard {b0['index']}/{b0['count']}: one run uses one N")
        for key in ("level", "filter", "steps", "dtypes"):
            if rep["run"].get(key) != r0["run"].get(key):
                raise ShardSetMismatch(path, f"run.{key} is {rep['run'].get(key)!r} but "
                                             f"{p0}'s is {r0['run'].get(key)!r}")
        if (blk["units_sha256"], blk["units_total"]) != (b0["units_sha256"], b0["units_total"]):
            raise ShardSetMismatch(path, f"its shards split another {blk['unit']} list "
                                         f"({blk['units_total']} {blk['unit']}s) than {p0}'s "
                                         f"({b0['units_total']}): another device, filter or "
                                         f"model list")
    n, seen = b0["count"], {}
    for path, rep in items:
        k = rep["run"]["shard"]["index"]
        if k in seen:
            raise ShardSetMismatch(path, f"overlapping shards: shard {k}/{n} is given twice "
                                         f"(also as {seen[k]})")
        seen[k] = path
    if len(seen) < n:  # name the first few missing; never walk 1..N (N is the file's word)
        missing, k = [], 1
        while len(missing) < 5 and k <= n:
            if k not in seen:
                missing.append(f"{k}/{n}")
            k += 1
        more = n - len(seen) - len(missing)
        have = ", ".join(f"{k}/{n}" for k in sorted(seen))
        raise ShardSetMismatch(p0, f"missing shard{'s' if n - len(seen) > 1 else ''} "
                                   f"{', '.join(missing)}{f' and {more} more' if more else ''} "
                                   f"(have {have})")
    return sorted(items, key=lambda item: item[1]["run"]["shard"]["index"])


def merge(items):
    """The single run's report from [(path, shard report)] (see :func:`load`)."""
    from ..conformance import report as conformance_report

    if not items:
        raise MergeError("report merge", "no shard reports given")
    items = _check_set(items)
    first = items[0][1]
    blk0, n = first["run"]["shard"], first["run"]["shard"]["count"]
    owner = {}  # case id -> the shard holding it: one case, one row, in one shard
    for path, rep in items:
        for row in rep["cases"]:
            if row["id"] in owner:
                raise ShardSetMismatch(path, f"case id {row['id']} is also in {owner[row['id']]} "
                                             f"(it would be counted twice): the shards overlap")
            owner[row["id"]] = path
    per_shard = {}
    for path, rep in items:
        k = rep["run"]["shard"]["index"]
        mine = _unit_rows(rep)
        # len(range()) is arithmetic: units_total sizes nothing before it is
        # matched with the rows that are really there
        want = len(range(k - 1, blk0["units_total"], n))
        if len(mine) != want:
            raise BadReport(path, f"shard {k}/{n} holds {len(mine)} {blk0['unit']}s, expected "
                                  f"{want} of {blk0['units_total']}: the report is incomplete "
                                  f"or was edited")
        per_shard[k] = mine
    units, grouped = [None] * blk0["units_total"], {}  # now the sum of the rows' units
    for k, mine in per_shard.items():
        units[k - 1::n] = list(mine)
        grouped.update(mine)
    if sharding.ids_sha256(units) != blk0["units_sha256"]:
        raise ShardSetMismatch(items[0][0], f"the shards' {blk0['unit']}s, interleaved, are not "
                                            f"the run's list (units_sha256 differs): a shard was "
                                            f"edited or comes from another run")
    rows = [row for u in units for row in grouped[u]]
    run = {k: v for k, v in first["run"].items() if k != "shard"}
    runs = [rep["run"] for _, rep in items]
    from ..conformance.report import new_run_id

    # the merged set is a report set of its own: a fresh id, the shards' ids kept below
    run.update(run_id=new_run_id(), duration_s=round(sum(r.get("duration_s", 0.0) for r in runs), 3),
               started=min(str(r.get("started", "")) for r in runs),
               jobs=sum(r.get("jobs", 0) for r in runs),
               shards=[{"index": r["shard"]["index"], "run_id": r.get("run_id"),
                        "started": r.get("started"),
                        "duration_s": r.get("duration_s"), "jobs": r.get("jobs"), "report": p}
                       for (p, _), r in zip(items, runs)])
    suite = first.get("suite", "conformance")
    meta = {k: v for k, v in first.items() if k not in (
        "schema_version", "run", "summary", "implementation", "corpus", "unavailable_sections",
        "cases", "suite", "models", "torch")}  # (torch: added up again from all the rows)
    if suite == "models":
        run["models"] = units
        executed = sum(rep["corpus"].get("executed", 0) for _, rep in items)
        expected = sum(rep["corpus"].get("expected_min", 0) for _, rep in items)
        corpus = {"checked": True, "ok": executed == expected, "executed": executed,
                  "expected_min": expected, "short": [] if executed == expected else
                  [f"{expected - executed} cases got no result"]}
    else:
        from ..conformance.cli import partial_corpus
        from ..conformance.registry import judge_corpus

        run["partial"] = bool(blk0.get("partial"))
        if blk0.get("floor"):
            corpus = judge_corpus(blk0["floor"], rows)
        else:
            corpus = partial_corpus(f"filter {run.get('filter')}", len(rows),
                                    blk0.get("cases_all", len(rows)), blk0.get("unbuilt", ()))
    rep = conformance_report.assemble(meta, run, rows, corpus,
                                      first.get("unavailable_sections", {}),
                                      first.get("implementation"))
    if suite == "models":
        rep["suite"] = "models"
        infos = {}
        for _, r in items:
            infos.update(r.get("models") or {})
        rep["models"] = {m: infos[m] for m in units if m in infos}
    return rep


def render(rep):
    """{file name: text} of the report family, as the suite's own ``write``."""
    if rep.get("suite") == "models":
        from ..models.report import junit_xml, render_html
    else:
        from ..conformance.html import render as render_html
        from ..conformance.report import junit_xml
    return {"report.json": json.dumps(rep, indent=1, default=str),
            "junit.xml": junit_xml(rep), "report.html": render_html(rep)}


def write(rep, folder, texts=None):
    """Writes the three files (``texts``: :func:`render`'s, if already made)
    as one set (``devicekit._util.output.write_files``): all three or none, each
    through a temporary name in ``folder``. Returns {name: path}; raises
    :class:`~devicekit._util.output.OutputError` (the previous files stay)."""
    from .._util.output import write_files

    texts = texts if texts is not None else render(rep)
    paths = {name: os.path.join(folder, name) for name in texts}
    write_files({paths[name]: text for name, text in texts.items()})
    return paths


# _output.write_files' temporary names for the three files: ".report.json.<random>.tmp"
_TEMP = re.compile(r"^\.(report\.json|junit\.xml|report\.html)\.[A-Za-z0-9_]+\.tmp$")


def remove_stale_temps(folder):
    """Removes temporary files a killed merge left in ``folder`` and returns
    their names. A SIGKILL (or a power cut) between writing a temporary and
    renaming it cannot be caught, so the next merge into the folder cleans up
    instead; only names of this exact pattern (a dot, one of the three file
    names, mkstemp's random part, ``.tmp``) are touched. Two merges writing
    one folder at the same time are not supported (their sets would mix)."""
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    gone = []
    for name in names:
        path = os.path.join(folder, name)
        if _TEMP.match(name) and os.path.isfile(path) and not os.path.islink(path):
            try:
                os.unlink(path)
                gone.append(name)
            except OSError:
                pass
    return gone


def comparable(rep):
    """``rep`` without its :data:`RUN_SPECIFIC` fields (a copy)."""
    out = json.loads(json.dumps(rep, default=str))
    for key in ("run_id", "duration_s", "started", "jobs", "shards"):
        out["run"].pop(key, None)
    for row in out["cases"]:
        row.pop("duration_s", None)
    out.get("device", {}).get("properties", {}).pop("total_memory", None)
    return out
