"""device_api/spec/base_ops.json is the only source of op facts.

A minor bump that adds an op is "edit the spec (the op and the version's
entry), run the generator, add the CHANGELOG line" (device_api.h,
"Versioning"): these tests run the real generator on a copy of device_api/
with a fake op appended in the next minor (1.<NEXT>, one past the real
spec's newest) and check that every generated fact
follows with no hand edit (the version itself and its DK_Api size included),
and that the spec's differentiable flags agree with the gradient rules.
Needs no device; the compile checks need `cc` (and `c++`).
"""

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from devicekit import scaffold

ROOT = Path(__file__).resolve().parent.parent
CC = shutil.which("cc") or shutil.which("gcc")
CXX = shutil.which("c++") or shutil.which("g++")
_REAL = json.loads((ROOT / "device_api/spec/base_ops.json").read_text())
LATEST = len(_REAL["versions"]) - 1  # the real spec's newest minor
NEXT = LATEST + 1                    # the fake bump's
NOPS = len(_REAL["ops"])             # the fake op's DK_OpId
LAST_OPS_MINOR = max(int(o["since"].split(".")[1]) for o in _REAL["ops"])
LAST_FUSED_MINOR = max(int(o["since"].split(".")[1]) for o in _REAL["fused_ops"])

FAKE_OP = {
    "name": "fake_op", "since": f"1.{NEXT}", "kind": "unary", "inputs": ["x"], "outputs": ["out"],
    "attrs": None, "dtypes": ["float32", "float64"], "required_dtypes": ["float32"],
    "output_dtype": "same", "out_shape": "same", "differentiable": True,
    "semantics": "out = x; an op that exists only in this test.", "error_bound": {"kind": "exact"},
}
FAKE_VERSION = {"version": f"1.{NEXT}", "api_struct_ends_at": "fused_kernels", "first_devicekit": "9.9",
                "note": "a version that exists only in this test"}


def _gen(root: Path, *args):
    return subprocess.run([sys.executable, str(root / "device_api/tools/gen_ops.py"), *args],
                          capture_output=True, text=True)


@pytest.fixture(scope="module")
def bumped(tmp_path_factory):
    """A copy of device_api/ whose spec gained FAKE_OP and FAKE_VERSION (1.NEXT),
    regenerated. Returns (root, spec, output of --check between the spec edit
    and the run, output of the run refused while 1.NEXT had no versions entry)."""
    root = tmp_path_factory.mktemp("bump")
    shutil.copytree(ROOT / "device_api", root / "device_api")
    first = _gen(root)  # the copy's generated files (docs, SDK tables) from the real spec
    assert first.returncode == 0, first.stdout + first.stderr
    spec_path = root / "device_api/spec/base_ops.json"
    spec = json.loads(spec_path.read_text())
    spec["ops"].append(FAKE_OP)
    spec_path.write_text(json.dumps(spec, indent=1) + "\n")
    refused = _gen(root)  # an op of a minor the versions list lacks
    spec["versions"].append(FAKE_VERSION)
    spec_path.write_text(json.dumps(spec, indent=1) + "\n")
    stale = _gen(root, "--check")
    run = _gen(root)
    assert run.returncode == 0, run.stdout + run.stderr
    return root, spec, stale, refused


def test_generator_refuses_an_op_of_a_minor_without_a_version_entry(bumped):
    refused = bumped[3]
    assert refused.returncode != 0
    assert f"fake_op is since 1.{NEXT}, which has no entry in versions" in refused.stderr, \
        refused.stderr


def test_check_names_every_file_a_new_op_makes_stale(bumped):
    root, _, stale, _ = bumped
    assert stale.returncode == 1
    for path in ("device_api/include/devicekit/device_api_ops.h", "docs/base_ops.md",
                 "device_api/include/devicekit/device_api.h", "sdk/csrc/api_size_by_minor.inc",
                 "sdk/csrc/base_ops_table.inc", "sdk/csrc/op_counts_by_minor.inc",
                 "sdk/devicekit/_op_facts.py",
                 "device_api/include/devicekit/plugin_helpers_ops.h"):
        assert path in stale.stdout, stale.stdout
    after = _gen(root, "--check")
    assert after.returncode == 0 and "up to date" in after.stdout, after.stdout


def test_header_latest_aliases_follow_the_spec(bumped):
    root, _, _, _ = bumped
    ops_h = (root / "device_api/include/devicekit/device_api_ops.h").read_text()
    assert f"  DK_OP_FAKE_OP = {NOPS},\n" in ops_h
    assert f"DK_OP_COUNT_1_{NEXT} = {NOPS + 1} /* number of ops in device API 1.{NEXT} */" in ops_h
    assert f"#define DK_OP_COUNT DK_OP_COUNT_1_{NEXT}\n" in ops_h
    assert f"#define DK_OPS_API_MINOR {NEXT}\n" in ops_h
    assert ("#define DK_OP_DTYPES_FAKE_OP (DK_DTYPE_BIT(DK_DTYPE_FLOAT32) | "
            "DK_DTYPE_BIT(DK_DTYPE_FLOAT64))") in ops_h
    # No new fused op: the fused count stays the one of the minor that last added some.
    assert f"#define DK_FUSED_OP_COUNT DK_FUSED_OP_COUNT_1_{LAST_FUSED_MINOR}\n" in ops_h
    counts = (root / "sdk/csrc/op_counts_by_minor.inc").read_text()
    assert counts.endswith(
        f"{{DK_OP_COUNT_1_{LAST_OPS_MINOR}, DK_FUSED_OP_COUNT_1_{LAST_FUSED_MINOR}}},  // 1.{LATEST}\n"
        f"{{DK_OP_COUNT_1_{NEXT}, DK_FUSED_OP_COUNT_1_{LAST_FUSED_MINOR}}},  // 1.{NEXT}\n")
    assert '{DK_OP_FAKE_OP, "fake_op", 1, DK_OP_DTYPES_FAKE_OP, OutDType::Same},' in (
        root / "sdk/csrc/base_ops_table.inc").read_text()
    api_h = (root / "device_api/include/devicekit/device_api.h").read_text()
    assert f"\n#define DK_API_MINOR {NEXT}\n" in api_h
    assert f"#define DK_API_MINOR {LATEST}\n" not in api_h
    assert (f"#define DK_Api_STRUCT_SIZE_1_{NEXT} DK_STRUCT_SIZE(DK_Api, fused_kernels)\n"
            in ops_h)
    assert f"#define DK_Api_STRUCT_SIZE_LATEST DK_Api_STRUCT_SIZE_1_{NEXT}\n" in ops_h
    # and dkh_check_call knows its call signature (plugin_helpers_ops.h)
    helpers = (root / "device_api/include/devicekit/plugin_helpers_ops.h").read_text()
    assert ('{"fake_op", 1, 1, DKH_SHAPE_SAME, DKH_OUT_SAME, {-1, -1, -1}, 0, -1, -1, {-1, -1}},'
            in helpers)


def test_generator_refuses_an_op_without_a_call_signature_it_can_check():
    sys.path.insert(0, str(ROOT / "device_api" / "tools"))
    try:
        import gen_helpers
    finally:
        sys.path.pop(0)
    for bad in ({"out_shape": None}, {"out_shape": "diagonal"}, {"input_dtypes": {"y": "int64"}},
                {"inputs": [], "out_shape": "same"}):
        spec = json.loads(json.dumps(_REAL))
        spec["ops"].append({**FAKE_OP, **bad})
        with pytest.raises(SystemExit, match="fake_op"):
            gen_helpers.check_signatures(spec)


@pytest.mark.skipif(CC is None, reason="needs a C compiler (cc)")
def test_bumped_header_compiles_as_the_new_version(bumped, tmp_path):
    # No hand edit: the generator set the version and the new minor's DK_Api size.
    root = bumped[0]
    include = root / "device_api/include"
    probe = tmp_path / "probe.c"
    probe.write_text("#include <devicekit/device_api.h>\n"
                     f"_Static_assert(DK_OP_COUNT == {NOPS + 1} && DK_OP_FAKE_OP == {NOPS}, "
                     "\"count\");\n"
                     f"_Static_assert(DK_API_MAJOR == 1 && DK_API_MINOR == {NEXT}, \"version\");\n"
                     f"_Static_assert(DK_Api_STRUCT_SIZE_1_{NEXT} == DK_Api_STRUCT_SIZE_1_{LATEST}, "
                     "\"size\");\n"
                     f"_Static_assert(DK_Api_STRUCT_SIZE_1_{LATEST} == DK_Api_STRUCT_SIZE, "
                     "\"latest\");\n"
                     "int main(void) { return 0; }\n")
    r = subprocess.run([CC, "-std=c11", "-fsyntax-only", f"-I{include}", str(probe)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


@pytest.mark.skipif(CXX is None, reason="needs a C++ compiler (c++)")
def test_bumped_loader_size_table_has_the_new_row(bumped, tmp_path):
    # plugin.cpp's kApiSizeByMinor, built from the regenerated .inc as the SDK
    # builds it, has a row per minor 1.0 .. 1.NEXT (its static_assert included).
    root = bumped[0]
    probe = tmp_path / "sizes.cpp"
    probe.write_text("#include <devicekit/device_api.h>\n"
                     "constexpr size_t kApiSizeByMinor[] = {\n"
                     "#include \"api_size_by_minor.inc\"\n"
                     "};\n"
                     "constexpr int kKnownMinors =\n"
                     "    sizeof(kApiSizeByMinor) / sizeof(kApiSizeByMinor[0]);\n"
                     f"static_assert(kKnownMinors == {NEXT + 1}, \"rows\");\n"
                     "static_assert(kKnownMinors == DK_API_MINOR + 1, \"rows\");\n"
                     f"static_assert(kApiSizeByMinor[{NEXT}] == DK_Api_STRUCT_SIZE_1_{NEXT}, "
                     "\"next\");\n"
                     "static_assert(kApiSizeByMinor[0] == DK_Api_STRUCT_SIZE_1_0, \"1.0\");\n"
                     "int main() { return 0; }\n")
    r = subprocess.run([CXX, "-std=c++17", "-fsyntax-only", f"-I{root / 'device_api/include'}",
                        f"-I{root / 'sdk/csrc'}", str(probe)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_python_facts_follow_the_spec(bumped):
    root = bumped[0]
    spec = importlib.util.spec_from_file_location("bumped_facts", root / "sdk/devicekit/_op_facts.py")
    facts = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(facts)
    assert facts.OPS[-1] == "fake_op" and len(facts.OPS) == NOPS + 1
    assert facts.NUM_INPUTS["fake_op"] == 1 and facts.KIND["fake_op"] == "unary"
    assert "fake_op" in facts.DIFFERENTIABLE and facts.SINCE["fake_op"] == f"1.{NEXT}"
    assert facts.LATEST_MINOR == NEXT
    assert facts.FIRST_DEVICEKIT[(1, NEXT)] == (9, 9)
    assert facts.FIRST_DEVICEKIT[(1, 2)] == (0, 1) and len(facts.FIRST_DEVICEKIT) == NEXT + 1


def test_scaffold_op_list_follows_the_spec(bumped):
    spec = bumped[1]
    ops = scaffold.base_ops(1, NEXT, spec)
    assert ops[-1] == {"name": "fake_op", "since": f"1.{NEXT}", "id": "FAKE_OP", "value": NOPS,
                       "signature": "fake_op(x) -> out; no attrs"}
    assert scaffold.op_count_macro(1, NEXT, spec) == f"DK_OP_COUNT_1_{NEXT}"
    # Older targets keep exactly their own ops.
    assert scaffold.base_ops(1, LATEST, spec) == scaffold.base_ops(1, LATEST)
    assert scaffold.base_ops(1, 2, spec) == scaffold.base_ops(1, 2)
    assert scaffold.op_count_macro(1, 2, spec) == "DK_OP_COUNT_1_1"


def test_scaffold_reads_the_spec_conformance_reads():
    from devicekit.conformance import registry

    assert scaffold.load_spec() == registry.spec()
    assert [op["name"] for op in scaffold.base_ops(1, 1)] == [o["name"] for o in registry.spec()["ops"]]
    assert scaffold.op_count_macro(1, 0) == "DK_OP_COUNT_1_0"


def test_differentiable_ops_are_the_ones_with_gradient_rules():
    from devicekit import _grad_rules, _op_facts

    # copy is tracked under its view names (contiguous, expand, ...), not as "copy".
    with_rules = {name for name in _op_facts.OPS if name in _grad_rules.RULES} | {"copy"}
    assert set(_op_facts.DIFFERENTIABLE) == with_rules


def test_elementwise_ops_take_arity_and_tracking_from_the_spec():
    import devicekit as dk
    from devicekit import _op_facts, ops

    x = dk.tensor([1.0, 2.0], requires_grad=True)
    for name in ("neg", "exp", "floor", "sign", "sub", "pow", "maximum", "eq", "lt"):
        out = getattr(ops, name)(*(x,) * _op_facts.NUM_INPUTS[name])
        assert out.requires_grad == (name in _op_facts.DIFFERENTIABLE), name


def test_fused_attrs_are_read_by_the_names_the_spec_gives():
    # fused_py.cpp marshals each fused op's attribute dict field by field as
    # the spec lists the struct (fused_attrs.inc); fields the SDK sets itself
    # (marshal "sdk": the SDPA mask kind) are never asked for.
    import devicekit as dk
    from devicekit import _core

    x = dk.tensor([[1.0, 2.0]])
    spec = scaffold.load_spec()
    for op in spec["fused_ops"]:
        fields = [f["name"] for f in spec["attr_structs"][op["attrs"]]["fields"]
                  if f.get("marshal") != "sdk"]
        for i, missing in enumerate(fields):
            given = {name: 1 for name in fields[:i]}
            with pytest.raises(dk.DeviceKitError,
                               match=f"composite op '{op['name']}': attrs has no '{missing}'"):
                _core.try_fused(op["name"], [x] * len(op["inputs"]), given)
