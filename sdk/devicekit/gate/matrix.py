"""``devicekit gate matrix``: certification records side by side.

Plugins (and their versions) x DeviceKit versions, with conformance per op
and dtype, models per dtype, and the gate verdict: JSON for machines
(``devicekit.gate.matrix`` version 1, docs/gate.md) and one static HTML page
(inline CSS, no scripts, nothing fetched) for release managers and users.

The verdict of a record is the check of it against the previous record of
the same plugin (ordered by DeviceKit version, then date) under the given
policy; the first record of a plugin is checked against itself, so only the
policy's required rules apply to it. Without ``--policy`` there is no verdict.
"""

import datetime

from .._util.text import table as _table
from .check import check
from .reports import _env, template

SCHEMA, SCHEMA_VERSION = "devicekit.gate.matrix", 1
_DTYPE_ORDER = ("float32", "float16", "bfloat16", "float64", "int64", "int32", "int16", "int8",
                "uint8", "bool")
_SEVERITY = ("crash", "error", "fail", "not-implemented", "skipped", "pass")


def _vkey(version):
    parts = []
    for x in str(version).replace("-", ".").split("."):
        parts.append((0, int(x), "") if x.isdigit() else (1, 0, x))
    return parts


def _status(counts):
    total = sum(counts.values())
    worst = next((o for o in _SEVERITY if counts.get(o)), "pass")
    return {"pass": counts.get("pass", 0), "total": total, "worst": worst}


def _entry(path, rec, verdict):
    c, m = rec["conformance"], rec["models"]
    per_dtype = {}
    for model, dts in m.get("per_model", {}).items():
        for dt, e in dts.items():
            if dt.startswith("_"):
                continue
            d = per_dtype.setdefault(dt, {"passed": 0, "total": 0, "models": {}})
            d["total"] += 1
            d["passed"] += bool(e.get("passed"))
            phases = e["phases"]
            d["models"][model] = _status({o: list(phases.values()).count(o)
                                          for o in set(phases.values())})
    p = rec["plugin"]
    return {"record": str(path), "plugin": p["name"], "vendor": p["vendor"],
            "plugin_version": p["version"], "sha256": p["sha256"], "api_version": p["api_version"],
            "devicekit_version": rec["devicekit"]["version"], "device": rec["device"]["name"],
            "host": rec["host"].get("cpu"), "created": rec["created"],
            "conformance": {"level": c["level"], "passed": c["passed"],
                            "pass": c["by_outcome"].get("pass", 0), "total": len(c["cases"]),
                            "per_op": {k: _status(v) for k, v in c["per_op"].items()}},
            "models": {"passed": m["passed"], "per_dtype": per_dtype},
            "verdict": verdict}


def _verdict(v, against):
    by_rule = {}
    for r in v.refusals:
        by_rule[r.rule] = by_rule.get(r.rule, 0) + 1
    return {"admitted": v.admitted, "against": against, "by_rule": by_rule,
            "reasons": [f"{r.rule} {r.subject}: {r.new}" for r in v.refusals[:8]],
            "refusals": len(v.refusals), "waived": len(v.waived), "gains": len(v.gains)}


def build(records, policy=None):
    """The matrix document from [(path, loaded record)]."""
    order = sorted(range(len(records)), key=lambda i: (
        records[i][1]["plugin"]["name"], _vkey(records[i][1]["devicekit"]["version"]),
        _vkey(records[i][1]["plugin"]["version"]), records[i][1]["created"]))
    entries, last = [], {}
    for i in order:
        path, rec = records[i]
        verdict = None
        if policy is not None:
            name = rec["plugin"]["name"]
            prev_path, prev = last.get(name, (path, rec))
            v = check(rec, prev, policy, path, prev_path, check_binary=False)
            verdict = _verdict(v, None if prev is rec else str(prev_path))
            last[name] = (path, rec)
        entries.append(_entry(path, rec, verdict))
    ops, dtypes = set(), []
    for e in entries:
        for key in e["conformance"]["per_op"]:
            op, dt = key.rsplit("/", 1)
            ops.add(op)
            if dt not in dtypes:
                dtypes.append(dt)
    # float32 (the required dtype) first, then the others in a fixed order
    rank = {d: i for i, d in enumerate(_DTYPE_ORDER)}
    dtypes.sort(key=lambda d: (rank.get(d, len(rank)), d))
    dk_versions = sorted({e["devicekit_version"] for e in entries}, key=_vkey)
    plugins = {}
    for e in entries:
        plugins.setdefault(e["plugin"], {"name": e["plugin"], "vendor": e["vendor"],
                                         "versions": []})
        if e["plugin_version"] not in plugins[e["plugin"]]["versions"]:
            plugins[e["plugin"]]["versions"].append(e["plugin_version"])
    return {"schema": SCHEMA, "schema_version": SCHEMA_VERSION,
            "created": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "policy": policy.path if policy else None, "devicekit_versions": dk_versions,
            "plugins": list(plugins.values()), "ops": sorted(ops), "dtypes": dtypes,
            "model_dtypes": sorted({dt for e in entries for dt in e["models"]["per_dtype"]},
                                   key=lambda d: (rank.get(d, len(rank)), d)),
            "models": sorted({m for e in entries for d in e["models"]["per_dtype"].values()
                              for m in d["models"]}),
            "entries": entries}


def _verdict_word(e):
    v = e["verdict"]
    return "-" if v is None else ("admitted" if v["admitted"] else "refused")


def text(doc):
    rows = [(e["plugin"], e["plugin_version"], e["devicekit_version"], e["device"],
             f"{e['conformance']['pass']}/{e['conformance']['total']}",
             " ".join(f"{dt}:{d['passed']}/{d['total']}"
                      for dt, d in e["models"]["per_dtype"].items()), _verdict_word(e))
            for e in doc["entries"]]
    return _table(rows, ["plugin", "version", "devicekit", "device", "conformance", "models",
                         "verdict"])


def html(doc):
    grid = {}
    for i, e in enumerate(doc["entries"]):
        grid.setdefault((e["plugin"], e["plugin_version"]), {}).setdefault(
            e["devicekit_version"], []).append(i)
    ops_in = {dt: [op for op in doc["ops"] if any(f"{op}/{dt}" in e["conformance"]["per_op"]
                                                  for e in doc["entries"])]
              for dt in doc["dtypes"]}
    return _env().from_string(template("matrix.html.j2")).render(
        d=doc, grid=grid, ops_in=ops_in, verdict=_verdict_word)
