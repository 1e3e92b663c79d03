"""The conformance suite as plain pytest.

    pytest --pyargs devicekit.conformance_tests --device cpu:0 [--plugin PATH] [--level core]

``devicekit/conformance_tests/conftest.py`` loads this module as a plugin;
if your pytest does not read that conftest before parsing options (older
pytest with --pyargs), add ``-p devicekit.conformance.pytest_plugin``.
One test per case. The cases run in worker processes, exactly as
``devicekit conformance`` runs them (``runner.run``: the same workers, the
same checks after each case): a kernel that crashes kills a worker, not the
pytest session, and its test fails naming the signal and the case while the
session goes on. The selected cases run as one batch when the first of them
is reached (``--conformance-jobs`` workers; ``--conformance-timeout``
seconds each); their tests then report in order. ``--conformance-in-process``
runs each case in this process instead (a debugger sees the plugin; a crash
ends the session). (The options are long on purpose: every pytest in an
environment with devicekit has them, through the pytest11 entry point.)
fail -> failed; crash -> failed with "CRASH"; error -> error;
not-implemented -> failed with "NOT IMPLEMENTED" (never a pass, also for
optional dtypes); skipped -> skipped.
"""

import os

import pytest


def pytest_addoption(parser):
    group = parser.getgroup("devicekit conformance")
    group.addoption("--device", dest="dk_device", help="device under test, e.g. cpu:0")
    group.addoption("--plugin", dest="dk_plugin", help="plugin library path (development)")
    group.addoption("--level", dest="dk_level", default="full", choices=("core", "full"))
    group.addoption("--conformance-jobs", dest="dk_jobs", type=int, default=os.cpu_count() or 1,
                    help="conformance worker processes (default: CPU count)")
    group.addoption("--conformance-timeout", dest="dk_timeout", type=float, default=120.0,
                    help="seconds per conformance case before its worker is killed (default 120)")
    group.addoption("--conformance-in-process", dest="dk_in_process", action="store_true",
                    help="run conformance cases in the pytest process (no crash isolation)")


_target = None
_selected = []  # the conformance cases pytest will run, in order (after -k and deselection)
_results = {}   # case id -> result dict, once the batch ran


def target(config):
    """The Target for this session (opened once)."""
    global _target
    if _target is None:
        from .target import open_target

        device, plugin = config.getoption("dk_device"), config.getoption("dk_plugin")
        if not device and not plugin:
            raise pytest.UsageError("the conformance suite needs --device NAME or --plugin PATH")
        _target = open_target(device, plugin, config.getoption("dk_level"))
    return _target


def pytest_generate_tests(metafunc):
    if "conformance_case" in metafunc.fixturenames:
        from . import registry

        cases, _ = registry.build(target(metafunc.config))
        metafunc.parametrize("conformance_case", cases, ids=[c.id for c in cases])


@pytest.hookimpl(trylast=True)  # after -k / -m deselected theirs: what is left will run
def pytest_collection_modifyitems(config, items):
    _selected[:] = [item.callspec.params["conformance_case"] for item in items
                    if "conformance_case" in getattr(getattr(item, "callspec", None), "params", {})]


def _run_isolated(case, config):
    """``case``'s result from the worker batch (run once, on first use)."""
    if case.id not in _results:
        from . import runner

        plugin = config.getoption("dk_plugin")
        batch = [c for c in _selected if c.id not in _results]
        if case.id not in {c.id for c in batch}:
            batch.append(case)
        try:
            _results.update(runner.run(
                batch, device=config.getoption("dk_device") if plugin else
                target(config).device.name, plugin=os.path.abspath(plugin) if plugin else None,
                level=config.getoption("dk_level"), jobs=max(1, config.getoption("dk_jobs")),
                timeout=config.getoption("dk_timeout")))
        except runner.Interrupted:  # Ctrl-C: the workers are gone; stop the session too
            raise KeyboardInterrupt from None
    return _results[case.id]


def _replay(case, config):
    where = [f"--{k} {config.getoption('dk_' + k)}" for k in ("device", "plugin")
             if config.getoption("dk_" + k)]
    return f"devicekit conformance {' '.join(where)} --case {case.id}"


def check(case, config):
    """Runs ``case`` (in a worker unless --conformance-in-process); its outcome becomes pytest's."""
    from .case import CRASH, ERROR, FAIL, NOT_IMPLEMENTED, SKIPPED, run_case

    if config.getoption("dk_in_process"):
        r = run_case(case, target(config))
    else:
        r = _run_isolated(case, config)
    if r["outcome"] == SKIPPED:
        pytest.skip(r["message"])
    if r["outcome"] == NOT_IMPLEMENTED:
        pytest.fail(f"NOT IMPLEMENTED: {r['message']}", pytrace=False)
    if r["outcome"] == FAIL:
        pytest.fail(f"{r['message']}\nseed {case.seed}", pytrace=False)
    if r["outcome"] == CRASH:
        tail = r.get("details", {}).get("stderr_tail", "")
        pytest.fail(f"CRASH: {r['message']}\nreplay alone: {_replay(case, config)}\n"
                    f"worker stderr (tail):\n{tail[-2000:]}", pytrace=False)
    if r["outcome"] == ERROR:
        raise RuntimeError(r["message"])
