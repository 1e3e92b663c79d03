"""``devicekit bench`` on the reference CPU plugin: the table, the JSON
document docs/bench.md describes, and its errors. Measures tiny sizes only:
the figures' values are not asserted (performance belongs in benchmarks/),
their consistency is.
Needs: the installed SDK with its reference CPU plugin.
"""

from __future__ import annotations

import hashlib
import json

from devicekit import cli


def test_bench_table_and_json(tmp_path, capsys):
    out = tmp_path / "bench.json"
    argv = ["bench", "--device", "cpu:0", "--op", "add", "--op", "matmul", "--op", "copy",
            "--op", "reduce_sum", "--size", "2048", "--matmul-size", "16", "--repeats", "2",
            "--json", str(out)]
    assert cli.main(argv) == 0
    captured = capsys.readouterr()
    assert "[1/3] add float32 2048" in captured.err  # progress, one line per measurement
    assert "GB/s" in captured.out and "copy: no benchmark recipe for memory ops" in captured.out
    doc = json.loads(out.read_text())
    assert doc["schema"] == "devicekit.bench/1" and doc["device"] == "cpu:0"
    plugin = doc["plugin"]
    with open(plugin["path"], "rb") as f:
        assert plugin["sha256"] == hashlib.sha256(f.read()).hexdigest()
    rows = {(r["op"], r["dtype"], r["size"]): r for r in doc["results"]}
    assert set(rows) == {("add", "float32", 2048), ("reduce_sum", "float32", 2048),
                         ("matmul", "float32", 16)}
    add, mm = rows[("add", "float32", 2048)], rows[("matmul", "float32", 16)]
    assert add["bytes"] == 3 * 2048 * 4 and add["flops"] == 2048
    assert mm["flops"] == 2 * 16 ** 3 and mm["bytes"] == 3 * 16 * 16 * 4
    assert rows[("reduce_sum", "float32", 2048)]["shapes"] == [[2, 1024]]
    for r in doc["results"]:
        assert r["seconds"] > 0 and r["calls"] >= 1 and r["repeats"] == 2
        assert abs(r["gbps"] - r["bytes"] / r["seconds"] / 1e9) <= 1e-9 * r["gbps"]
        assert abs(r["gflops"] - r["flops"] / r["seconds"] / 1e9) <= 1e-9 * r["gflops"]
    assert {"op": "copy", "dtype": None, "reason": "no benchmark recipe for memory ops"} \
        in doc["skipped"]


def test_bench_reports_undeclared_dtypes_as_skipped(capsys):
    assert cli.main(["bench", "--device", "cpu:0", "--op", "logical_and", "--dtype", "bool",
                     "--dtype", "float32", "--size", "256", "--repeats", "1", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "logical_and  bool" in out and "logical_and float32: dtype not declared" in out


def test_bench_unknown_op_is_one_error_line(capsys):
    assert cli.main(["bench", "--device", "cpu:0", "--op", "no_such_op", "--quiet"]) == 1
    err = capsys.readouterr().err
    assert "unknown op(s) no_such_op" in err and err.count("\n") == 1
