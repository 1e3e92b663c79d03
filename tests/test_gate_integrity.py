"""Nothing lost, nothing forged: what ``devicekit gate`` refuses before any
rule runs, and what it does when an output cannot be written or time runs out.

- A record's ``content_sha256`` covers every field (flipped outcomes with a
  recomputed ``cases_sha256``, model phases, loss curves, ``partial``,
  ``level``, ``library_path``): an edit is exit 4.
- ``--trust``: only records and baselines signed (DSSE, Ed25519) by a trusted
  key are admitted; unsigned, other-key, altered and edited-after-signing
  records are exit 8, naming the key.
- Malformed but parseable records (wrong type, missing key, unknown value,
  deep nesting, oversize) are exit 4 naming the field, never a traceback.
- Outputs are checked before any work (exit 3) and a write that fails after it
  is exit 3 with the previous file intact; ``certify --timeout`` is exit 124.

Records come from test_gate.py's builder (no device runs) and most commands
run in-process; the three certify tests run cpu:0 narrowed to one case and
the MLP in float32 (seconds).

Needs: ``cryptography`` (the test extra); the certify tests the reference CPU
plugin (cpu:0).
"""

import errno
import json
import os
import shutil
import subprocess
import time

import pytest
from test_gate import make, write_policy

from devicekit import cli
from devicekit._util import output as _output
from devicekit.conformance import target as conformance_target
from devicekit.gate import record, sign, validate

serialization = pytest.importorskip("cryptography.hazmat.primitives.serialization")
ed25519 = pytest.importorskip("cryptography.hazmat.primitives.asymmetric.ed25519")

CASE = "ops/add/float32/odd"
SMALL = ("--device", "cpu:0", "--case", CASE, "--model", "mlp", "--model-dtype", "float32",
         "--jobs", "1")


def gate(capsys, *args):
    """``devicekit gate ARGS`` in this process: (exit code, stdout, stderr)."""
    capsys.readouterr()
    code = cli.main(["gate", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


def one_error(err, cmd="check"):
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"devicekit gate {cmd}: error: "), err
    return lines[0]


def keypair(folder, name):
    key = ed25519.Ed25519PrivateKey.generate()
    priv, pub = folder / f"{name}.pem", folder / f"{name}.pub.pem"
    priv.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                       serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
    pub.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                  serialization.PublicFormat.SubjectPublicKeyInfo))
    return priv, pub, sign.keyid(key.public_key())[:16]


@pytest.fixture
def keys(tmp_path):
    return {name: keypair(tmp_path, name) for name in ("alice", "mallory")}


def doc_of(path):
    return json.loads(path.read_text())


def save(path, doc):
    path.write_text(record.dumps(doc) + "\n")
    return path


def recompute_cases(doc, sec):
    doc[sec]["cases_sha256"] = record.cases_sha256(
        [dict(zip(record.CASE_FIELDS, r)) for r in doc[sec]["cases"]])


# ---- forgeries the hash catches ------------------------------------------

def test_flipped_outcomes_with_recomputed_cases_sha256_are_refused(tmp_path, capsys):
    cases = [("runtime/alloc_zero", None, None, "pass"),
             ("ops/add/float32/basic", "add", "float32", "fail")]
    bad = make(tmp_path, "bad", cases)
    pol = write_policy(tmp_path)
    assert gate(capsys, "check", bad, "--baseline", bad, "--policy", pol)[0] == 1
    doc = doc_of(bad)
    doc["conformance"]["cases"][1][5] = "pass"
    doc["conformance"]["failures"] = {}
    doc["conformance"]["passed"] = True
    recompute_cases(doc, "conformance")
    forged = save(tmp_path / "forged.json", doc)
    code, out, err = gate(capsys, "check", forged, "--baseline", bad, "--policy", pol)
    assert code == 4 and out == "", out
    assert "does not match its content_sha256" in one_error(err)


def _phase(doc):
    models = doc["models"]
    models["per_model"]["mlp"]["float32"].update(passed=True)
    models["per_model"]["mlp"]["float32"]["phases"]["forward"] = "pass"
    models["cases"][0][5] = "pass"
    models.update(failures={}, passed=True)
    recompute_cases(doc, "models")


def _curve(doc):
    doc["models"]["per_model"]["mlp"]["float32"]["loss_curve"][2] = 1.2


def _library(doc, tmp_path):
    copy = tmp_path / "copy" / "libacme.so"  # the certified bytes, somewhere the forger controls
    copy.parent.mkdir()
    copy.write_bytes((tmp_path / "libacme.so").read_bytes())
    doc["plugin"]["library_path"] = str(copy)


@pytest.mark.parametrize("name,weak,forge", [
    ("phase", {"phases": {"forward": "fail"}}, _phase),
    ("curve", {"curve": (2.0, 1.5, 1.9)}, _curve),
    ("partial", {"conformance": {"partial": True}}, lambda d: d["conformance"].update(partial=False)),
    ("level", {"conformance": {"level": "core"}}, lambda d: d["conformance"].update(level="full")),
    ("library_path", {"plugin": {"library_path": "/gone/libacme.so"}}, _library),
])
def test_edits_outside_the_case_lists_are_refused(tmp_path, capsys, name, weak, forge):
    """A record the policy refuses for one reason (a failing model phase, a
    loss curve out of band, partial, core level, a library that is not
    there), edited so that the reason is gone: the edit itself is refused."""
    base = make(tmp_path, "base")
    doc = doc_of(make(tmp_path, "src", **{k: v for k, v in weak.items()
                                         if k in ("phases", "curve")}))
    for sec in ("conformance", "plugin"):
        doc[sec].update(weak.get(sec, {}))
    doc = record.seal(doc)
    really = save(tmp_path / "really.json", doc)  # what was really certified
    pol = write_policy(tmp_path)
    assert gate(capsys, "check", really, "--baseline", base, "--policy", pol)[0] == 1
    forge(doc, tmp_path) if forge is _library else forge(doc)
    forged = save(tmp_path / "forged.json", doc)
    code, _, err = gate(capsys, "check", forged, "--baseline", base, "--policy", pol)
    assert code == 4 and "does not match its content_sha256" in one_error(err), err


def test_old_records_without_the_content_hash_load_with_a_note(tmp_path, capsys):
    """The committed baseline predates content_sha256: still read (its case
    lists are still hashed), with a note saying what is not covered."""
    base = make(tmp_path, "base")
    doc = doc_of(base)
    del doc["content_sha256"]
    old = save(tmp_path / "old.json", doc)
    code, out, _ = gate(capsys, "check", old, "--baseline", old, "--policy", write_policy(tmp_path))
    assert code == 0 and "has no content_sha256" in out


# ---- signatures ----------------------------------------------------------

def signed(tmp_path, name, key, **kw):
    path = make(tmp_path, name, **kw)
    record.write(record.load(path), path, sign.load_private(key))
    return path


def test_signed_record_is_admitted_with_the_trusted_key(tmp_path, capsys, keys):
    priv, pub, kid = keys["alice"]
    rec = signed(tmp_path, "rec", priv)
    env = doc_of(rec)["signature"]
    assert env["payloadType"] == sign.PAYLOAD_TYPE and env["signatures"][0]["keyid"][:16] == kid
    code, out, err = gate(capsys, "check", rec, "--baseline", rec, "--policy",
                          write_policy(tmp_path), "--trust", keys["mallory"][1], "--trust", pub)
    assert code == 0, err
    assert f"signed by trusted key {kid}" in out and "ADMITTED" in out
    code, out, _ = gate(capsys, "check", rec, "--baseline", rec, "--policy", write_policy(tmp_path))
    assert code == 0 and f"signed by key {kid} (not verified: no --trust given)" in out


def _tamper_sig(doc):
    sig = doc["signature"]["signatures"][0]
    raw = bytearray(__import__("base64").b64decode(sig["sig"]))
    raw[0] ^= 1
    sig["sig"] = __import__("base64").b64encode(bytes(raw)).decode()


@pytest.mark.parametrize("case,problem", [
    ("unsigned", "record is not signed"),
    ("other_key", "record is signed by key {mallory}, which is not trusted (--trust: {alice} "),
    ("edited", "record was edited after key {alice} signed it"),
    ("bad_sig", "signature by key {alice} does not verify"),
    ("unsigned_baseline", "baseline is not signed"),
])
def test_trust_refuses_naming_the_key_and_the_reason(tmp_path, capsys, keys, case, problem):
    alice, mallory = keys["alice"], keys["mallory"]
    base = signed(tmp_path, "base", alice[0])
    new = {"unsigned": lambda: make(tmp_path, "new"),
           "other_key": lambda: signed(tmp_path, "new", mallory[0]),
           "unsigned_baseline": lambda: signed(tmp_path, "new", alice[0])}.get(case)
    new = new() if new else signed(tmp_path, "new", alice[0],
                                   cases=[("runtime/alloc_zero", None, None, "pass"),
                                          ("ops/add/float32/basic", "add", "float32", "fail")])
    if case == "edited":  # a forger who recomputes every hash but cannot sign
        doc = doc_of(new)
        doc["conformance"]["cases"][1][5] = "pass"
        recompute_cases(doc, "conformance")
        doc["content_sha256"] = record.content_sha256(doc)
        save(new, doc)
    elif case == "bad_sig":
        doc = doc_of(new)
        _tamper_sig(doc)
        save(new, doc)
    elif case == "unsigned_baseline":
        base = make(tmp_path, "base")
    code, out, err = gate(capsys, "check", new, "--baseline", base, "--policy",
                          write_policy(tmp_path), "--trust", alice[1])
    line = one_error(err)
    assert code == 8 and out == "", err
    assert problem.format(alice=alice[2], mallory=mallory[2]) in line, line


def test_gate_sign_signs_an_old_record_once_it_checks(tmp_path, capsys, keys):
    base = make(tmp_path, "base")
    doc = doc_of(base)
    del doc["content_sha256"]
    old = save(tmp_path / "old.json", doc)
    priv, pub, kid = keys["alice"]
    code, out, _ = gate(capsys, "sign", old, "--key", priv, "--out", tmp_path / "signed.json")
    assert code == 0 and kid in out
    code, _, err = gate(capsys, "check", tmp_path / "signed.json", "--baseline",
                        tmp_path / "signed.json", "--policy", write_policy(tmp_path), "--trust", pub)
    assert code == 0, err
    doc["conformance"]["cases"][0][5] = "fail"  # a damaged record is not signed
    save(old, doc)
    code, _, err = gate(capsys, "sign", old, "--key", priv)
    assert code == 4 and "cases_sha256" in one_error(err, "sign")
    code, _, err = gate(capsys, "sign", base, "--key", pub)
    assert code == 2 and "not a PEM private key" in one_error(err, "sign")


@pytest.mark.skipif(shutil.which("openssl") is None, reason="no openssl on PATH")
def test_keys_made_as_the_docs_say_work(tmp_path):
    key, pub = tmp_path / "gate-key.pem", tmp_path / "gate-key.pub.pem"
    subprocess.run(["openssl", "genpkey", "-algorithm", "ed25519", "-out", key], check=True)
    subprocess.run(["openssl", "pkey", "-in", key, "-pubout", "-out", pub], check=True)
    rec = signed(tmp_path, "rec", key)
    assert record.load(rec, trust=sign.load_trusted([pub]))["plugin"]["name"] == "acme"


# ---- malformed records: exit 4 naming the field ----------------------------

def _set(path, value):
    def edit(doc):
        node = doc
        for p in path[:-1]:
            node = node[p]
        if value is KeyError:
            del node[path[-1]]
        else:
            node[path[-1]] = value
    return edit


@pytest.mark.parametrize("edit,problem", [
    (_set(("conformance", "level"), KeyError), "conformance.level: missing"),
    (_set(("performance", "machine"), KeyError), "performance.machine: missing"),
    (_set(("conformance", "level"), "most"),
     'conformance.level: expected one of core, full, got "most"'),
    (_set(("conformance", "partial"), "no"),
     'conformance.partial: expected boolean, got a string "no"'),
    (_set(("conformance", "failures"), []), "conformance.failures: expected object, got an array"),
    (_set(("conformance", "cases", 2, 5), "passed"),
     'conformance.cases[2].outcome: expected one of pass, fail, error, crash, not-implemented, '
     'skipped, got "passed"'),
    (_set(("conformance", "cases", 1, 4), "yes"),
     'conformance.cases[1].required: expected boolean, got a string "yes"'),
    (_set(("models", "per_model", "mlp", "float32", "phases"), []),
     "models.per_model.mlp.float32.phases: expected object, got an array"),
    (_set(("models", "per_model", "mlp", "float32", "phases", "train"), True),
     "models.per_model.mlp.float32.phases.train: expected one of pass"),
    (_set(("models", "per_model", "mlp", "float32", "loss_curve", 1), "1.5"),
     'models.per_model.mlp.float32.loss_curve[1]: expected number, got a string "1.5"'),
    (_set(("performance", "results", 0, "seconds"), 0),
     "performance.results[0].seconds: expected a number > 0, got 0"),
])
def test_malformed_records_name_the_field(tmp_path, capsys, edit, problem):
    """Each would have been a traceback (exit 1, which means "refused"), a
    refusal or an admission; the hashes are made right, so it is the schema
    that refuses them."""
    base = make(tmp_path, "base")
    doc = doc_of(base)
    edit(doc)
    recompute_cases(doc, "conformance")
    bad = save(tmp_path / "bad.json", record.seal(doc))
    code, out, err = gate(capsys, "check", bad, "--baseline", base, "--policy",
                          write_policy(tmp_path))
    assert code == 4 and out == "", err
    assert one_error(err).startswith(f"devicekit gate check: error: {bad}: {problem}"), err


def test_deep_nesting_is_refused_not_a_recursion_error(tmp_path, capsys):
    base = make(tmp_path, "base")
    deep = tmp_path / "deep.json"
    deep.write_text('{"schema": "devicekit.gate.record", "x": ' + "[" * 100_000 + "]" * 100_000
                    + "}")
    code, _, err = gate(capsys, "check", deep, "--baseline", base, "--policy",
                        write_policy(tmp_path))
    assert code == 4 and "nested too deeply" in one_error(err)
    doc = doc_of(base)  # deep enough to parse, deeper than any record field
    node = doc["device"]["properties"]
    for _ in range(validate.MAX_DEPTH):
        node["x"] = {}
        node = node["x"]
    save(deep, record.seal(doc))
    code, _, err = gate(capsys, "matrix", deep, "--out", tmp_path / "m.html")
    assert code == 4 and "device.properties.x.x.x" in one_error(err, "matrix")
    assert "nested deeper than 32 levels" in err


def test_oversize_record_is_refused_before_it_is_read(tmp_path, capsys, monkeypatch):
    base = make(tmp_path, "base")
    huge = tmp_path / "huge.json"
    with open(huge, "wb") as f:  # sparse: no disk used, and never read
        f.truncate(validate.MAX_BYTES + 1)
    code, _, err = gate(capsys, "check", huge, "--baseline", base, "--policy",
                        write_policy(tmp_path))
    assert code == 4 and "larger than the 256 MiB a record may be (refused unread)" in \
        one_error(err)
    monkeypatch.setattr(validate, "MAX_BYTES", 1000)  # a real record over a (lowered) cap
    code, _, err = gate(capsys, "check", base, "--baseline", base, "--policy",
                        write_policy(tmp_path))
    size = base.stat().st_size
    assert code == 4 and f"{base}: baseline is {size} bytes, larger than the 1000 bytes a " \
        f"record may be (refused unread)" in one_error(err)


# ---- outputs and time --------------------------------------------------------

def test_unwritable_outputs_are_refused_before_any_work(tmp_path, capsys, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    nowhere = blocker / "out.html"
    code, _, err = gate(capsys, "check", tmp_path / "missing.json", "--baseline",
                        tmp_path / "missing.json", "--policy", "release", "--html", nowhere)
    assert code == 3 and "--html" in one_error(err) and "not a folder" in err
    code, _, err = gate(capsys, "matrix", tmp_path / "missing.json", "--out", tmp_path / "m.html",
                        "--json", nowhere)
    assert code == 3 and "--json" in one_error(err, "matrix")
    opened = []  # the first work certify does is opening the plugin: it must not happen
    monkeypatch.setattr(conformance_target, "open_target", lambda *a: opened.append(a))
    code, _, err = gate(capsys, "certify", *SMALL, "--no-perf", "--out", nowhere)
    assert code == 3 and "--out" in one_error(err, "certify")
    assert opened == []  # nothing ran (checked by what happened, not by the time taken)
    code, _, err = gate(capsys, "certify", *SMALL, "--no-perf", "--out", tmp_path / "r.json",
                        "--reports", blocker)
    assert code == 3 and "--reports" in one_error(err, "certify")


def _full_disk(monkeypatch):
    def fsync(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(_output.os, "fsync", fsync)


def test_check_output_failing_after_the_verdict_is_exit_3_and_keeps_the_old_file(
        tmp_path, capsys, monkeypatch):
    base = make(tmp_path, "base")
    page, junit = tmp_path / "gate.html", tmp_path / "gate.xml"
    page.write_text("the previous verdict")
    _full_disk(monkeypatch)
    code, out, err = gate(capsys, "check", base, "--baseline", base, "--policy",
                          write_policy(tmp_path), "--junit", junit, "--html", page)
    assert code == 3 and "ADMITTED" in out
    assert "No space left on device" in one_error(err)
    assert page.read_text() == "the previous verdict" and not junit.exists()
    assert sorted(os.listdir(tmp_path)) == sorted(["base.json", "libacme.so", "gate.html",
                                                   "policy.toml"])  # no temporaries left


def test_certify_write_failing_after_the_run_is_exit_3_and_keeps_the_old_record(
        tmp_path, capsys, monkeypatch):
    out = tmp_path / "record.json"
    out.write_text("the previous record")
    _full_disk(monkeypatch)
    code, _, err = gate(capsys, "certify", *SMALL, "--no-perf", "--out", out)
    assert code == 3, err
    line = err.strip().splitlines()[-1]
    assert line.startswith(f"devicekit gate certify: error: {out}: cannot write: No space left")
    assert out.read_text() == "the previous record"


def test_certify_timeout_bounds_the_run(tmp_path, capsys):
    out = tmp_path / "record.json"
    start = time.monotonic()
    code, _, err = gate(capsys, "certify", *SMALL, "--timeout", "0.5", "--out", out)
    took = time.monotonic() - start
    assert code == 124, err
    assert "--timeout 0.5 s ran out during" in err and "no record was written" in err
    assert not out.exists() and took < 20, took


def test_certify_signs_within_its_timeout_and_check_trusts_it(tmp_path, capsys, keys):
    priv, pub, kid = keys["alice"]
    out = tmp_path / "record.json"
    code, stdout, err = gate(capsys, "certify", *SMALL, "--no-perf", "--sign", priv,
                             "--timeout", "300", "--out", out)
    assert code == 0, err[-3000:]
    assert "signed" in stdout
    rec = record.load(out, trust=sign.load_trusted([pub]))
    assert rec["conformance"]["partial"] and rec["content_sha256"] == record.content_sha256(
        doc_of(out))
    pol = tmp_path / "policy.toml"
    pol.write_text(write_policy(tmp_path, perf=False).read_text().replace(
        "allow_partial = false", "allow_partial = true"))
    code, stdout, err = gate(capsys, "check", out, "--baseline", out, "--policy", pol,
                             "--trust", pub)
    assert code == 0 and f"trusted key {kid}" in stdout, stdout + err


def test_a_record_written_and_read_back_is_unchanged(tmp_path):
    """write -> load -> write gives the same bytes (the seal is stable)."""
    path = make(tmp_path, "rec")
    first = path.read_text()
    record.write(record.load(path), path)
    assert path.read_text() == first
