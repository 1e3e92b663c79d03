"""A second viewer for the trace of docs/trace.md: a ``devicekit.trace`` of one
training step of the HF GPT-2 model of the model regression (``hf-gpt2``:
transformers' ``GPT2LMHeadModel``, dim 64, 2 layers) on ``dk:0`` -- forward,
loss, backward, one ``torch.optim.AdamW`` step -- as Catapult's Trace-Viewer
renders it. The picture in the docs is Perfetto's
(``benchmarks/perfetto_picture.py``, which uses :func:`record_step` and
:func:`shrink` from here); this one checks that a second importer reads the
same file.

The viewer is Catapult's Trace-Viewer (the engine of ``chrome://tracing``):
its ``tracing/bin/trace2html`` makes one standalone HTML file of the viewer
and the JSON, and headless Chromium opens that file and takes the screenshot.
Nothing is drawn by this script.

    python benchmarks/trace_picture.py --catapult /path/to/catapult \\
        --out trace_catapult.png [--json step.json] [--chromium chromium]

Needs (none of them a DeviceKit dependency; this is not run in CI):

- the reference CPU plugin (``dk:0``), torch and transformers;
- a checkout of https://github.com/catapult-project/catapult (only its
  ``tracing/`` and ``third_party/`` folders are read; ``trace2html`` runs
  under Python 3);
- Chromium or Chrome (``apt-get install chromium``), run headless;
- Pillow, to crop and shrink the PNG (optional: without it the screenshot is
  kept as is).

Headless Chromium's ``--screenshot`` waits for virtual time, which runs
timers but not animation frames, and the viewer imports and draws on
``requestAnimationFrame``; so one script is put at the top of the page's
``<head>`` that runs animation-frame callbacks from a 16 ms timer instead.
Nothing else of the viewer or the trace is changed: the drawing is the
viewer's own.

It also prints what the viewer made of the file: the import warnings of its
model (every one, and those it shows the user), its processes, threads and
event counts, read from the loaded page by a probe script added to a second
copy of the HTML (``--dump-dom``; the screenshot is of the page without it).
"""

import argparse
import base64
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter

# Animation frames from a timer (virtual time runs timers, not frames).
_FRAMES_FROM_TIMER = ("<script>window.requestAnimationFrame = function(cb) {"
                      " return setTimeout(function() { cb(performance.now()); }, 16); };"
                      " window.cancelAnimationFrame = clearTimeout;</script>")

# What the probe leaves in the page once the viewer has imported the trace:
# the model's import warnings, and the event counts the viewer built.
_PROBE = """
<script>
(function poll() {
  const v = window.g_timelineViewEl || (typeof g_timelineViewEl !== 'undefined' && g_timelineViewEl);
  const m = v && v.model;
  if (!m) { setTimeout(poll, 100); return; }
  let slices = 0, counters = 0, instants = 0;
  for (const e of m.getDescendantEvents()) {
    if (e instanceof tr.model.ThreadSlice) slices++;
    else if (e instanceof tr.model.CounterSample) counters++;
    else if (e instanceof tr.model.InstantEvent) instants++;
  }
  const out = {
    warnings: m.importWarnings.map(w => w.type + ': ' + w.message),
    shown: m.importWarningsThatShouldBeShownToUser.map(w => w.type + ': ' + w.message),
    processes: Object.values(m.processes).map(p => p.userFriendlyName),
    threads: m.getAllThreads().map(t => t.userFriendlyName),
    slices: slices, counters: counters, instants: instants,
  };
  const pre = document.createElement('pre');
  pre.id = 'dk-probe';
  pre.textContent = btoa(JSON.stringify(out));
  document.body.appendChild(pre);
})();
</script>
"""


def record_step(path):
    """Trace one steady training step of hf-gpt2 on dk:0 (after one untraced
    step, so that first-call work is not in the picture)."""
    import torch

    import devicekit as dk
    from devicekit import _tracing
    from devicekit.models import harness as H
    from devicekit.models import hf

    model = hf.get("hf-gpt2")
    s = hf._Setup(model, hf.torch_device("cpu:0"), "float32")
    opt = torch.optim.AdamW(s.masters.values(), lr=H.LR, weight_decay=H.WEIGHT_DECAY)

    def step(mark):
        with mark("forward"):
            logits = s.forward()
        with mark("loss"):
            loss = s.loss(logits)
        with mark("backward"):
            loss.backward()
        with mark("AdamW step"):
            opt.step()
            opt.zero_grad()
        with mark("loss.item()"):
            return float(loss.item())

    class _Phase:  # a host span per phase of the step, on the calling thread
        def __init__(self, name):
            self.name = name

        def __enter__(self):
            self.t0 = _tracing.now_ns()

        def __exit__(self, *exc):
            if _tracing.on:
                _tracing.add("step", self.name, self.t0)

    first = step(_Phase)
    with dk.trace.record(path) as r:
        second = step(_Phase)
    n = sum(1 for e in r.trace["traceEvents"] if e["ph"] == "X")
    print(f"recorded {path}: {n} spans; loss {first:.4f} -> {second:.4f}")
    return r.trace


def trace2html(catapult, json_path, html_path, title):
    tool = os.path.join(catapult, "tracing", "bin", "trace2html")
    subprocess.run([sys.executable, tool, json_path, "--output", html_path, "--title", title],
                   check=True, timeout=600)
    with open(html_path) as f:
        html = f.read()
    head = re.search(r"<head\b[^>]*>", html)
    if head is None:
        raise SystemExit(f"trace_picture: {html_path} from trace2html has no <head>")
    with open(html_path, "w") as f:
        f.write(html[:head.end()] + _FRAMES_FROM_TIMER + html[head.end():])


def chromium(binary, args, timeout=300):
    base = [binary, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
            "--no-first-run", "--no-default-browser-check"]
    return subprocess.run(base + args, check=True, timeout=timeout, capture_output=True, text=True)


def probe(binary, html_path, budget_ms):
    """What the viewer made of the trace (the probe's JSON)."""
    with open(html_path) as f:
        html = f.read()
    probe_path = html_path[:-5] + "-probe.html"
    with open(probe_path, "w") as f:
        f.write(html.replace("</body>", _PROBE + "</body>") if "</body>" in html else html + _PROBE)
    dom = chromium(binary, [f"--virtual-time-budget={budget_ms}", "--dump-dom",
                            "file://" + probe_path]).stdout
    start = dom.find('<pre id="dk-probe">')
    if start < 0:
        raise SystemExit("trace_picture: the viewer has no model of the trace in the page "
                         "(it failed to import it, or needs more time: --budget-ms)")
    text = dom[start + len('<pre id="dk-probe">'):dom.index("</pre>", start)]
    return json.loads(base64.b64decode(text))


def screenshot(binary, html_path, png, size, budget_ms):
    chromium(binary, [f"--window-size={size}", f"--virtual-time-budget={budget_ms}",
                      f"--screenshot={png}", "file://" + html_path])


def shrink(png, keep_height, max_kb):
    """Keep the top ``keep_height`` pixels (the tracks; below them the
    viewer's empty track area and its selection panel) in 128 colours."""
    try:
        from PIL import Image
    except ImportError:
        print("Pillow not installed: the screenshot is kept as is")
        return
    img = Image.open(png).convert("RGB")
    if keep_height and keep_height < img.size[1]:
        img = img.crop((0, 0, img.size[0], keep_height))
    img = img.quantize(colors=128, method=Image.Quantize.MEDIANCUT)
    img.save(png, optimize=True)
    print(f"{png}: {img.size[0]}x{img.size[1]}, {os.path.getsize(png) // 1024} KB"
          + ("" if os.path.getsize(png) <= max_kb * 1024 else f" (over {max_kb} KB)"))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--catapult", required=True, help="a catapult checkout (tracing/, third_party/)")
    ap.add_argument("--out", default="trace_catapult.png")
    ap.add_argument("--json", help="keep the trace here (default: a temporary file)")
    ap.add_argument("--from-json", help="render this trace instead of recording one")
    ap.add_argument("--chromium", default="chromium")
    ap.add_argument("--size", default="1600,900", help="the browser window, WIDTH,HEIGHT")
    ap.add_argument("--budget-ms", type=int, default=20000,
                    help="virtual time the page gets to import and draw the trace")
    ap.add_argument("--keep-height", type=int, default=360,
                    help="crop the screenshot to its top this many pixels (0: keep it all)")
    ap.add_argument("--max-kb", type=int, default=300)
    args = ap.parse_args(argv)

    with tempfile.TemporaryDirectory() as tmp:
        json_path = args.from_json or args.json or os.path.join(tmp, "step.json")
        if not args.from_json:
            record_step(json_path)
        html_path = os.path.join(tmp, "step.html")
        t0 = time.time()
        trace2html(args.catapult, json_path, html_path,
                   "devicekit.trace: one hf-gpt2 training step on dk:0")
        print(f"trace2html: {html_path} ({time.time() - t0:.0f} s)")
        seen = probe(args.chromium, html_path, args.budget_ms)
        print(f"viewer: {len(seen['processes'])} processes {seen['processes']}, "
              f"{len(seen['threads'])} threads, {seen['slices']} slices, "
              f"{seen['counters']} counter samples, {seen['instants']} instants")
        print(f"viewer import warnings: {len(seen['warnings'])} "
              f"({len(seen['shown'])} shown to the user)")
        for w in seen["warnings"]:
            print("  " + w)
        with open(json_path) as f:
            phases = Counter(e["ph"] for e in json.load(f)["traceEvents"])
        # the viewer makes a zero-length slice of each thread-scoped instant
        print(f"the file: {phases['X']} X spans + {phases['i']} i instants = "
              f"{phases['X'] + phases['i']} slices, {phases['C']} counter samples")
        screenshot(args.chromium, html_path, os.path.abspath(args.out), args.size, args.budget_ms)
        shrink(args.out, args.keep_height, args.max_kb)


if __name__ == "__main__":
    main()
