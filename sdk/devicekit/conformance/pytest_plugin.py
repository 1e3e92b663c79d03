"""The conformance suite as plain pytest.

    pytest --pyargs devicekit.conformance_tests --device cpu:0 [--plugin PATH] [--level core]

``devicekit/conformance_tests/conftest.py`` loads this module as a plugin;
if your pytest does not read that conftest before parsing options (older
pytest with --pyargs), add ``-p devicekit.conformance.pytest_plugin``.
One test per case, in this process (no crash isolation: use
``devicekit conformance`` for that). fail -> failed; error -> error;
not-implemented -> failed with "NOT IMPLEMENTED" (never a pass, also for
optional dtypes); skipped -> skipped.
"""

import pytest


def pytest_addoption(parser):
    group = parser.getgroup("devicekit conformance")
    group.addoption("--device", dest="dk_device", help="device under test, e.g. cpu:0")
    group.addoption("--plugin", dest="dk_plugin", help="plugin library path (development)")
    group.addoption("--level", dest="dk_level", default="full", choices=("core", "full"))


_target = None


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


def check(case, config):
    """Runs ``case`` and turns its outcome into pytest's."""
    from .case import ERROR, FAIL, NOT_IMPLEMENTED, SKIPPED, run_case

    r = run_case(case, target(config))
    if r["outcome"] == SKIPPED:
        pytest.skip(r["message"])
    if r["outcome"] == NOT_IMPLEMENTED:
        pytest.fail(f"NOT IMPLEMENTED: {r['message']}", pytrace=False)
    if r["outcome"] == FAIL:
        pytest.fail(f"{r['message']}\nseed {case.seed}", pytrace=False)
    if r["outcome"] == ERROR:
        raise RuntimeError(r["message"])
