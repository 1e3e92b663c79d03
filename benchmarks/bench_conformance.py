"""Times the full conformance suite on the reference CPU plugin (budget: 120 s
with --jobs 2 on a 2-core machine). Usage: python benchmarks/bench_conformance.py [JOBS]"""

import json
import subprocess
import sys
import tempfile
import time

jobs = sys.argv[1] if len(sys.argv) > 1 else "2"
with tempfile.TemporaryDirectory() as out:
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "devicekit", "conformance", "--device", "cpu:0",
                           "--jobs", jobs, "--report", out], capture_output=True, text=True)
    took = time.perf_counter() - start
    summary = json.load(open(f"{out}/report.json"))["summary"]
print(f"conformance cpu:0 --jobs {jobs}: {summary['total']} cases in {took:.1f} s, "
      f"exit {proc.returncode}, {summary['by_outcome']}")
