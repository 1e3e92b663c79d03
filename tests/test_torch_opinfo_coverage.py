"""OpInfo coverage per release (``python -m devicekit.torch.opinfo_coverage``,
its table in ``docs/torch_opinfo.md``): the committed table is for the
installed torch, its counts add up, and a recomputation of a few entries on
cpu:0 gives the verdicts the table lists for them (one that runs, one that
is not implemented with its unlowered op). Needs torch (skipped otherwise).
"""

import re

import pytest

from conftest import REPO_ROOT

torch = pytest.importorskip("torch", reason="devicekit.torch needs torch: pip install "
                                            "'devicekit[torch]'")

from devicekit.torch import opinfo_coverage as oc  # noqa: E402

DOC = REPO_ROOT / "docs" / "torch_opinfo.md"


def _listed(text, heading):
    """{entry: row cells} of one of the doc's entry tables."""
    part = text.split(heading, 1)[1].split("\n## ", 1)[0]
    return {m.group(1): line for line in part.splitlines()
            if (m := re.match(r"\| `([^`]+)` \|", line))}


def test_the_committed_table_is_this_torchs_and_adds_up():
    text = DOC.read_text()
    assert f"torch {torch.__version__}," in text, "docs/torch_opinfo.md is for another torch: " \
        "regenerate it (python -m devicekit.torch.opinfo_coverage --markdown docs/torch_opinfo.md)"
    table = oc.parse_markdown(text)
    assert set(table) == set(oc.DTYPES), table
    for dt, c in table.items():
        assert c["entries"] == c[oc.RUNS] + c[oc.WRONG] + c[oc.MISSING] + c[oc.NO_SAMPLE], (dt, c)
        assert c["with_sample"] == c[oc.RUNS] + c[oc.WRONG] + c[oc.MISSING], (dt, c)
        assert c[oc.RUNS] > 0.5 * c["with_sample"], (dt, c)  # (a broken run gives ~0)
    missing = _listed(text, "## Entries not implemented")
    assert len(missing) >= max(c[oc.MISSING] for c in table.values())


def test_a_recomputation_of_a_few_entries_matches_the_table():
    text = DOC.read_text()
    missing, wrong = _listed(text, "## Entries not implemented"), _listed(text, "## Entries that run")
    runs = ["add", "nn.functional.conv3d"]
    gap = "linalg.svd"
    assert gap in missing and "`aten._linalg_svd.default`" in missing[gap]
    assert not any(r in missing or r in wrong for r in runs)
    got = oc.measure("cpu:0", ("float32",), samples=2, only=set(runs + [gap]))["entries"]
    assert {n: got[n]["float32"][0] for n in runs + [gap]} == {
        "add": oc.RUNS, "nn.functional.conv3d": oc.RUNS, gap: oc.MISSING}, got
    assert "aten._linalg_svd.default" in got[gap]["float32"][1]
