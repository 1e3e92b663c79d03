"""Promise 1, checked on every run: within major 1 the device API only appends.

Compares the current header's binary layout (measured by the C compiler) with
every frozen snapshot in abi/ (one per released minor): each field keeps its
offset and size, every new field sits past the old struct's end, every
enumerator keeps its value. Also checks that the generated parts of the header
match spec/base_ops.json. Needs no device; needs `cc`.
"""

import glob
import json
import os
import shutil
import subprocess
import sys

import pytest

import abi_layout

pytestmark = pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None,
                                reason="needs a C compiler (cc) to measure the header layout")

HERE = os.path.dirname(os.path.abspath(__file__))
SNAPSHOTS = sorted(glob.glob(os.path.join(HERE, "abi", "device_api_*_layout.json")))


@pytest.fixture(scope="module")
def current_layout():
    return abi_layout.measure()


@pytest.fixture(params=SNAPSHOTS, ids=os.path.basename)
def layouts(request, current_layout):
    return json.load(open(request.param)), current_layout


def test_snapshots_exist():
    names = [os.path.basename(p) for p in SNAPSHOTS]
    assert "device_api_1_0_layout.json" in names, names


def test_generated_header_and_docs_match_the_spec():
    gen = os.path.join(os.path.dirname(HERE), "device_api", "tools", "gen_ops.py")
    r = subprocess.run([sys.executable, gen, "--check"], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_every_1_0_field_keeps_offset_and_size(layouts):
    frozen, now = layouts
    problems = []
    for struct, info in frozen["structs"].items():
        if struct not in now["structs"]:
            problems.append(f"{struct} was removed")
            continue
        for field, where in info["fields"].items():
            got = now["structs"][struct]["fields"].get(field)
            if got != where:
                problems.append(f"{struct}.{field}: 1.0 has [offset, size] {where}, now {got}")
    assert not problems, "device API 1.x must only append:\n" + "\n".join(problems)


def test_new_fields_are_appended_after_the_1_0_end(layouts):
    frozen, now = layouts
    problems = []
    for struct, info in frozen["structs"].items():
        end = max(off + size for off, size in info["fields"].values())
        for field, (off, _) in now["structs"].get(struct, {"fields": {}})["fields"].items():
            if field not in info["fields"] and off < end:
                problems.append(f"{struct}.{field} at offset {off} lies inside the 1.0 layout "
                                f"(which ends at {end})")
    assert not problems, "\n".join(problems)


def test_enumerators_keep_their_values(layouts):
    frozen, now = layouts
    changed = [f"{e}.{k}: {v} -> {now['enums'].get(e, {}).get(k)}"
               for e, values in frozen["enums"].items() for k, v in values.items()
               if now["enums"].get(e, {}).get(k) != v and not k.startswith("DK_OP_COUNT")]
    assert not changed, "\n".join(changed)


def test_snapshot_is_not_empty(layouts):
    # A parser regression that finds no structs would make the checks above vacuous.
    frozen, now = layouts
    assert len(frozen["structs"]) >= 30 and len(frozen["structs"]["DK_Api"]["fields"]) > 20
    assert len(now["structs"]) >= len(frozen["structs"])
