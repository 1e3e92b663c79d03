"""The model regression as plain pytest:

    pytest --pyargs devicekit.models.suite --device cpu:0 [--plugin PATH] [-k gpt2]

One test per model x dtype x phase, run in this process (no crash isolation:
use ``devicekit models`` for that); the reference side still runs in its own
process. fail -> failed (with the first diverging layer); error -> error;
not-implemented -> failed with "NOT IMPLEMENTED" (never a pass, also for the
optional dtypes, as in the conformance suite's pytest entry).
"""

import shlex

import pytest

from devicekit.conformance.pytest_plugin import target
from devicekit.models import NAMES, get
from devicekit.models.harness import DEFAULT_STEPS, DTYPES, PHASES
from devicekit.models.worker import case_id, run_model

_results = {}


def _run(config, model, dtype):
    """{case id: result} of one model in one dtype, computed once per session."""
    key = (model, dtype)
    if key not in _results:
        t = target(config)
        device, plugin = config.getoption("dk_device"), config.getoption("dk_plugin")
        where = " ".join(f"--{k} {shlex.quote(v)}" for k, v in (("plugin", plugin),
                                                                   ("device", device)) if v)
        out = {}

        def emit(msg):
            if "case" in msg:
                out[msg["case"]] = msg
        run_model(get(model), t, [dtype], DEFAULT_STEPS, where, emit)
        _results[key] = out
    return _results[key]


@pytest.mark.parametrize("phase", PHASES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("model", NAMES)
def test_model(request, model, dtype, phase):
    r = _run(request.config, model, dtype)[case_id(model, dtype, phase)]
    if r["outcome"] == "not-implemented":
        pytest.fail(f"NOT IMPLEMENTED: {r['message']}", pytrace=False)
    if r["outcome"] == "fail":
        pytest.fail(r["message"], pytrace=False)
    if r["outcome"] != "pass":
        raise RuntimeError(r["message"])
