"""The certification record: one JSON file per certified plugin binary.

Schema ``devicekit.gate.record`` version :data:`SCHEMA_VERSION`, documented
field by field in docs/gate.md. Built from the reports of ``devicekit
conformance`` and ``devicekit models`` (their report.json, schema 1) and the
performance figures (:mod:`.perf`, rows in the ``devicekit bench`` format).

Each results section carries ``cases_sha256``, the sha256 of its canonical
case list, and the record ``content_sha256``, the sha256 of all of it
(:func:`canonical`); :func:`load` validates the record against
``record.schema.json`` (:mod:`.validate`) and recomputes both, so a record
edited by hand or damaged in transit is refused as corrupted rather than
trusted. A hash anyone can recompute; a forged record is caught only by a
signature (``signature``, :mod:`.sign`) checked against trusted keys.
"""

import datetime
import hashlib
import json
import os
import platform
import socket
import zipfile

from .._util import output as _output
from . import validate
from .errors import BadRecord, MissingInput, SchemaTooNew

SCHEMA = "devicekit.gate.record"
# 2: performance figures are ratios to an interleaved numpy reference
# (perf.py, source devicekit.gate.perf/2); :func:`migrate` reads version 1.
SCHEMA_VERSION = 2
# Fields that differ between two certifications of the same binary on the same
# machine (docs/gate.md, "Reproducibility"); everything else is identical.
# device.properties.total_memory is host state, not a result: a plugin may
# size its device from the memory free when it loads (the reference CPU
# plugin's default budget is half of MemAvailable, so that what it reports it
# can deliver), and that moves with everything else running on the machine.
_PERF_VOLATILE = ("seconds", "calls", "gbps", "gflops", "reference_seconds", "reference_calls",
                  "ratio", "ratios")
VOLATILE = ("created", "timing", *(f"performance.results[].{k}" for k in _PERF_VOLATILE),
            "device.properties.total_memory", "content_sha256", "signature")
_CASE_KEYS = ("id", "section", "op", "dtype", "required", "outcome")


# The conformance report's file hash, so both name a binary the same way.
from ..conformance.target import sha256 as sha256_file  # noqa: E402


def cases_sha256(cases):
    """sha256 of the canonical JSON of a case list (order as recorded)."""
    text = json.dumps([[c.get(k) for k in _CASE_KEYS] for c in cases], separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def _cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith(("model name", "hardware", "cpu model")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def host_info():
    """The machine: what the performance figures and results came from.
    ``fingerprint`` (no hostname: CI runners are renamed) decides whether two
    records' timings may be compared."""
    info = {"system": platform.system(), "release": platform.release(),
            "machine": platform.machine(), "cpu": _cpu_model(), "cpu_count": os.cpu_count(),
            "python": platform.python_version(), "hostname": socket.gethostname()}
    key = json.dumps([info[k] for k in ("system", "machine", "cpu", "cpu_count")])
    info["fingerprint"] = hashlib.sha256(key.encode()).hexdigest()[:16]
    return info


def _slim(rows):
    return [{k: r.get(k) for k in _CASE_KEYS} for r in rows]


def _failures(rows):
    """Cases that failed, errored, crashed or were skipped: first lines of their
    message, replay command, and for models the first divergent layer (what the
    gate's reasons quote). Not-implemented cases are left out: the outcome says
    it all, and a young plugin has thousands of them."""
    out = {}
    for r in rows:
        if r["outcome"] in ("pass", "not-implemented"):
            continue
        item = {"message": "\n".join((r.get("message") or "").splitlines()[:3])[:600],
                "replay": r.get("replay")}
        div = (r.get("details") or {}).get("divergence")
        if div and div.get("first"):
            item["first_divergent_layer"] = div["first"].get("layer")
            item["layer_replay"] = div.get("replay")
        out[r["id"]] = item
    return out


def _per_op(rows):
    """{"op/dtype": {outcome: n}} for cases with an op and a dtype."""
    agg = {}
    for r in rows:
        if r.get("op") and r.get("dtype"):
            cell = agg.setdefault(f"{r['op']}/{r['dtype']}", {})
            cell[r["outcome"]] = cell.get(r["outcome"], 0) + 1
    return dict(sorted(agg.items()))


def conformance_section(rep):
    cases = _slim(rep["cases"])
    return {"level": rep["run"]["level"], "passed": rep["summary"]["passed"],
            "partial": rep["run"].get("partial", False), "filter": rep["run"].get("filter", []),
            "by_outcome": rep["summary"]["by_outcome"],
            "by_requirement": rep["summary"].get("by_requirement", {}),
            "corpus": rep.get("corpus", {}), "implementation": rep.get("implementation", {}),
            "unavailable_sections": rep.get("unavailable_sections", {}),
            "per_op": _per_op(rep["cases"]), "failures": _failures(rep["cases"]),
            **({"torch": rep["torch"]} if rep.get("torch") else {}),
            "cases_sha256": cases_sha256(cases), "cases": cases}


def models_section(rep):
    cases = _slim(rep["cases"])
    per_model = {}
    for r in rep["cases"]:
        model, dtype, phase = r["id"].split("/")[1:4]
        per_model.setdefault(model, {}).setdefault(dtype, {"phases": {}})["phases"][phase] = \
            r["outcome"]
    for model, info in rep.get("models", {}).items():
        for dtype, curves in (info.get("curves") or {}).items():
            if dtype in per_model.get(model, {}) and isinstance(curves, dict):
                per_model[model][dtype]["loss_curve"] = curves.get("plugin")
        for entry in per_model.get(model, {}).values():
            entry["passed"] = all(o == "pass" for o in entry["phases"].values())
        per_model.setdefault(model, {})
        if info.get("config_hash"):
            per_model[model]["_config_hash"] = info["config_hash"]
    return {"passed": rep["summary"]["passed"], "steps": rep["run"].get("steps"),
            "models": rep["run"].get("models"), "dtypes": rep["run"].get("dtypes"),
            "by_outcome": rep["summary"]["by_outcome"], "per_model": per_model,
            "failures": _failures(rep["cases"]), "cases_sha256": cases_sha256(cases),
            "cases": cases}


def wheel_info(wheel, library_sha256):
    """The wheel's identity, and which of its members is the certified library
    (``library_member``: None when no file in it has the library's sha256)."""
    member = None
    try:
        with zipfile.ZipFile(wheel) as z:
            for name in z.namelist():
                if name.endswith((".so", ".dylib", ".dll")) or ".so." in name:
                    if hashlib.sha256(z.read(name)).hexdigest() == library_sha256:
                        member = name
                        break
    except zipfile.BadZipFile:
        raise BadRecord(wheel, "--wheel is not a wheel (not a zip archive)") from None
    return {"path": os.path.abspath(wheel), "file": os.path.basename(wheel),
            "sha256": sha256_file(wheel), "library_member": member}


def plugin_section(conf_report, kernels, fused, wheel):
    p = conf_report["plugin"]
    dtypes = conf_report["device"]["properties"].get("dtypes", [])
    return {"name": p["name"], "vendor": p["vendor"], "version": p["version"],
            "api_version": p["api_version"], "attributes": p.get("attributes", {}),
            "library_path": p["library_path"], "sha256": p["sha256"],
            "size_bytes": os.path.getsize(p["library_path"]),
            "wheel": wheel_info(wheel, p["sha256"]) if wheel else None,
            "declared": {"ops": sorted(k["op"] for k in kernels if k.get("implemented")),
                         "dtypes": list(dtypes), "fused": fused,
                         "parts": list(p.get("parts", []))}}


def build(conf_report, models_report, perf, kernels, fused, wheel=None, timing=None):
    return {
        "schema": SCHEMA, "schema_version": SCHEMA_VERSION,
        "created": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "devicekit": {"version": conf_report["devicekit_version"],
                      "device_api_version": conf_report["device_api_version"]},
        "plugin": plugin_section(conf_report, kernels, fused, wheel),
        "device": conf_report["device"],
        "host": host_info(),
        "conformance": conformance_section(conf_report),
        "models": models_section(models_report),
        "performance": perf,
        "timing": timing or {},
    }


def deterministic_view(rec):
    """The record without its :data:`VOLATILE` fields (what must be identical
    when the same binary is certified twice on the same machine)."""
    out = {k: v for k, v in rec.items() if k not in ("created", "timing", *SEAL_FIELDS)}
    perf = dict(out.get("performance") or {})
    perf["results"] = [{k: v for k, v in r.items() if k not in _PERF_VOLATILE}
                       for r in perf.get("results", [])]
    out["performance"] = perf
    device = dict(out.get("device") or {})
    device["properties"] = {k: v for k, v in (device.get("properties") or {}).items()
                            if k != "total_memory"}
    out["device"] = device
    return out


def dumps(obj, indent=0, width=120):
    """JSON text, indented, but every object or array that fits in ``width``
    columns on one line (so one case per line): records are committed as
    baselines, and this keeps them small with readable diffs."""
    flat = json.dumps(obj, separators=(", ", ": "))
    if len(flat) + indent <= width or not isinstance(obj, (dict, list)) or not obj:
        return flat
    pad = " " * (indent + 1)
    if isinstance(obj, dict):
        items = [f"{pad}{json.dumps(k)}: {dumps(v, indent + 1, width)}" for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + "\n" + " " * indent + "}"
    items = [pad + dumps(v, indent + 1, width) for v in obj]
    return "[\n" + ",\n".join(items) + "\n" + " " * indent + "]"


CASE_FIELDS = list(_CASE_KEYS)


def to_file(rec):
    """The on-disk form: each section's ``cases`` as rows in ``case_fields``
    order (a third of the size of one object per case)."""
    out = dict(rec)
    for sec in ("conformance", "models"):
        if isinstance(rec.get(sec), dict) and isinstance(rec[sec].get("cases"), list):
            out[sec] = dict(rec[sec], case_fields=CASE_FIELDS,
                            cases=[[c.get(k) for k in _CASE_KEYS] for c in rec[sec]["cases"]])
    return out


def from_file(rec, path):
    """The in-memory form (cases as objects, as the suites' reports have them)."""
    for sec in ("conformance", "models"):
        s = rec.get(sec)
        if not isinstance(s, dict):
            continue
        if s.get("case_fields") != CASE_FIELDS or not isinstance(s.get("cases"), list) or not all(
                isinstance(c, list) and len(c) == len(CASE_FIELDS) for c in s["cases"]):
            raise BadRecord(path, f"field '{sec}.cases' is missing or malformed (rows of "
                                  f"{', '.join(CASE_FIELDS)})")
        rec[sec] = dict(s, cases=[dict(zip(CASE_FIELDS, c)) for c in s["cases"]])
        del rec[sec]["case_fields"]
    return rec


# Not part of the content they protect (docs/gate.md, "Integrity").
SEAL_FIELDS = ("content_sha256", "signature")


def canonical(doc):
    """The bytes the content hash covers: ``doc`` without :data:`SEAL_FIELDS`,
    as JSON with sorted keys, no spaces, ASCII escapes (Python's
    ``json.dumps(sort_keys=True, separators=(",", ":"))``)."""
    rest = {k: v for k, v in doc.items() if k not in SEAL_FIELDS}
    return json.dumps(rest, sort_keys=True, separators=(",", ":")).encode()


def content_sha256(doc):
    """sha256 of :func:`canonical`: every field of the on-disk record, so an
    edit to any of them (outcomes, model phases, loss curves, ``partial``,
    ``level``, ``library_path``) no longer matches."""
    return hashlib.sha256(canonical(doc)).hexdigest()


def seal(doc, key=None):
    """``doc`` (on-disk form) with its ``content_sha256`` and, given an
    Ed25519 private key, its ``signature`` (:mod:`.sign`), as the last fields."""
    out = {k: v for k, v in doc.items() if k not in SEAL_FIELDS}
    out["content_sha256"] = content_sha256(out)
    if key is not None:
        from . import sign

        out["signature"] = sign.envelope(out, out["content_sha256"], key)
    return out


def write(rec, path, key=None):
    """Writes ``rec`` sealed (and signed with ``key``) to ``path`` atomically
    (:func:`devicekit._util.output.write_file`): a failure raises
    :class:`~devicekit._util.output.OutputError` and leaves the previous file as it was."""
    write_text(dumps(seal(to_file(rec), key)) + "\n", path)


def write_text(text, path):
    _output.write_file(path, text)


def _check_cases(doc, path):
    for sec in ("conformance", "models"):
        rows = doc[sec]["cases"]
        if len({r[0] for r in rows}) != len(rows):
            raise BadRecord(path, f"'{sec}.cases' lists a case id twice")
        if cases_sha256([dict(zip(CASE_FIELDS, r)) for r in rows]) != doc[sec]["cases_sha256"]:
            raise BadRecord(path, f"'{sec}.cases' does not match its cases_sha256: the record "
                                  f"was edited or corrupted")


def read(path, role="record", trust=None, notes=None):
    """The on-disk document of a record, checked before any rule may read it:
    size (before reading), JSON, nesting, schema version, the schema
    (record.schema.json), with ``trust`` ({keyid: (public key, name)}, from
    :func:`.sign.load_trusted`) a signature by one of those keys over this
    exact content, then the case lists' and the whole content's hashes.
    ``notes`` (a list) receives what the reader should know (no content hash,
    a signature not verified)."""
    try:
        with open(path, "rb") as f:
            doc = validate.read_json(path, role, f, os.fstat(f.fileno()).st_size)
    except FileNotFoundError:
        raise MissingInput(path, f"{role} not found") from None
    except IsADirectoryError:
        raise MissingInput(path, f"{role} is a folder, not a file") from None
    except OSError as e:
        raise MissingInput(path, f"cannot read the {role}: {e.strerror}") from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise BadRecord(path, f"not a certification record (no \"schema\": \"{SCHEMA}\")")
    v = doc.get("schema_version")
    if isinstance(v, int) and not isinstance(v, bool) and v > SCHEMA_VERSION:
        raise SchemaTooNew(path, f"record schema version {v} is newer than this DeviceKit reads "
                                 f"({SCHEMA_VERSION}); upgrade devicekit to check it")
    validate.check_schema(doc, path)
    digest = content_sha256(doc)
    if trust is not None:
        from . import sign

        who = sign.verify(path, role, doc.get("signature"), digest, trust)
        if notes is not None:
            notes.append(f"{role} {path}: signed by trusted key {sign.short(who)} "
                         f"({trust[who][1]})")
    _check_cases(doc, path)
    if "content_sha256" not in doc:
        if notes is not None:
            notes.append(f"{role} {path} has no content_sha256 (written before records carried "
                         f"one): only its case lists are checked for edits; re-certify it or "
                         f"'devicekit gate sign' it")
    elif doc["content_sha256"] != digest:
        raise BadRecord(path, f"content does not match its content_sha256 ({digest[:16]} vs "
                              f"{doc['content_sha256'][:16]}): the record was edited or "
                              f"corrupted after it was written")
    if trust is None and "signature" in doc and notes is not None:
        from . import sign

        keys = ", ".join(sign.short(s["keyid"]) for s in doc["signature"]["signatures"])
        notes.append(f"{role} {path}: signed by key {keys} (not verified: no --trust given)")
    return doc


def load(path, role="record", trust=None, notes=None):
    """Reads and checks a record (:func:`read`); returns it in memory form
    (cases as objects, older schema versions migrated). ``role`` names it in
    errors (baseline, record)."""
    return migrate(from_file(read(path, role, trust, notes), path))


PERF_V1 = "devicekit.gate.perf/1"


def migrate(rec):
    """A validated record in this version's form. Version 1 differs only in
    its own performance figures (source devicekit.gate.perf/1: best-of-7
    absolute seconds, no reference), which cannot be compared with version
    2's ratios: they become "not measured" with the reason, so ``check``
    notes that a version-1 baseline has no comparable figures (re-certify
    it) and refuses a version-1 *new* record under a performance policy.
    Figures from a devicekit bench document are the same in both versions
    and are kept."""
    if rec["schema_version"] == 1:
        perf = rec["performance"]
        if perf.get("source") == PERF_V1:
            rec["performance"] = {
                "measured": False, "source": None, "machine": perf.get("machine"),
                "results": [], "skipped": perf.get("skipped", []),
                "reason": "record schema 1 timed best-of-7 absolute seconds, not comparable with "
                          "schema 2's ratios to an interleaved numpy reference; re-certify it"}
        rec["migrated_from"] = 1
    return rec
