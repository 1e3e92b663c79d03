"""The conformance section "collectives" (conformance_tests/collectives.py):
its cases on the reference CPU plugin with real rank processes (a collective's
whole matrix, stream ordering, a rank SIGKILLed mid-call, the argument rules),
a rank that raises is a failure naming the rank, and a plugin without the
collectives part gets one "not implemented" case, never a pass.

Needs: the reference CPU plugin with its collectives part (skipped, with the
reason, where it reports the part absent); a C compiler for the plugin
without the part (tests/plugins/ext_chain.c).
"""

from __future__ import annotations

import pytest

import devicekit
from conftest import DEVICE_API_INCLUDE, REPO_ROOT, _find_c_compiler, compile_test_plugin
from devicekit.conformance import registry
from devicekit.conformance.case import Context, Target, run_case

ONLY = {"collectives"}


@pytest.fixture(scope="module")
def cpu_target():
    dev = devicekit.device("cpu:0")
    if "collectives" not in dev.plugin.parts:
        pytest.skip("the CPU plugin reports no collectives part")
    return Target.of(dev, level="core")


@pytest.fixture(scope="module")
def cpu_cases(cpu_target):
    cases, unavailable = registry.build(cpu_target, ONLY)
    assert not unavailable, unavailable
    return {c.id: c for c in cases}


def test_the_section_builds_every_collective_for_2_3_and_4_ranks(cpu_target, cpu_cases):
    for g in ("all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter", "all_to_all",
              "send_recv"):
        for n in (2, 3, 4):
            assert f"collectives/{g}/{n}ranks" in cpu_cases
    for k in ("skipped_rank", "count_mismatch", "killed_rank"):
        assert f"collectives/never_hang/{k}/3ranks" in cpu_cases
    assert sum(i.startswith("collectives/invalid_argument/") for i in cpu_cases) >= 10
    floor = registry.expected_floor(cpu_target, ONLY)[2]
    assert floor["collectives"] == len(cpu_cases)


@pytest.mark.parametrize("case_id", [
    "collectives/all_reduce/3ranks",  # every dtype x op x in place / out of place x counts
    "collectives/stream_order/2ranks",
    "collectives/never_hang/killed_rank/3ranks",
])
def test_a_case_passes_on_cpu(cpu_target, cpu_cases, case_id):
    res = run_case(cpu_cases[case_id], cpu_target)
    assert res["outcome"] == "pass", res
    if "/never_hang/" not in case_id and case_id.split("/")[1] != "stream_order":
        # every dtype the CPU plugin stores, every op: none reported not implemented
        assert res["details"]["combinations"] >= 9 * 5 * 2, res["details"]
        assert not res["details"].get("not_implemented"), res["details"]


def test_the_argument_rules_pass_on_cpu(cpu_target, cpu_cases):
    ids = [i for i in cpu_cases if i.startswith("collectives/invalid_argument/")]
    results = {i: run_case(cpu_cases[i], cpu_target) for i in ids}
    ids.append("collectives/one_rank/dtypes_and_ops")
    results = {i: run_case(cpu_cases[i], cpu_target) for i in ids}
    assert results["collectives/one_rank/dtypes_and_ops"]["details"]["outside_the_part"] == []
    bad = {i: r["message"] for i, r in results.items() if r["outcome"] != "pass"}
    assert not bad, bad


def test_a_rank_that_raises_fails_the_case_naming_the_rank(cpu_target):
    from devicekit.conformance_tests import collectives

    ctx = Context(cpu_target, seed=1)
    with pytest.raises(AssertionError, match=r"rank [01] raised ValueError: unknown collective "
                                             r"group 'no_such_group'"):
        collectives.judge(ctx, "no_such_group",
                          collectives.spawn(ctx, "no_such_group", 2, timeout=2.0))


@pytest.fixture(scope="module")
def plugin_without_part(tmp_path_factory):
    compiler = _find_c_compiler()
    if compiler is None:
        pytest.skip("no C compiler on PATH: tests/plugins/ext_chain.c cannot be built")
    out = tmp_path_factory.mktemp("no_part")
    return compile_test_plugin(compiler, REPO_ROOT / "tests" / "plugins" / "ext_chain.c",
                               DEVICE_API_INCLUDE, out / "ext_no_part.so",
                               flags=("-DEXT_VARIANT=5", '-DBP_PLUGIN_NAME="ext_no_part"'))


def test_a_plugin_without_the_part_is_not_implemented_never_a_pass(plugin_without_part):
    dev = devicekit.load_plugin(plugin_without_part).devices[0]
    assert list(dev.plugin.parts) == []
    target = Target.of(dev, level="core", plugin=plugin_without_part)
    cases, unavailable = registry.build(target, ONLY)
    assert not unavailable
    assert [c.id for c in cases] == ["collectives/part"]
    res = run_case(cases[0], target)
    assert res["outcome"] == "not-implemented"
    assert "not implemented: the plugin has no collectives part" in res["message"]
    assert not cases[0].required  # an optional part: its absence does not fail the run


def test_the_release_policy_requires_the_section_of_a_declared_part():
    from devicekit.gate import check, policy

    pol = policy.load(str(REPO_ROOT / "ci" / "policy.toml"))
    assert pol.part_sections == ["collectives", "graphs"]

    def refusals(parts, cases, unavailable=None):
        record = {"plugin": {"declared": {"parts": parts}},
                  "conformance": {"cases": cases, "unavailable_sections": unavailable or {}}}
        v = check.Verdict("new", "base", "policy", {}, {}, {})
        check._part_sections(record, pol, v)
        return [(r.rule, r.subject, r.new) for r in v.refusals]

    passing = [{"id": "collectives/all_reduce/2ranks", "section": "collectives", "outcome": "pass"}]
    assert refusals(["collectives"], passing) == []
    assert refusals(["collectives"], []) == [("conformance.required", "collectives/part",
                                               "missing")]
    assert refusals(["collectives"], [], {"collectives": "no devicekit.distributed"})
    assert refusals([], []) == []  # a plugin without the part: nothing required


def test_the_report_and_the_record_carry_the_plugin_parts(cpu_target):
    from devicekit.conformance.target import describe

    from devicekit.gate import record

    meta = describe(cpu_target)
    assert meta["plugin"]["parts"] == ["collectives", "graphs"]
    section = record.plugin_section({"plugin": meta["plugin"], "device": meta["device"]},
                                    meta["kernels"], [], None)
    assert section["declared"]["parts"] == ["collectives", "graphs"]
