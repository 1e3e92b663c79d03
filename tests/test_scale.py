"""Scale (docs/scale.md): ``--shard K/N``, ``devicekit report merge`` and the
Ray runner, against the reference CPU plugin.

The merged reports of shards must equal the single run's report, field for
field, except the run-specific fields ``devicekit.scale.merge.RUN_SPECIFIC``
names (durations, start time, jobs, shard provenance, total_memory): for
conformance unfiltered at level core (the corpus floor is judged again over
the merged rows) and filtered by --op, and for a two-model subset of the
models. Merge refuses inputs that cannot make one run, each with its exit
code and no output. The Ray test starts a real local cluster of two nodes
(ray.cluster_utils.Cluster), each offering one unit of ``devicekit_cpu``.

Needs: the reference CPU plugin (cpu:0); ray (in the ``test`` extra).
About 60 s on the shared 2-core development machine (the Ray test 15-19 s).
"""

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from conftest import children_cpu_seconds
from conftest import HUNG_S

from devicekit.scale import merge, shard

OPS = ["--op", "add", "--op", "exp"]


def dk(*args, timeout=HUNG_S):
    return subprocess.run([sys.executable, "-m", "devicekit", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def _run(suite, out, *args):
    proc = dk(suite, "--device", "cpu:0", "--report", out, *args)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    with open(os.path.join(out, "report.json")) as f:
        return json.load(f)


def _junit_cases(folder):
    root = ET.parse(os.path.join(folder, "junit.xml")).getroot()
    return [(tc.get("classname"), tc.get("name"), [c.tag for c in tc])
            for tc in root.iter("testcase")]


def _assert_same(single_dir, merged_dir):
    with open(os.path.join(single_dir, "report.json")) as f:
        single = json.load(f)
    with open(os.path.join(merged_dir, "report.json")) as f:
        merged = json.load(f)
    a, b = merge.comparable(single), merge.comparable(merged)
    assert merged["run"]["run_id"] != single["run"]["run_id"]  # a set of its own
    assert all(s["run_id"] for s in merged["run"]["shards"])
    diff = [k for k in set(a) | set(b) if a.get(k) != b.get(k)]
    assert not diff, {k: (str(a.get(k))[:300], str(b.get(k))[:300]) for k in diff}
    assert [c["id"] for c in merged["cases"]] == [c["id"] for c in single["cases"]]
    assert _junit_cases(single_dir) == _junit_cases(merged_dir)
    assert os.path.getsize(os.path.join(merged_dir, "report.html")) > 1000
    return single, merged


@pytest.fixture(scope="module")
def op_shards(tmp_path_factory):
    """A --op run, whole and as 3 shards (seconds)."""
    tmp = tmp_path_factory.mktemp("ops")
    _run("conformance", tmp / "single", *OPS, "--jobs", "2")
    for k in (1, 2, 3):
        _run("conformance", tmp / f"s{k}", *OPS, "--jobs", "1", "--shard", f"{k}/3")
    return tmp


def test_shard_argument():
    assert shard.parse("1/4") == (1, 4) and shard.parse(" 4 / 4 ") == (4, 4)
    for bad, why in (("0/4", "between 1 and N=4"), ("5/4", "between 1 and N=4"),
                     ("1/0", "at least 1"), ("1", "expected K/N"), ("a/b", "expected K/N")):
        with pytest.raises(shard.ShardError, match=why):
            shard.parse(bad)
    units = [f"c{i}" for i in range(10)]
    parts = [shard.pick(units, k, 3) for k in (1, 2, 3)]
    assert parts == [["c0", "c3", "c6", "c9"], ["c1", "c4", "c7"], ["c2", "c5", "c8"]]


def test_shard_cli_errors_and_partition(tmp_path):
    proc = dk("conformance", "--device", "cpu:0", "--shard", "0/2")
    assert proc.returncode == 2 and "K must be between 1 and N=2" in proc.stderr
    proc = dk("conformance", "--device", "cpu:0", "--op", "add", "--shard", "1/100000")
    assert proc.returncode == 2 and "use at most" in proc.stderr
    proc = dk("conformance", "--device", "cpu:0", "--shard", "1/2", "-x")
    assert proc.returncode == 2 and "exclude each other" in proc.stderr
    proc = dk("models", "--device", "cpu:0", "--model", "mlp", "--shard", "1/2")
    assert proc.returncode == 2 and "only 1 model" in proc.stderr
    # the shards of a listing are disjoint, cover it, and are the same in every process
    whole = dk("conformance", "--device", "cpu:0", *OPS, "--list").stdout.split()
    parts = [dk("conformance", "--device", "cpu:0", *OPS, "--list", "--shard", f"{k}/3")
             .stdout.split() for k in (1, 2, 3)]
    assert sorted(sum(parts, [])) == sorted(whole) and len(set(sum(parts, []))) == len(whole)
    assert parts[1] == whole[1::3]


def test_conformance_shards_merge_into_the_single_run(tmp_path, cpu_core_conformance_run):
    """Unfiltered (level core): the merged corpus check is the single run's
    (the session's core run of cpu:0, tests/conftest.py)."""
    proc, _, single = cpu_core_conformance_run
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    # the two shards at once, one worker each: as two machines would run them
    shards = [subprocess.Popen([sys.executable, "-m", "devicekit", "conformance", "--device",
                                "cpu:0", "--report", str(tmp_path / f"s{k}"), "--level", "core",
                                "--jobs", "1", "--shard", f"{k}/2"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               stdin=subprocess.DEVNULL) for k in (1, 2)]
    try:
        outs = [p.communicate(timeout=HUNG_S)[0] for p in shards]
    finally:
        for p in shards:
            if p.poll() is None:
                p.kill()
                p.wait()
    for k, (p, out) in enumerate(zip(shards, outs), 1):
        assert p.returncode == 0, out[-3000:]
        with open(tmp_path / f"s{k}" / "report.json") as f:
            rep = json.load(f)
        assert rep["run"]["shard"]["index"] == k and not rep["corpus"]["checked"]
    proc = dk("report", "merge", tmp_path / "s2", tmp_path / "s1" / "report.json",
              "--out", tmp_path / "merged")
    assert proc.returncode == 0, proc.stderr
    single, merged = _assert_same(single, tmp_path / "merged")
    assert merged["corpus"]["checked"] and merged["corpus"]["ok"] and not merged["run"]["partial"]
    assert [s["index"] for s in merged["run"]["shards"]] == [1, 2]


def test_filtered_conformance_shards_merge(op_shards):
    proc = dk("report", "merge", *(op_shards / f"s{k}" for k in (3, 1, 2)),
              "--out", op_shards / "merged")
    assert proc.returncode == 0, proc.stderr
    _, merged = _assert_same(op_shards / "single", op_shards / "merged")
    assert merged["run"]["partial"] and "partial run (filter" in merged["corpus"]["reason"]


def test_model_shards_merge_into_the_single_run(tmp_path):
    args = ["--model", "mlp,encoder", "--dtype", "float32"]
    _run("models", tmp_path / "single", *args, "--jobs", "2")
    for k in (1, 2):
        rep = _run("models", tmp_path / f"s{k}", *args, "--jobs", "1", "--shard", f"{k}/2")
        assert rep["run"]["models"] == [["mlp", "encoder"][k - 1]]
    proc = dk("report", "merge", tmp_path / "s1", tmp_path / "s2", "--out", tmp_path / "merged")
    assert proc.returncode == 0, proc.stderr
    _, merged = _assert_same(tmp_path / "single", tmp_path / "merged")
    assert merged["suite"] == "models" and list(merged["models"]) == ["mlp", "encoder"]


def _edited(src, dst, edit):
    with open(os.path.join(src, "report.json")) as f:
        rep = json.load(f)
    edit(rep)
    with open(dst, "w") as f:
        json.dump(rep, f)
    return dst


@pytest.mark.parametrize("case", ["plugin", "version", "overlap", "missing", "truncated",
                                  "not_a_shard", "other_split", "absent", "unwritable"])
def test_merge_refuses_what_is_not_one_run(op_shards, tmp_path, case):
    s = [op_shards / f"s{k}" for k in (1, 2, 3)]
    want = {"plugin": (5, "sha256"), "version": (6, "DeviceKit 9.9.9"),
            "overlap": (7, "shard 2/3 is given twice"), "missing": (7, "missing shard 3/3"),
            "truncated": (4, "truncated"), "not_a_shard": (4, "not a shard report"),
            "other_split": (7, "one run uses one N"), "absent": (3, "not found"),
            "unwritable": (3, "--out")}[case]
    if case == "plugin":
        s[1] = _edited(s[1], tmp_path / "p.json",
                       lambda r: r["plugin"].update(sha256="0" * 64))
    elif case == "version":
        s[2] = _edited(s[2], tmp_path / "v.json", lambda r: r.update(devicekit_version="9.9.9"))
    elif case == "overlap":
        s[2] = s[1]
    elif case == "missing":
        s = s[:2]
    elif case == "truncated":
        text = (s[2] / "report.json").read_text()
        (tmp_path / "t.json").write_text(text[:len(text) // 2])
        s[2] = tmp_path / "t.json"
    elif case == "not_a_shard":
        s[0] = op_shards / "single"
    elif case == "other_split":
        s[0] = _edited(s[0], tmp_path / "o.json", lambda r: r["run"]["shard"].update(count=4))
    elif case == "absent":
        s[0] = tmp_path / "nothing.json"
    out = tmp_path / "out"
    if case == "unwritable":  # --out below a file
        (tmp_path / "file").write_text("x")
        out = tmp_path / "file" / "out"
    proc = dk("report", "merge", *s, "--out", out)
    code, words = want
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == code and len(lines) == 1 and words in lines[0], proc.stderr
    assert lines[0].startswith("devicekit report merge: error: ")
    assert not out.exists()


def _edit_all(shards, tmp_path, edit):
    return [_edited(s, tmp_path / f"e{i}.json", edit) for i, s in enumerate(shards)]


def _dup_in_shard(rep):
    row = dict(rep["cases"][0], outcome="fail")
    rep["cases"].append(row)  # one case id twice: once pass, once fail


@pytest.mark.parametrize("case", ["dup_in_shard", "dup_across", "units_total_huge",
                                  "count_huge", "deep", "oversize", "bad_outcome",
                                  "missing_field", "wrong_type", "index_bool", "unwritable_first"])
def test_merge_refuses_untrusted_shards_quickly(op_shards, tmp_path, case):
    """Shard reports are untrusted: a duplicated case id (in one shard or in
    two) is refused naming it; numbers in the file size nothing (units_total
    10**12 is refused at once, not allocated); a 2 GiB file is refused from its
    size, unread; deep nesting, wrong types and unknown outcomes are one line
    and exit 4, never a traceback; an --out that cannot be written is exit 3
    before any shard is read."""
    s = [op_shards / f"s{k}" for k in (1, 2, 3)]
    first = json.loads((s[0] / "report.json").read_text())["cases"][0]["id"]
    out = tmp_path / "out"
    want = {"dup_in_shard": (4, f"case id {first} appears twice"),
            "dup_across": (7, f"case id {first} is also in"),
            "units_total_huge": (4, "expected 333333333334 of 1000000000000"),
            "count_huge": (4, "not 1 <= K <= N <= units"),
            "deep": (4, "nests deeper"), "oversize": (4, "larger than a shard report can be"),
            "bad_outcome": (4, "outcome 'passed' is not one of pass"),
            "missing_field": (4, "field 'section' is missing"),
            "wrong_type": (4, "field 'duration_s' is not a finite number"),
            "index_bool": (4, "run.shard.index"),
            "unwritable_first": (3, "--out")}[case]
    if case == "dup_in_shard":
        s[0] = _edited(s[0], tmp_path / "d.json", _dup_in_shard)
    elif case == "dup_across":
        s[1] = _edited(s[1], tmp_path / "d.json",
                       lambda r: r["cases"].append(dict(r["cases"][0], id=first)))
    elif case == "units_total_huge":
        s = _edit_all(s, tmp_path, lambda r: r["run"]["shard"].update(units_total=10 ** 12))
    elif case == "count_huge":
        s = _edit_all(s, tmp_path, lambda r: r["run"]["shard"].update(count=10 ** 12))
    elif case == "deep":
        (tmp_path / "deep.json").write_text('{"cases": ' + "[" * 100_000 + "]" * 100_000 + "}")
        s[0] = tmp_path / "deep.json"
    elif case == "oversize":
        with open(tmp_path / "big.json", "wb") as f:
            f.truncate(2 << 30)  # sparse: 2 GiB that take no disk
        s[0] = tmp_path / "big.json"
    elif case == "bad_outcome":
        s[0] = _edited(s[0], tmp_path / "b.json", lambda r: r["cases"][0].update(outcome="passed"))
    elif case == "missing_field":
        s[0] = _edited(s[0], tmp_path / "m.json", lambda r: r["cases"][1].pop("section"))
    elif case == "wrong_type":
        s[0] = _edited(s[0], tmp_path / "w.json",
                       lambda r: r["cases"][1].update(duration_s="fast"))
    elif case == "index_bool":
        s[0] = _edited(s[0], tmp_path / "i.json", lambda r: r["run"]["shard"].update(index=True))
    elif case == "unwritable_first":  # and a truncated shard: the --out check comes first
        text = (s[2] / "report.json").read_text()
        (tmp_path / "t.json").write_text(text[:len(text) // 2])
        s[2] = tmp_path / "t.json"
        (tmp_path / "file").write_text("x")
        out = tmp_path / "file" / "out"
    t0 = children_cpu_seconds()
    proc = dk("report", "merge", *s, "--out", out, timeout=HUNG_S)
    cost = children_cpu_seconds() - t0  # CPU, not wall time: load does not stretch it
    code, words = want
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == code and len(lines) == 1 and words in lines[0], proc.stderr[-3000:]
    assert lines[0].startswith("devicekit report merge: error: ")
    assert not out.exists() and cost < 60, cost


def test_shard_size_is_checked_before_reading(op_shards, monkeypatch):
    """load() refuses from stat alone: with the cap below the file's size it
    never opens the file."""
    monkeypatch.setattr(merge, "MAX_REPORT_BYTES", 100)
    opened = []
    monkeypatch.setattr(merge, "open", lambda *a, **k: opened.append(a), raising=False)
    with pytest.raises(merge.BadReport, match="larger than a shard report can be"):
        merge.load(op_shards / "s1")
    assert opened == []


def test_merge_removes_its_stale_temporaries_and_writes_one_set(op_shards, tmp_path):
    """A merge SIGKILLed between writing a temporary and renaming it leaves
    '.report.json.<random>.tmp' behind; the next merge into the folder removes
    such names (only its own pattern) and writes the three files."""
    out = tmp_path / "out"
    out.mkdir()
    stale = [".report.json.k3j_x9q2.tmp", ".junit.xml.abcdefgh.tmp", ".report.html.zz01.tmp"]
    for name in stale + [".notes.txt.abc.tmp", "keep.tmp"]:
        (out / name).write_text("partial")
    proc = dk("report", "merge", *(op_shards / f"s{k}" for k in (1, 2, 3)), "--out", out)
    assert proc.returncode == 0, proc.stderr
    assert sorted(os.listdir(out)) == sorted([".notes.txt.abc.tmp", "keep.tmp", "junit.xml",
                                              "report.html", "report.json"])


def test_ray_runner_on_a_local_two_node_cluster(op_shards, tmp_path):
    """`devicekit ray` places one task per shard on nodes offering devicekit_cpu;
    the merged report equals the single run's. Ray is in the test extra: a
    missing ray fails here rather than skipping."""
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "resources": {"devicekit_cpu": 1}})
    try:
        cluster.add_node(num_cpus=1, resources={"devicekit_cpu": 1})
        cluster.wait_for_nodes()
        # no node has the device the resource names: refused, nothing written
        nowhere = dk("ray", "--address", cluster.address, "--shards", 2, "--report",
                     tmp_path / "none", "conformance", "--device", "acme:0", timeout=HUNG_S)
        proc = dk("ray", "--address", cluster.address, "--shards", 2,
                  "--report", tmp_path / "merged", "conformance", "--device", "cpu:0", *OPS,
                  "--jobs", "1", timeout=HUNG_S)
    finally:
        cluster.shutdown()
    assert nowhere.returncode == 2 and "offers the resource 'devicekit_acme'" in nowhere.stderr
    assert not (tmp_path / "none").exists()
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    nodes = proc.stdout.split("from Ray nodes ", 1)[1].split(":", 1)[0].split(", ")
    assert len(nodes) == 2, proc.stdout  # one task on each node: one resource unit per node
    _assert_same(op_shards / "single", tmp_path / "merged")


def test_ray_runner_argument_errors():
    from devicekit.scale import ray_runner

    with pytest.raises(ray_runner.RunnerError, match="--report"):
        ray_runner.run("conformance", ["--device", "cpu:0", "--report", "x"], 2)
    with pytest.raises(ray_runner.RunnerError, match="--resource"):
        ray_runner.run("conformance", ["--plugin", "lib.so"], 2)
    assert ray_runner.default_resource(["--device", "acme:3"]) == "devicekit_acme"
