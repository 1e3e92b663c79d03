"""``devicekit gate check``: the release rules applied to a new record against
the last certified one (docs/gate.md, "Rules").

The result is a :class:`Verdict`: refusals (each a :class:`Reason`: rule,
subject, baseline value, new value, detail), waived reasons with their
waiver, gains (cases and models that pass now and did not), and notes (rules
not applied and why, expired waivers). Conformance and model case changes
come from ``devicekit conformance diff``'s :func:`compare`, so the gate and
the diff never disagree about what regressed.
"""

import datetime
import math
import os
from dataclasses import dataclass, field
from typing import List, Optional

from ..conformance.diff import compare
from . import perf as perf_mod
from .errors import MissingInput, PluginMismatch
from .policy import LEVELS, Waiver
from .record import sha256_file

SHA_RULE = "binary.sha256"


@dataclass
class Reason:
    rule: str
    subject: str
    baseline: str
    new: str
    detail: str = ""
    waiver: Optional[Waiver] = None


@dataclass
class Verdict:
    new_path: str
    baseline_path: str
    policy_path: str
    plugin: dict
    baseline_plugin: dict
    binary: dict
    refusals: List[Reason] = field(default_factory=list)
    waived: List[Reason] = field(default_factory=list)
    gains: List[dict] = field(default_factory=list)
    notes: List[str] = field(default_factory=list)
    rules: List[str] = field(default_factory=list)

    @property
    def admitted(self):
        return not self.refusals


def _check_identity(new, base, new_path, base_path):
    a, b = new["plugin"], base["plugin"]
    if (a["name"], a["vendor"]) != (b["name"], b["vendor"]):
        raise PluginMismatch(new_path, f"certifies plugin '{a['name']}' ({a['vendor']}) but the "
                                       f"baseline {base_path} certifies '{b['name']}' "
                                       f"({b['vendor']}); gate a plugin against its own last record")


def _binary(new, binary, out):
    """The sha256 rule: the binary being released must be the one certified."""
    p = new["plugin"]
    path = binary or p["library_path"]
    if binary and not os.path.exists(binary):
        raise MissingInput(binary, "--binary not found")
    wheel = binary and binary.endswith(".whl")
    want = (p.get("wheel") or {}).get("sha256") if wheel else p["sha256"]
    info = {"path": path, "expected": want, "actual": None, "given": bool(binary)}
    if not os.path.exists(path):
        out.append(Reason(SHA_RULE, path, want or "-", "missing",
                          "the recorded library no longer exists; pass the released file with "
                          "--binary"))
        return info
    info["actual"] = sha256_file(path)
    if want is None:
        out.append(Reason(SHA_RULE, path, "-", info["actual"][:16],
                          "the record names no wheel (certify with --wheel to certify one)"))
    elif info["actual"] != want:
        out.append(Reason(SHA_RULE, path, want[:16], info["actual"][:16],
                          "the binary being released is not the one this record certifies"))
    return info


def _first_layer(sec, cid):
    f = sec.get("failures", {}).get(cid, {})
    layer = f.get("first_divergent_layer")
    msg = (f.get("message") or "").splitlines()
    text = msg[0] if msg else ""
    if layer:
        text = f"first divergent layer: {layer}; {text}" + (
            f"; replay: {f['layer_replay']}" if f.get("layer_replay") else "")
    return text


def _torch_notes(nc, bc, v):
    """What the torch section (PyTorch OpInfo samples) says about the two
    records: either may lack it (made without torch, or before the section
    existed). Its cases are conformance cases like any other, so a passing
    one the new record lacks is a regression; the note says why it is missing."""
    nt, bt = nc.get("torch"), bc.get("torch")
    ran = lambda t: bool(t) and t.get("available", False)  # noqa: E731
    if ran(bt) and not ran(nt):
        why = (nt or {}).get("reason") or "the new record has no torch section"
        v.notes.append(f"the baseline ran the torch section (torch {bt.get('torch_version')}); the "
                       f"new record did not ({why}): its passing torch cases count as missing")
    elif ran(nt) and not bt:
        v.notes.append(f"the baseline has no torch section (made without torch, or before the "
                       f"section existed): the new record's torch cases (torch "
                       f"{nt.get('torch_version')}) are new, not compared")
    elif ran(nt) and ran(bt) and nt.get("torch_version") != bt.get("torch_version"):
        v.notes.append(f"torch section: baseline ran torch {bt.get('torch_version')}, the new "
                       f"record torch {nt.get('torch_version')} (OpInfo samples may differ)")


def _conformance(new, base, policy, v):
    nc, bc = new["conformance"], base["conformance"]
    partial = nc.get("partial") and not policy.allow_partial
    if LEVELS.index(nc["level"]) < LEVELS.index(policy.level) or partial:
        v.refusals.append(Reason("conformance.level", "conformance", policy.level,
                                 nc["level"] + (" (partial)" if partial else ""),
                                 "certify at the level the policy requires, without filters"))
    _torch_notes(nc, bc, v)
    d = compare(bc, nc)
    seen = set()
    for cid, _op, _dtype, old, now in d["regressed"]:
        seen.add(cid)
        f = nc.get("failures", {}).get(cid, {})
        detail = ((f.get("message") or "").splitlines() or [""])[0] + (
            f"; replay: {f['replay']}" if f.get("replay") else "")
        v.refusals.append(Reason("conformance.regression", cid, old,
                                 "missing" if now == "absent" else now,
                                 detail or ("not in the new record" if now == "absent" else "")))
    v.gains += [{"suite": "conformance", "id": cid, "baseline": old, "new": now}
                for cid, _, _, old, now in d["newly_passing"]]
    was = {c["id"]: c["outcome"] for c in bc.get("cases", [])}
    for c in nc["cases"]:
        # the policy's dtypes are required whatever the spec says of them;
        # dtype-less cases (runtime, errors) as the suite marks them
        required = (c.get("dtype") in policy.required_dtypes
                    or (c.get("dtype") is None and c.get("required", True)))
        if c.get("section") == "torch":
            # PyTorch OpInfo samples measure devicekit.torch's coverage as much as
            # the plugin: optional in the suite, so they only must not regress
            required = False
        if c["id"] not in seen and required and c["outcome"] not in ("pass", "skipped"):
            detail = (nc.get("failures", {}).get(c["id"], {}).get("message", "").splitlines()
                      or [""])[0]
            v.refusals.append(Reason("conformance.required", c["id"], was.get(c["id"], "absent"),
                                     c["outcome"], detail))
    _part_sections(new, policy, v)
    corpus = nc.get("corpus", {})
    if corpus.get("checked") and not corpus.get("ok", True):
        v.refusals.append(Reason("conformance.required", "corpus", "complete", "collapsed",
                                 "; ".join(corpus.get("short", []))[:300]))


def _part_sections(new, policy, v):
    """A plugin that declares an optional part the policy names must have
    run that part's section: its cases are dtype-less and required, so each
    must pass (above); here, a record where none of them ran is refused. A
    partial (filtered) record, which only a policy with allow_partial admits,
    is not judged on it, as its corpus is not."""
    nc = new["conformance"]
    if nc.get("partial"):
        return
    parts = (new.get("plugin", {}).get("declared") or {}).get("parts") or []
    for name in policy.part_sections:
        if name not in parts:
            continue
        ran = [c for c in nc["cases"] if c.get("section") == name
               and c["outcome"] in ("pass", "fail", "error", "crash")]
        if not ran:
            why = (nc.get("unavailable_sections") or {}).get(name)
            v.refusals.append(Reason(
                "conformance.required", f"{name}/part", "run", "missing",
                f"the plugin declares the {name} part but no case of the section '{name}' ran"
                + (f" (unavailable: {why})" if why else "")))


def _models(new, base, policy, v):
    nm, bm = new["models"], base["models"]
    d = compare(bm, nm)
    seen = set()
    for cid, _op, _dtype, old, now in d["regressed"]:
        seen.add(cid)
        v.refusals.append(Reason("models.regression", cid, old, "missing" if now == "absent"
                                 else now, _first_layer(nm, cid) or "not in the new record"))
    v.gains += [{"suite": "models", "id": cid, "baseline": old, "new": now}
                for cid, _, _, old, now in d["newly_passing"]]
    per = nm.get("per_model", {})
    for m in policy.models:
        for dt in policy.model_dtypes:
            entry = per.get(m, {}).get(dt)
            if not entry:
                v.refusals.append(Reason("models.required", f"models/{m}/{dt}", "-", "missing",
                                         "the policy requires this model and dtype"))
                continue
            for phase, outcome in entry["phases"].items():
                cid = f"models/{m}/{dt}/{phase}"
                if outcome != "pass" and cid not in seen:
                    v.refusals.append(Reason("models.required", cid, "-", outcome,
                                             _first_layer(nm, cid)))
    for m, dts in base["models"].get("per_model", {}).items():
        for dt, old in dts.items():
            if dt.startswith("_") or not old.get("passed") or not old.get("loss_curve"):
                continue
            now = (per.get(m, {}).get(dt) or {}).get("loss_curve")
            if not now:
                continue  # a missing or failed model is already a regression
            if len(now) != len(old["loss_curve"]):
                v.refusals.append(Reason("models.loss_band", f"{m}/{dt}",
                                         f"{len(old['loss_curve'])} steps", f"{len(now)} steps",
                                         "the loss curve has another length"))
                continue
            worst, step = 0.0, 0
            for i, (a, b) in enumerate(zip(old["loss_curve"], now)):
                dev = abs(b - a) / max(abs(a), 1e-12) if math.isfinite(b) else math.inf
                if dev > worst:
                    worst, step = dev, i
            if worst > policy.loss_band:
                v.refusals.append(Reason(
                    "models.loss_band", f"{m}/{dt}", f"{old['loss_curve'][step]:.6g}",
                    f"{now[step]:.6g}", f"step {step}: relative change {worst:.3g} > band "
                                        f"{policy.loss_band:g}"))


def _performance(new, base, policy, v, timed=None):
    if not policy.perf_enabled:
        v.notes.append("performance not compared: the policy sets performance.enabled = false")
        return
    if policy.perf_timing == "alternate":  # both binaries timed now, not the records (paired.py)
        from .paired import judge
        refusals, notes = judge(timed() if callable(timed) else timed, policy)
        v.refusals += [Reason(*r) for r in refusals]
        v.notes += notes
        return
    np_, bp = new.get("performance", {}), base.get("performance", {})
    if not bp.get("measured"):
        why = bp.get("reason")
        v.notes.append("performance not compared: the baseline has no figures"
                       + (f" ({why})" if why else ""))
        return
    if not np_.get("measured"):
        v.refusals.append(Reason("performance.missing", "performance", "measured",
                                 "not measured", np_.get("reason", "")))
        return
    fa, fb = np_["machine"].get("fingerprint"), bp["machine"].get("fingerprint")
    if fa != fb:
        why = (f"the records come from different machines ({bp['machine'].get('cpu')} x"
               f"{bp['machine'].get('cpu_count')} vs {np_['machine'].get('cpu')} x"
               f"{np_['machine'].get('cpu_count')}); timings are only compared on one machine")
        if policy.other_machine == "refuse":
            v.refusals.append(Reason("performance.machine", "performance", fb, fa, why))
        else:
            v.notes.append("performance not compared: " + why)
        return
    now = {perf_mod.key(r): r for r in np_["results"]}
    absolute = []
    for r in bp["results"]:
        k = perf_mod.key(r)
        n = now.get(k)
        if n is None:
            v.refusals.append(Reason("performance.missing", k, _figure(r), "missing",
                                     "the figure is not in the new record"))
            continue
        if min(n.get("repeats") or 0, r.get("repeats") or 0) < policy.min_repeats:
            v.refusals.append(Reason("performance.repeats", k, str(r.get("repeats")),
                                     str(n.get("repeats")),
                                     f"fewer than {policy.min_repeats} repeats: too noisy to judge"))
            continue
        if ("ratio" in r) != ("ratio" in n):
            v.refusals.append(Reason("performance.missing", k, _figure(r), _figure(n),
                                     "one record has a ratio to an interleaved reference, the "
                                     "other only absolute seconds (a devicekit bench document): "
                                     "certify both without --perf-json"))
            continue
        if "ratio" in r:  # the figure relative to numpy in its own run (perf.py)
            slowdown = n["ratio"] / r["ratio"]
            what = f"{slowdown:.2f}x slower relative to {r.get('reference', 'the reference')}"
        else:
            slowdown = n["seconds"] / r["seconds"]
            what = f"{slowdown:.2f}x slower"
            absolute.append(k)
        if slowdown > policy.max_slowdown:
            v.refusals.append(Reason("performance.slowdown", k, _figure(r), _figure(n),
                                     f"{what} > threshold {policy.max_slowdown:g}x"))
    if absolute:
        v.notes.append(f"performance: {', '.join(absolute)} compared as absolute seconds (no "
                       f"interleaved reference in the records): sensitive to machine load")


def _figure(row):
    """'812.3 us (2.10x numpy)' or '812.3 us'."""
    text = f"{row['seconds'] * 1e6:.1f} us"
    if "ratio" in row:
        text += f" ({row['ratio']:.2f}x {row.get('reference', 'reference')})"
    return text


def _apply_waivers(policy, v, today):
    for w in policy.waivers:
        if w.expired(today):
            v.notes.append(f"waiver ignored, expired on {w.expires.isoformat()}: {w.describe()}")
    live = [w for w in policy.waivers if not w.expired(today)]
    kept = []
    for r in v.refusals:
        w = next((w for w in live if w.matches(r.rule, r.subject)), None)
        if w is None:
            kept.append(r)
        else:
            r.waiver = w
            v.waived.append(r)
    v.refusals = kept


def check(new, base, policy, new_path, base_path, binary=None, today=None, check_binary=True,
          timed=None):
    """The :class:`Verdict` of ``new`` (a loaded record) against ``base``.
    ``check_binary=False`` (the matrix, which releases nothing) skips the
    sha256 rule and says so in the notes. ``timed``: for a policy that times
    performance alternately, the :func:`.paired.time_check` of the two
    binaries, or a function returning it (called only when the rule runs)."""
    _check_identity(new, base, new_path, base_path)
    v = Verdict(new_path=str(new_path), baseline_path=str(base_path), policy_path=policy.path,
                plugin=new["plugin"], baseline_plugin=base["plugin"], binary={},
                rules=[SHA_RULE, "conformance", "models", "performance"])
    sha = []
    if check_binary:
        v.binary = _binary(new, binary, sha)
    else:
        v.notes.append("binary sha256 not checked (nothing is being released)")
    _conformance(new, base, policy, v)
    _models(new, base, policy, v)
    _performance(new, base, policy, v, timed)
    _apply_waivers(policy, v, today or datetime.date.today())
    v.refusals = sha + v.refusals  # never waivable: applied after the waivers
    return v
