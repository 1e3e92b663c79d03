#!/usr/bin/env bash
# The one-command GPU check of the reference CUDA plugin.
#
# From a clean tree on a machine with an NVIDIA GPU and no network:
#   bash reference_backend/cuda/verify_on_gpu.sh [--out DIR] [--arch SM] [--wheelhouse DIR]
#                                                [--python PY [--skip-build]] [--quick] [--dry-run]
# it builds the SDK and the plugin for this GPU, installs both offline into a
# venv of its own (the machine's packages visible beneath it), and runs, in
# order, each step recorded in DIR/summary.md and DIR/summary.json (status,
# seconds, log file):
#   1. tools      nvidia-smi, nvcc, compute-sanitizer, python, torch with CUDA
#   2. build      the SDK and the real plugin (SASS for --arch), offline
#   3. devices    `devicekit devices` lists cuda:0 with no load error
#   4. selftest   the SIMT self-test (tests/simt_selftest.cu) built by nvcc:
#                 the correct kernels give the right results on the GPU
#   5. graphs     the conformance graphs section first (a few seconds): CUDA
#                 graphs (native) against eager and DeviceKit's recording,
#                 events in captures, forbidden host work in a capture
#   6. sanitize   the conformance suite's core level under compute-sanitizer:
#                 memcheck, racecheck, initcheck, synccheck (one run each,
#                 every worker process followed; --quick: one op per tool)
#   7. conform    the full conformance suite, plain (the graphs section again)
#   8. models     the model suite, plain
#   9. bench      bench_gpu.py against the PyTorch CUDA installed there
# A failing step is recorded and the next one still runs; the exit status is
# 1 when any step failed.
#
# --dry-run: every step that needs no GPU runs for real (the build for sm_90,
# the install, the self-test's nvcc build, the benchmark script at tiny sizes
# on cpu:0); the others print the exact command they would run and are
# recorded as "dry-run". CI runs it so, and the first GPU session spends no
# minute debugging this script.
# --wheelhouse DIR: wheels for what the machine lacks (pip install --no-index
# --find-links DIR); make one on a networked machine with
#   pip download -d DIR --only-binary=:all: --python-version 3.12 jsonschema cryptography ...
# --python PY: install into PY's environment instead of a new venv.
# --skip-build: with --python, use the devicekit and devicekit_cuda already
# installed there (CI's dry run: the real wheel was built by the step before).
set -uo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="" arch="" wheelhouse="" python="" quick=0 dry=0 skip_build=0
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out="$2"; shift 2 ;;
    --arch) arch="$2"; shift 2 ;;
    --wheelhouse) wheelhouse="$2"; shift 2 ;;
    --python) python="$2"; shift 2 ;;
    --quick) quick=1; shift ;;
    --skip-build) skip_build=1; shift ;;
    --dry-run) dry=1; shift ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "verify_on_gpu: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
if [ "$skip_build" = 1 ] && [ -z "$python" ]; then
  echo "verify_on_gpu: --skip-build needs --python (the environment that has the builds)" >&2; exit 2
fi
out="${out:-$root/gpu-verify-$(date -u +%Y%m%dT%H%M%SZ)}"
mkdir -p "$out/logs" || { echo "verify_on_gpu: cannot create $out" >&2; exit 3; }
out="$(cd "$out" && pwd)"
: >"$out/steps.tsv"
failed=0

# step NAME GPU? COMMAND...: runs COMMAND (or, in a dry run, when GPU? is
# "gpu", prints it), logging to logs/NAME.log and appending a line to steps.tsv.
step() {
  local name="$1" needs="$2"; shift 2
  local log="$out/logs/$name.log" t0 t1 status
  echo "== $name: $*"
  t0=$(date +%s)
  if [ "$dry" = 1 ] && [ "$needs" = gpu ]; then
    printf 'dry run: would run\n  %s\n' "$*" | tee "$log"
    status=dry-run
  elif ( set -o pipefail; "$@" 2>&1 | tee "$log" ); then
    status=pass
  else
    status=FAIL; failed=1
  fi
  t1=$(date +%s)
  printf '%s\t%s\t%s\t%s\n' "$name" "$status" "$((t1 - t0))" "logs/$name.log" >>"$out/steps.tsv"
  echo "== $name: $status ($((t1 - t0)) s)"
}

# ---------------------------------------------------------------- 1. tools
tools() {
  local ok=0
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv || { echo "no nvidia-smi"; ok=1; }
  command -v compute-sanitizer >/dev/null && compute-sanitizer --version | head -2 || { echo "no compute-sanitizer"; ok=1; }
  "$py" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'available', torch.cuda.is_available())" || ok=1
  return $ok
}
nvcc="${CUDACXX:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}"
[ -x "$nvcc" ] || { echo "verify_on_gpu: nvcc not found (CUDACXX, PATH, /usr/local/cuda/bin)" >&2; exit 2; }
"$nvcc" --version | tail -2

if [ -z "$arch" ]; then
  arch=90
  if [ "$dry" = 0 ] && command -v nvidia-smi >/dev/null; then
    arch="$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d '. ')"
  fi
fi

# ---------------------------------------------------------------- 2. build
if [ -n "$python" ]; then
  py="$python"
else
  # The machine's own packages (torch, numpy, pytest, scikit-build-core) stay
  # visible beneath the venv: nothing can be downloaded there.
  python3 -m venv --system-site-packages "$out/venv" || exit 3
  py="$out/venv/bin/python"
fi
step tools gpu tools
pipargs=(--no-build-isolation --no-deps)
[ -n "$wheelhouse" ] && pipargs+=(--no-index --find-links "$wheelhouse")
build() {
  if [ -n "$wheelhouse" ]; then
    "$py" -m pip install -q --no-index --find-links "$wheelhouse" "$wheelhouse"/*.whl || return 1
  fi
  "$py" -m pip install -q "${pipargs[@]}" "$root" &&
    "$py" -m pip install -q "${pipargs[@]}" "$here" -C "cmake.define.CMAKE_CUDA_ARCHITECTURES=$arch" &&
    "$py" -c "import devicekit, devicekit_cuda; print('installed', devicekit.__version__, devicekit_cuda.library_path())"
}
if [ "$skip_build" = 1 ]; then
  step build cpu "$py" -c "import devicekit, devicekit_cuda; print('prebuilt (--skip-build):', devicekit.__version__, devicekit_cuda.__file__)"
else
  step build cpu build
fi
dkcli=("$py" -m devicekit)

# ---------------------------------------------------------------- 3. devices
devices_ok() {
  "${dkcli[@]}" devices | tee "$out/devices.txt" && grep -q '^ *cuda:0' "$out/devices.txt" &&
    ! grep -qi 'cuda.*error' "$out/devices.txt"
}
step devices gpu devices_ok

# ---------------------------------------------------------------- 4. selftest
selftest_build() {
  "$nvcc" -std=c++17 -arch="sm_$arch" -o "$out/simt_selftest" "$here/tests/simt_selftest.cu"
}
selftest_run() {
  local c r
  for c in add_strided row_sum warp_allreduce; do
    r="$("$out/simt_selftest" "$c")"; echo "$c: $r"; [ "$r" = ok ] || return 1
  done
  # racecheck must see the race the emulator reports
  compute-sanitizer --tool racecheck --error-exitcode 9 "$out/simt_selftest" row_sum_missing_barrier
  [ $? = 9 ] && echo "racecheck found the planted missing barrier"
}
step selftest-build cpu selftest_build
step selftest gpu selftest_run

# ---------------------------------------------------------------- 5. graphs
step graphs gpu "${dkcli[@]}" conformance --device cuda:0 -k graphs/ --report "$out/graphs"

# ---------------------------------------------------------------- 6. sanitize
if [ "$quick" = 1 ]; then sel=(--op add --op matmul --op reduce_sum); else sel=(); fi
for tool in memcheck racecheck initcheck synccheck; do
  step "sanitize-$tool" gpu compute-sanitizer --tool "$tool" --target-processes all --error-exitcode 9 \
    "${dkcli[@]}" conformance --device cuda:0 --level core --jobs 4 "${sel[@]}" \
    --report "$out/sanitize-$tool"
done

# In a dry run the suites' command lines above and below are still checked:
# the same arguments, on cpu:0, with --list (prints the selection, runs nothing).
if [ "$dry" = 1 ]; then
  check_args() {
    "${dkcli[@]}" conformance --device cpu:0 --level core "${sel[@]}" --list | tail -1 &&
      "${dkcli[@]}" conformance --device cpu:0 --list | tail -1 &&
      "${dkcli[@]}" conformance --device cpu:0 -k graphs/ --list | tail -1 &&
      "${dkcli[@]}" models --device cpu:0 --list | tail -1
  }
  step suite-args cpu check_args
fi

# ---------------------------------------------------------------- 7-8. suites
step conform gpu "${dkcli[@]}" conformance --device cuda:0 --report "$out/conformance"
step models gpu "${dkcli[@]}" models --device cuda:0 --report "$out/models"

# ---------------------------------------------------------------- 9. bench
if [ "$dry" = 1 ]; then
  step bench cpu "$py" "$here/bench_gpu.py" --dry-run --rounds 3 --json "$out/bench.json"
else
  step bench gpu "$py" "$here/bench_gpu.py" --device cuda:0 --json "$out/bench.json"
fi

# ---------------------------------------------------------------- summary
"$py" - "$out" "$dry" "$arch" <<'EOF'
import json, pathlib, sys
out, dry, arch = pathlib.Path(sys.argv[1]), sys.argv[2] == "1", sys.argv[3]
steps = [dict(zip(("step", "status", "seconds", "log"), l.split("\t")))
         for l in (out / "steps.tsv").read_text().splitlines()]
bench = out / "bench.json"
doc = {"dry_run": dry, "arch": f"sm_{arch}", "steps": steps,
       "bench": json.loads(bench.read_text()) if bench.exists() else None}
(out / "summary.json").write_text(json.dumps(doc, indent=1))
lines = [f"# verify_on_gpu {'(dry run) ' if dry else ''}sm_{arch}", "",
         "| step | status | seconds | log |", "| --- | --- | --- | --- |"]
lines += [f"| {s['step']} | {s['status']} | {s['seconds']} | {s['log']} |" for s in steps]
if doc["bench"]:
    lines += ["", "| figure | unit | devicekit median | torch median |", "| --- | --- | --- | --- |"]
    for name, f in doc["bench"]["figures"].items():
        d = f.get("devicekit", {}).get("median")
        lines.append(f"| {name} | {f['unit']} | {'' if d is None else f'{d:.4g}'} | {f['torch']['median']:.4g} |")
(out / "summary.md").write_text("\n".join(lines) + "\n")
print("\n".join(lines))
EOF
echo "verify_on_gpu: summary in $out/summary.md"
exit $failed
