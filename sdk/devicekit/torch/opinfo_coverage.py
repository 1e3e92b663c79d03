"""OpInfo coverage as a number: ``python -m devicekit.torch.opinfo_coverage``.

Counts, per dtype, how many of torch's OpInfo entries
(``torch.testing._internal.common_methods_invocations.op_db``, every entry,
not only those the conformance section "torch" selects) the bridge *runs* on
a DeviceKit device, and lists the ones it does not. It reuses the conformance
section's machinery (``devicekit.conformance_tests._opinfo`` and
``torch_opinfo._Samples``): per entry and dtype the first ``--samples``
sample inputs (default 2) run on the CPU and on ``dk`` under the strict
coverage recorder (no CPU fallback), and the entry is, for that dtype:

- ``runs``: every sample ran on the device (each ATen op lowered, or
  decomposed by torch into lowered ones) and matched torch on the CPU;
- ``wrong``: every sample ran, and at least one differed from the CPU or
  raised something other than a missing lowering (``fail``/``error`` in the
  conformance section: a bug to fix, counted apart);
- ``not implemented``: a sample reached an ATen op with no lowering, or a
  call its lowering does not cover, or a dtype DeviceKit does not have
  (complex, int16) (the ops, or ``(dtype ...)``, are listed);
- ``no sample``: the entry does not declare the dtype, torch on the CPU
  refuses every sample, the samples draw random numbers (DeviceKit draws
  its own Philox stream, by design not torch's CPU generator), the values
  are undefined (``empty*``), or torch requires an argument on the CPU that
  the harness moved to the device.

The coverage of a dtype is runs / (entries with a sample in that dtype).
``--markdown FILE`` writes the release's table (``docs/torch_opinfo.md``);
``--json FILE`` the raw per-entry results; ``--only NAME`` (repeatable) runs
just those entries.
"""

import argparse
import json
import re
import sys
import time

DTYPES = ("float32", "bfloat16", "float16")
RUNS, WRONG, MISSING, NO_SAMPLE = "runs", "wrong", "not implemented", "no sample"


def _machinery():
    from ..conformance_tests import _opinfo
    from ..conformance_tests.torch_opinfo import _Samples
    return _opinfo, _Samples


def classify(op, dtype, dev, samples, torch, dkt, seed=0):
    """(verdict, {unlowered ATen op: samples}, first problem or "") of one entry in one dtype."""
    _opinfo, _Samples = _machinery()
    have = {str(d).split(".")[1] for d in op.supported_dtypes("cpu")}
    if dtype not in have:
        return NO_SAMPLE, {}, f"OpInfo declares no {dtype}"
    if "empty" in op.name:  # empty*, new_empty*: values undefined, nothing to compare
        return NO_SAMPLE, {}, "its values are undefined"
    torch.manual_seed(seed)
    try:
        made = []
        for i, s in enumerate(op.sample_inputs("cpu", getattr(torch, dtype), requires_grad=False)):
            if i >= samples:
                break
            made.append((i, s))
    except Exception as e:  # noqa: BLE001 - torch's own generator
        return NO_SAMPLE, {}, f"sample_inputs raised {type(e).__name__}"
    run = _Samples(op, dtype, "samples", seed, dev, torch, dkt)
    for i, s in made:
        try:
            run.sample(f"sample {i}", s)
        except Exception as e:  # noqa: BLE001 - one entry must not stop the count
            run.counts["error"] += 1
            run.problems.append(("error", f"sample {i}: {type(e).__name__}: {e}", None))
    c = run.counts
    lacks = sorted({m.group(1) for _, text, _ in run.problems
                    for m in [re.search(r"torch dtype (torch\.\w+) has no DeviceKit dtype", text)]
                    if m})
    if lacks:  # a dtype DeviceKit does not have (complex, int16): not a wrong value
        return MISSING, {f"(dtype {d})": 1 for d in lacks}, run.problems[0][1].splitlines()[0]
    if c["not-implemented"]:
        return MISSING, dict(run.unlowered), run.gaps[0] if run.gaps else ""
    if (c["fail"] or c["error"]) and all("to be on cpu" in text for _, text, _ in run.problems):
        return NO_SAMPLE, {}, "torch requires an argument on the CPU, the harness moves it"
    if c["fail"] or c["error"]:
        return WRONG, {}, run.problems[0][1].splitlines()[0] if run.problems else ""
    if c["pass"]:
        return RUNS, {}, ""
    return NO_SAMPLE, {}, "; ".join(run.skips[:1]) or "no sample"


def measure(device="cpu:0", dtypes=DTYPES, samples=2, only=None, progress=None):
    """{"torch": version, "entries": {name: {dtype: [verdict, unlowered, why]}}, "summary": ...}."""
    _opinfo, _ = _machinery()
    torch, dkt, op_db = _opinfo.load()
    dev = dkt.prefer(device)
    entries = {}
    ops = [op for op in op_db if only is None or _opinfo.full_name(op) in only]
    for k, op in enumerate(ops):
        name = _opinfo.full_name(op)
        if name in entries:
            continue
        with dkt.fallback(None):
            entries[name] = {dt: list(classify(op, dt, dev, samples, torch, dkt)) for dt in dtypes}
        if progress:
            progress(k + 1, len(ops), name)
    return {"torch": torch.__version__, "device": device, "samples": samples,
            "entries": entries, "summary": summarize(entries, dtypes)}


def summarize(entries, dtypes=DTYPES):
    """Per dtype: counts per verdict, entries with a sample, and runs / that."""
    out = {}
    for dt in dtypes:
        n = {v: 0 for v in (RUNS, WRONG, MISSING, NO_SAMPLE)}
        for cell in entries.values():
            n[cell[dt][0]] += 1
        judged = n[RUNS] + n[WRONG] + n[MISSING]
        out[dt] = {**n, "entries": len(entries), "with_sample": judged,
                   "coverage": round(n[RUNS] / judged, 4) if judged else 0.0}
    return out


def markdown(result):
    """The release's table as Markdown (docs/torch_opinfo.md)."""
    s, dts = result["summary"], list(result["summary"])
    lines = ["# OpInfo coverage of the PyTorch bridge", "",
             "Generated by `python -m devicekit.torch.opinfo_coverage --markdown "
             "docs/torch_opinfo.md` (do not edit by hand; the module's docstring defines the "
             "verdicts). torch " + result["torch"] + ", device " + result["device"] +
             f", the first {result['samples']} samples of each OpInfo entry, no CPU fallback.",
             "", "| dtype | entries | with a sample | runs | wrong | not implemented | "
             "no sample | coverage |", "|---|---|---|---|---|---|---|---|"]
    for dt in dts:
        c = s[dt]
        lines.append(f"| {dt} | {c['entries']} | {c['with_sample']} | {c[RUNS]} | {c[WRONG]} | "
                     f"{c[MISSING]} | {c[NO_SAMPLE]} | {100 * c['coverage']:.1f}% |")
    missing = {}
    for name, cell in result["entries"].items():
        for dt in dts:
            if cell[dt][0] == MISSING:
                missing.setdefault(name, ([], set()))[0].append(dt)
                missing[name][1].update(cell[dt][1])
    ops = {}
    for _, unlowered in missing.values():
        for a in unlowered:
            ops[a] = ops.get(a, 0) + 1
    lines += ["", "## ATen ops whose lowering would unlock the most entries", "",
              "| ATen op | entries blocked |", "|---|---|"]
    for a, n in sorted(ops.items(), key=lambda kv: (-kv[1], kv[0]))[:40]:
        lines.append(f"| `{a}` | {n} |")
    lines += ["", "## Entries not implemented (any dtype)", "",
              "| OpInfo entry | dtypes | unlowered ATen ops |", "|---|---|---|"]
    for name in sorted(missing):
        dtl, unlowered = missing[name]
        ops_text = ", ".join(f"`{a}`" for a in sorted(unlowered))
        lines.append(f"| `{name}` | {', '.join(dtl)} | "
                     f"{ops_text or '(a call its lowering does not cover)'} |")
    wrong = sorted((name, dt, cell[dt][2]) for name, cell in result["entries"].items()
                   for dt in dts if cell[dt][0] == WRONG)
    lines += ["", "## Entries that run but differ or raise", "",
              "| OpInfo entry | dtype | first problem |", "|---|---|---|"]
    for name, dt, why in wrong:
        lines.append(f"| `{name}` | {dt} | {why.replace('|', '/')[:160]} |")
    return "\n".join(lines) + "\n"


def parse_markdown(text):
    """{dtype: {column: int}} of a table :func:`markdown` wrote (what the test re-checks)."""
    out, cols = {}, ("entries", "with_sample", RUNS, WRONG, MISSING, NO_SAMPLE)
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 8 and cells[0] in DTYPES:
            out[cells[0]] = dict(zip(cols, map(int, cells[1:7])))
    return out


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m devicekit.torch.opinfo_coverage",
                                description="How many of torch's OpInfo entries devicekit.torch "
                                            "runs on a DeviceKit device, per dtype.")
    p.add_argument("--device", default="cpu:0")
    p.add_argument("--dtype", default=",".join(DTYPES))
    p.add_argument("--samples", type=int, default=2, help="samples per entry (default 2)")
    p.add_argument("--only", action="append", help="just this OpInfo entry (repeatable)")
    p.add_argument("--json", metavar="FILE")
    p.add_argument("--markdown", metavar="FILE")
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args(argv)
    start = time.monotonic()

    def progress(k, n, name):
        if not args.quiet and (k % 50 == 0 or k == n):
            print(f"[{k}/{n}] {name} ({time.monotonic() - start:.0f} s)", file=sys.stderr)
    result = measure(args.device, tuple(args.dtype.split(",")), args.samples,
                     set(args.only) if args.only else None, progress)
    for dt, c in result["summary"].items():
        print(f"{dt}: {c[RUNS]} of {c['with_sample']} OpInfo entries with a sample run "
              f"({100 * c['coverage']:.1f}%); {c[WRONG]} wrong, {c[MISSING]} not implemented, "
              f"{c[NO_SAMPLE]} without a sample (of {c['entries']})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1, default=str)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
