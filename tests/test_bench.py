"""``devicekit bench`` on the reference CPU plugin: the table, the JSON
document docs/bench.md describes, and its errors. Measures tiny sizes only:
the figures' values are not asserted (performance belongs in benchmarks/),
their consistency is.
Needs: the installed SDK with its reference CPU plugin.
"""

from __future__ import annotations

import hashlib
import json

import devicekit as dk
from devicekit import cli


def test_bench_table_and_json(tmp_path, capsys):
    out = tmp_path / "bench.json"
    argv = ["bench", "--device", "cpu:0", "--op", "add", "--op", "matmul", "--op", "copy",
            "--op", "reduce_sum", "--size", "2048", "--matmul-size", "16", "--repeats", "2",
            "--json", str(out)]
    assert cli.main(argv) == 0
    captured = capsys.readouterr()
    assert "[1/4] copy float32 2048" in captured.err  # progress, one line per measurement
    assert "GB/s" in captured.out and "Not measured" not in captured.out
    doc = json.loads(out.read_text())
    assert doc["schema"] == "devicekit.bench/1" and doc["device"] == "cpu:0"
    plugin = doc["plugin"]
    with open(plugin["path"], "rb") as f:
        assert plugin["sha256"] == hashlib.sha256(f.read()).hexdigest()
    rows = {(r["op"], r["dtype"], r["size"]): r for r in doc["results"]}
    assert set(rows) == {("add", "float32", 2048), ("reduce_sum", "float32", 2048),
                         ("matmul", "float32", 16), ("copy", "float32", 2048)}
    add, mm = rows[("add", "float32", 2048)], rows[("matmul", "float32", 16)]
    assert add["bytes"] == 3 * 2048 * 4 and add["flops"] == 2048
    assert mm["flops"] == 2 * 16 ** 3 and mm["bytes"] == 3 * 16 * 16 * 4
    assert rows[("reduce_sum", "float32", 2048)]["shapes"] == [[2, 1024]]
    for r in doc["results"]:
        assert r["seconds"] > 0 and r["calls"] >= 1 and r["repeats"] == 2
        assert abs(r["gbps"] - r["bytes"] / r["seconds"] / 1e9) <= 1e-9 * r["gbps"]
        assert abs(r["gflops"] - r["flops"] / r["seconds"] / 1e9) <= 1e-9 * r["gflops"]
    assert doc["skipped"] == []


# One op of each kind the first recipes lacked: (op, dtype, shapes, bytes, flops)
# for --size 2048 (rows of 1024: [2, 1024]).
NEW_RECIPES = [
    ("copy", "float32", [[1024, 2]], 2 * 2048 * 4, 0),  # a transposed view, materialised
    ("fill", "int32", [], 2048 * 4, 0),
    ("cast", "float16", [[2048]], 2048 * 2 + 2048 * 4, 0),  # float16 -> float32
    ("where", "float32", [[2048]] * 3, 2048 * (1 + 3 * 4), 2048),
    ("cumsum", "int64", [[2, 1024]], 2 * 2048 * 8, 2048),
    ("iota", "float64", [], 2048 * 8, 2048),
    ("gather", "bfloat16", [[2, 1024], [2, 1024]], 2048 * (2 + 8 + 2), 0),
    ("scatter_add", "float32", [[2, 1024]] * 3, 2048 * (4 + 8 + 4 + 4), 2048),
    ("random_bits", "int32", [], 2048 * 4, 0),
    ("random_uniform", "float16", [], 2048 * 2, 0),
    ("logical_not", "bool", [[2048]], 2 * 2048, 2048),
]


def test_bench_recipes_for_every_kind(tmp_path, capsys):
    """Memory, select, scan, generator, index and random ops are measured (each
    call reaches the op's own kernel, or bench says so), with the bytes and
    flops docs/bench.md gives; --dtype all covers every declared dtype."""
    out = tmp_path / "bench.json"
    argv = ["bench", "--device", "cpu:0", "--size", "2048", "--repeats", "1", "--quiet",
            "--dtype", "all", "--json", str(out)]
    for op, *_ in NEW_RECIPES:
        argv += ["--op", op]
    assert cli.main(argv) == 0
    doc = json.loads(out.read_text())
    assert doc["skipped"] == []
    rows = {(r["op"], r["dtype"]): r for r in doc["results"]}
    for op, dtype, shapes, nbytes, flops in NEW_RECIPES:
        r = rows[(op, dtype)]
        assert (r["shapes"], r["bytes"], r["flops"]) == (shapes, nbytes, flops), (op, r)
        assert r["recipe"].startswith(op if op != "where" else "where(")
    kernels = {k["op"]: k for k in dk.device("cpu:0").plugin.kernels()}
    for op, *_ in NEW_RECIPES:  # every declared dtype of each op, no more
        assert {d for o, d in rows if o == op} == set(kernels[op]["dtypes"]), op
    table = capsys.readouterr().out
    assert any(line.split()[:2] == ["fill", "int32"] and line.split()[-1] == "-"
               for line in table.splitlines())  # no GFLOP/s for ops that only move bytes


def test_bench_never_reports_a_time_that_missed_the_kernel(capsys):
    """Size 0: the SDK answers empty tensors without a kernel call; bench
    reports that as not measured instead of timing the SDK."""
    assert cli.main(["bench", "--device", "cpu:0", "--op", "neg", "--size", "0",
                     "--repeats", "1", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "neg float32: the recipe (neg of 1 dense [0]) did not reach the neg kernel" in out


def test_bench_reports_undeclared_dtypes_as_skipped(capsys):
    assert cli.main(["bench", "--device", "cpu:0", "--op", "logical_and", "--dtype", "bool",
                     "--dtype", "float32", "--size", "256", "--repeats", "1", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "logical_and  bool" in out and "logical_and float32: dtype not declared" in out


def test_bench_unknown_op_is_one_error_line(capsys):
    assert cli.main(["bench", "--device", "cpu:0", "--op", "no_such_op", "--quiet"]) == 1
    err = capsys.readouterr().err
    assert "unknown op(s) no_such_op" in err and err.count("\n") == 1
