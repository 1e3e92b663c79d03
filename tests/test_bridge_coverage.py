"""The bridge coverage check (``benchmarks/coverage_run.py --bridge --check``):
on a synthetic coverage.py JSON report (no conformance run), an untaken
lowering branch nobody listed fails it, listed ones are counted by status,
entries that match nothing are reported stale; and the reviewed list
``ci/bridge_coverage_exclusions.toml`` is well-formed and names real code."""

import json
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

import _bridge_coverage as bc  # noqa: E402
import coverage_run  # noqa: E402

ROOT = "/somewhere/site-packages/devicekit/torch/"


def report(functions):
    """A coverage.py JSON report: {file: {function: [missing arcs]}}."""
    files = {}
    for name, fns in functions.items():
        files[ROOT + name] = {
            "summary": {
                "covered_lines": 10,
                "num_statements": 12,
                "covered_branches": 4,
                "num_branches": 4 + sum(len(a) for a in fns.values()),
            },
            "functions": {fn: {"missing_branches": [list(a) for a in arcs]} for fn, arcs in fns.items()},
        }
    return {"files": files}


DATA = report(
    {
        "_lower_nn.py": {"gelu_backward": [(177, 179), (180, 181)], "sdpa": [(215, 216)]},
        "_dispatch.py": {"_where": [(311, 312)]},
        "graphs.py": {"capture": [(106, 107)]},  # not a lowering file: never checked
    }
)

TOML = """
[[exclude]]
file = "devicekit/torch/_lower_nn.py"
function = "gelu_backward"
arcs = ["177->179"]
status = "unreachable"
reason = "the fused kernel always accepts"

[[exclude]]
file = "devicekit/torch/_lower_nn.py"
function = "sdpa"
lines = [210, 220]
status = "other-tests"
reason = "dropout: tests/test_x.py"

[[exclude]]
file = "devicekit/torch/_dispatch.py"
function = "_where"
arcs = ["311->312"]
status = "needs-case"
reason = "a case is missing"

[[exclude]]
file = "devicekit/torch/_lower_ops.py"
function = "gone"
arcs = ["1->2"]
status = "unreachable"
reason = "code that moved"
"""


def run(tmp_path, toml):
    out = tmp_path / "out"
    out.mkdir()
    (out / "bridge.json").write_text(json.dumps(DATA))
    (tmp_path / "ex.toml").write_text(toml)
    return coverage_run.main(
        ["--bridge", "--collect-only", "--out", str(out), "--check", str(tmp_path / "ex.toml")]
    ), out


def test_check_fails_on_an_unlisted_lowering_branch(tmp_path, capsys):
    status, out = run(tmp_path, TOML)
    text = capsys.readouterr().out
    assert status == 1
    # 180->181 of gelu_backward is the only branch no entry lists (177->179 is)
    assert re.findall(r"NOT LISTED: +(.*)", text) == ["devicekit/torch/_lower_nn.py  gelu_backward: 180->181"]
    assert "1 unreachable by a torch call" in text and "1 reached by other tests only" in text
    assert "1 NOT YET REACHED" in text and "1 not listed" in text
    assert "needs a case:  devicekit/torch/_dispatch.py  _where: 311->312" in text
    assert re.findall(r"stale entry.*", text) == [
        "stale entry (matches no untaken branch): devicekit/torch/_lower_ops.py  gone: 1->2"
    ]
    assert "graphs.py" not in text.split("check against")[1]  # only lowering files are checked
    summary = json.loads((out / "bridge-summary.json").read_text())
    assert summary["unlisted"] == 1 and summary["needs_case"] == 1 and summary["stale"] == 1
    assert summary["unreachable"] == 1 and summary["other-tests"] == 1


def test_check_passes_when_every_branch_is_listed(tmp_path, capsys):
    toml = TOML.replace('arcs = ["177->179"]', 'arcs = ["177->179", "180->181"]')
    status, _ = run(tmp_path, toml)
    text = capsys.readouterr().out
    assert status == 0, text
    assert "0 not listed" in text and "NOT LISTED" not in text


def test_entry_matches_exact_function_and_arcs():
    entry = {
        "file": "devicekit/torch/_lower_views.py",
        "function": "copy",
        "arcs": [(228, 229)],
        "status": "unreachable",
        "reason": "r",
    }
    rows = [
        {"file": "devicekit/torch/_lower_views.py", "function": f, "arc": a}
        for f, a in (("copy", (228, 229)), ("copy", (228, 230)), ("copy_", (228, 229)))
    ]
    unlisted, needs, excused, stale = bc.check(rows, [entry])
    assert [(r["function"], r["arc"]) for r in unlisted] == [("copy", (228, 230)), ("copy_", (228, 229))]
    assert len(excused) == 1 and not needs and not stale


def test_a_bad_status_is_refused(tmp_path):
    (tmp_path / "bad.toml").write_text(
        '[[exclude]]\nfile = "devicekit/torch/_table.py"\nreason = "x"\nstatus = "fine"\n'
    )
    try:
        bc.load_exclusions(tmp_path / "bad.toml")
    except SystemExit as e:
        assert "status must be one of" in str(e)
    else:
        raise AssertionError("a bad status was accepted")


def test_the_bridge_exclusions_name_real_branches():
    """Every entry of the reviewed list: a lowering file that exists, a function
    defined in it, each arc's source line a line of that function's file that
    branches (if / elif / for / while / a conditional expression)."""
    entries = bc.load_exclusions(REPO / "ci" / "bridge_coverage_exclusions.toml")
    assert entries
    for e in entries:
        src = REPO / "sdk" / e["file"]
        assert src.exists() and any(m in e["file"] for m in bc.LOWERING), e
        text = src.read_text()
        lines = text.splitlines()
        if "function" in e:
            last = e["function"].split(".")[-1]
            assert re.search(rf"^\s*(def|class) {re.escape(last)}\b", text, re.M), e
        for a, _ in e.get("arcs", ()):
            line = lines[a - 1]
            assert re.search(r"\b(if|elif|for|while|and|or)\b", line), (e, a, line)
        assert len(e["reason"]) > 20, e


def test_no_lowering_branch_waits_for_a_case():
    """Every untaken lowering branch of the torch section is reached, or listed
    with the reason no case takes it: none is left as needs-case (work not yet
    done), so a new one fails here, not only in the CI check's count."""
    entries = bc.load_exclusions(REPO / "ci" / "bridge_coverage_exclusions.toml")
    assert [e for e in entries if e["status"] == "needs-case"] == []
