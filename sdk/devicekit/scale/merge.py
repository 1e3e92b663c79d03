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
"""

import json
import os

from ..errors import InputFileError
from . import shard as sharding

# Fields that differ between two runs of the same cases on the same machine,
# and so between a merged report and the single run's. Everything else is
# identical. cases[].duration_s: per case (models: since its worker started);
# run.duration_s (merged: the sum over the shards, machine time), run.started
# (merged: the earliest shard's), run.jobs (merged: the sum), run.shards
# (merged only: where each shard came from); device.properties.total_memory
# is host state (the reference CPU plugin sizes its device from the memory
# free when it loads; the gate's record treats it the same way).
RUN_SPECIFIC = ("cases[].duration_s", "run.duration_s", "run.started", "run.jobs", "run.shards",
                "device.properties.total_memory")


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
    """(report.json path, report) of a shard; ``path`` may be its --report folder."""
    file = os.path.join(path, "report.json") if os.path.isdir(path) else path
    try:
        with open(file, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        raise MissingReport(file, "shard report not found") from None
    except OSError as e:
        raise MissingReport(file, f"cannot read the shard report: {e.strerror}") from None
    return file, parse(raw, file)


def parse(raw, name):
    """A shard report from its bytes; ``name`` (a path) is what errors cite."""
    try:
        rep = json.loads(raw.decode("utf-8") if isinstance(raw, bytes) else raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        text = raw if isinstance(raw, bytes) else raw.encode()
        what = "truncated" if text and not text.rstrip().endswith(b"}") else "corrupted"
        raise BadReport(name, f"not valid JSON ({what}?): {e}") from None
    if not isinstance(rep, dict) or not isinstance(rep.get("cases"), list) or \
            not isinstance(rep.get("run"), dict) or not isinstance(rep.get("plugin"), dict):
        raise BadReport(name, "not a devicekit conformance or models report.json")
    blk = rep["run"].get("shard")
    if not isinstance(blk, dict):
        raise BadReport(name, "not a shard report (made without --shard K/N)")
    for key, kind in (("index", int), ("count", int), ("unit", str), ("units_total", int),
                      ("units_sha256", str)):
        if not isinstance(blk.get(key), kind):
            raise BadReport(name, f"field 'run.shard.{key}' is missing or not {kind.__name__}")
    if rep["run"].get("interrupted"):
        raise BadReport(name, f"shard {blk['index']}/{blk['count']} was interrupted; run it again")
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
    missing = [f"{k}/{n}" for k in range(1, n + 1) if k not in seen]
    if missing:
        have = ", ".join(f"{k}/{n}" for k in sorted(seen))
        raise ShardSetMismatch(p0, f"missing shard{'s' if len(missing) > 1 else ''} "
                                   f"{', '.join(missing)} (have {have})")
    return sorted(items, key=lambda item: item[1]["run"]["shard"]["index"])


def merge(items):
    """The single run's report from [(path, shard report)] (see :func:`load`)."""
    from ..conformance import report as conformance_report

    if not items:
        raise MergeError("report merge", "no shard reports given")
    items = _check_set(items)
    first = items[0][1]
    blk0, n = first["run"]["shard"], first["run"]["shard"]["count"]
    units = [None] * blk0["units_total"]
    grouped = {}
    for path, rep in items:
        k = rep["run"]["shard"]["index"]
        mine = _unit_rows(rep)
        want = len(range(k - 1, blk0["units_total"], n))
        if len(mine) != want:
            raise BadReport(path, f"shard {k}/{n} holds {len(mine)} {blk0['unit']}s, expected "
                                  f"{want}: the report is incomplete or was edited")
        units[k - 1::n] = list(mine)
        grouped.update(mine)
    if sharding.ids_sha256(units) != blk0["units_sha256"]:
        raise ShardSetMismatch(items[0][0], f"the shards' {blk0['unit']}s, interleaved, are not "
                                            f"the run's list (units_sha256 differs): a shard was "
                                            f"edited or comes from another run")
    rows = [row for u in units for row in grouped[u]]
    run = {k: v for k, v in first["run"].items() if k != "shard"}
    runs = [rep["run"] for _, rep in items]
    run.update(duration_s=round(sum(r.get("duration_s", 0.0) for r in runs), 3),
               started=min(str(r.get("started", "")) for r in runs),
               jobs=sum(r.get("jobs", 0) for r in runs),
               shards=[{"index": r["shard"]["index"], "started": r.get("started"),
                        "duration_s": r.get("duration_s"), "jobs": r.get("jobs"), "report": p}
                       for (p, _), r in zip(items, runs)])
    suite = first.get("suite", "conformance")
    meta = {k: v for k, v in first.items() if k not in (
        "schema_version", "run", "summary", "implementation", "corpus", "unavailable_sections",
        "cases", "suite", "models")}
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
                                    blk0.get("cases_all", len(rows)))
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


def write(rep, folder):
    """Writes the three files, each to a temporary name renamed into place,
    only after all three rendered (an error leaves nothing behind)."""
    from ..gate.record import write_text

    texts = render(rep)
    paths = {}
    for name, text in texts.items():
        paths[name] = os.path.join(folder, name)
        write_text(text, paths[name])
    return paths


def comparable(rep):
    """``rep`` without its :data:`RUN_SPECIFIC` fields (a copy)."""
    out = json.loads(json.dumps(rep, default=str))
    for key in ("duration_s", "started", "jobs", "shards"):
        out["run"].pop(key, None)
    for row in out["cases"]:
        row.pop("duration_s", None)
    out.get("device", {}).get("properties", {}).pop("total_memory", None)
    return out
