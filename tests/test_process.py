"""The process around the tensors: fork, threads against the caching
allocator, tensors a failed kernel left behind, and the CPU plugin's memory
budget.

Checks that could hang or crash run in a subprocess with a timeout, so a
regression fails the test instead of stopping the run.
"""

import gc
import os
import subprocess
import sys
import textwrap

import pytest

import devicekit as dk
from devicekit import ops

TIMEOUT = 120  # seconds; every check here takes well under 10 when it works


def run_script(tmp_path, source, *args, env=None, timeout=TIMEOUT):
    """Run `source` as a script file (multiprocessing's 'spawn' re-imports the
    main module, which a ``-c`` program does not have)."""
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(source))
    full_env = dict(os.environ, **(env or {}))
    try:
        return subprocess.run([sys.executable, str(script), *args], capture_output=True,
                              text=True, timeout=timeout, env=full_env)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"hung for {timeout} s: stdout {e.stdout!r} stderr {e.stderr!r}")


# --------------------------------------------------------------------------
# fork
# --------------------------------------------------------------------------

MULTIPROCESSING_SCRIPT = """
    import multiprocessing as mp
    import sys
    import devicekit as dk

    def work(q):
        try:
            q.put(("ok", (dk.ones(4) + 1).numpy().tolist()))
        except dk.DeviceKitError as e:
            q.put(("error", type(e).__name__, str(e)))

    if __name__ == "__main__":
        # The parent uses the device first: a stream with its worker thread,
        # and a launch big enough to start the plugin's thread pool.
        assert (dk.ones(1 << 20) * 2).sum().item() == 2 << 20
        ctx = mp.get_context(sys.argv[1])
        q = ctx.Queue()
        p = ctx.Process(target=work, args=(q,))
        p.start()
        print(repr(q.get(timeout=60)))
        p.join(60)
        # The parent is untouched by its child.
        print(repr(("parent", (dk.ones(2) * 3).numpy().tolist())))
"""


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_multiprocessing_child_works_or_names_spawn(tmp_path, method):
    r = run_script(tmp_path, MULTIPROCESSING_SCRIPT, method)
    assert r.returncode == 0, r.stderr
    child, parent = (eval(line) for line in r.stdout.strip().splitlines())
    assert parent == ("parent", [3.0, 3.0])
    if method == "spawn":
        assert child == ("ok", [2.0, 2.0, 2.0, 2.0])
    else:
        assert child[:2] == ("error", "ForkedProcessError"), child
        assert "cpu:0" in child[2] and "'spawn'" in child[2] and "fork()" in child[2]


def test_os_fork_child_refuses_inherited_tensors_and_never_hangs(tmp_path):
    r = run_script(tmp_path, """
        import os
        import devicekit as dk
        x = dk.ones(8) + 1
        pid = os.fork()
        if pid == 0:
            codes = []
            for attempt in (lambda: x.numpy(), lambda: x + 1, dk.synchronize, dk.empty_cache):
                try:
                    attempt()
                    codes.append("ran")
                except dk.ForkedProcessError:
                    codes.append("ForkedProcessError")
            del x  # dropping the parent's tensors must not touch the device either
            os._exit(0 if codes == ["ForkedProcessError"] * 4 else 3)
        _, status = os.waitpid(pid, 0)
        print(os.waitstatus_to_exitcode(status), (x * 2).numpy().tolist())
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split(maxsplit=1) == ["0", "[4.0, 4.0, 4.0, 4.0, 4.0, 4.0, 4.0, 4.0]\n"]


def test_fork_before_first_use_gives_a_working_child(tmp_path):
    # Importing devicekit loads the plugin but starts no thread: a child forked
    # then may use the device (what the ForkedProcessError message suggests).
    r = run_script(tmp_path, """
        import os
        import devicekit as dk
        dk.devices()
        pid = os.fork()
        if pid == 0:
            ok = (dk.ones(1 << 20) * 2).sum().item() == 2 << 20
            os._exit(0 if ok else 3)
        _, status = os.waitpid(pid, 0)
        print(os.waitstatus_to_exitcode(status))
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "0"


# --------------------------------------------------------------------------
# empty_cache against concurrent work
# --------------------------------------------------------------------------

EMPTY_CACHE_STRESS = """
    import sys
    import threading
    import time
    import devicekit as dk

    seconds = float(sys.argv[1])
    stop = time.monotonic() + seconds
    errors = []

    def worker(k):
        try:
            while time.monotonic() < stop:
                # Short-lived tensors: their blocks go back to the cache while
                # the kernels that use them are still queued.
                x = dk.full([4096 + 512 * k], float(k + 1))
                y = (x * 2 + 1) * 1
                del x
                total = y.sum().item()
                if total != (2 * (k + 1) + 1) * (4096 + 512 * k):
                    errors.append(f"worker {k}: sum {total}")
                    return
        except Exception as e:  # reported below, never swallowed
            errors.append(f"worker {k}: {type(e).__name__}: {e}")

    def emptier():
        while time.monotonic() < stop:
            dk.empty_cache()

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(3)]
    threads.append(threading.Thread(target=emptier))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print("errors:", errors)
    print("frees:", dk.memory_stats()["plugin_free_calls"])
    sys.exit(1 if errors else 0)
"""


def test_empty_cache_is_safe_against_ops_on_other_threads(tmp_path):
    seconds = os.environ.get("DEVICEKIT_STRESS_SECONDS", "3")
    r = run_script(tmp_path, EMPTY_CACHE_STRESS, seconds)
    assert r.returncode == 0, f"stdout {r.stdout!r} stderr {r.stderr[-4000:]!r}"
    assert "errors: []" in r.stdout
    frees = int(r.stdout.split("frees:")[1])
    assert frees > 0, "empty_cache never returned a block: the race was not exercised"


# --------------------------------------------------------------------------
# A tensor whose producing kernel failed stays failed
# --------------------------------------------------------------------------

def test_tensor_left_by_a_failed_kernel_raises_again(cpu):
    x = dk.tensor([1.0, 2.0, 3.0], device=cpu)
    bad = ops.gather(x, 0, dk.tensor([0, 7], dtype=dk.int64, device=cpu))  # async error
    with pytest.raises(dk.DeviceError) as first:
        bad.numpy()
    assert "gather" in str(first.value) and "7" in str(first.value)
    with pytest.raises(dk.DeviceError) as again:
        bad.numpy()
    assert str(first.value) in str(again.value)
    assert again.value.code == first.value.code
    assert "raised again" in str(again.value)
    with pytest.raises(dk.DeviceError) as derived:
        bad + 1  # computing from it fails the same way, before any launch
    assert str(first.value) in str(derived.value)
    # Work enqueued after the error was reported is unaffected.
    assert (x * 2).numpy().tolist() == [2.0, 4.0, 6.0]
    assert dk.ones(2, device=cpu).numpy().tolist() == [1.0, 1.0]


# --------------------------------------------------------------------------
# The CPU plugin's memory budget
# --------------------------------------------------------------------------

def _meminfo(key):
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    pytest.skip(f"no {key} in /proc/meminfo")


def test_cpu_default_budget_is_deliverable(cpu):
    # Half of the memory available when the plugin loaded: at most half of
    # the physical memory (it used to report all of it).
    if "DEVICEKIT_CPU_MEMORY_BYTES" in os.environ:
        pytest.skip("DEVICEKIT_CPU_MEMORY_BYTES sets the budget in this environment")
    total = cpu.properties["total_memory"]
    assert 0 < total <= _meminfo("MemTotal") // 2
    assert cpu.memory_stats()["total_bytes"] == total


def test_cpu_budget_env_var_gives_clean_out_of_memory(tmp_path):
    budget = 64 << 20
    r = run_script(tmp_path, """
        import devicekit as dk
        cpu = dk.device("cpu:0")
        print(cpu.properties["total_memory"], cpu.memory_stats()["total_bytes"])
        x = dk.full([8 << 20], 1.0)  # 32 MiB: committed, so usable at once
        print(x.sum().item())
        try:
            dk.empty(12 << 20)  # 48 MiB more: over the budget
            print("allocated")
        except dk.OutOfMemoryError as e:
            print("OutOfMemoryError", "DEVICEKIT_CPU_MEMORY_BYTES" in str(e))
    """, env={"DEVICEKIT_CPU_MEMORY_BYTES": str(budget)})
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [f"{budget} {budget}", str(float(8 << 20)),
                                     "OutOfMemoryError True"]


def test_cpu_allocation_is_committed(cpu):
    # 64 MiB through the plugin: resident at once (committed), not on first touch.
    gc.collect()
    dk.empty_cache(cpu)

    def rss():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    before = rss()
    buf = cpu.alloc(64 << 20)
    grown = rss() - before
    buf.free()
    assert grown >= 60 << 20, f"resident memory grew by {grown} bytes only"

