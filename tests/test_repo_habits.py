"""Habits that keep the repository readable, checked on every run: every
document a file points at is in the repository, tests/README.md maps every
test file, and CI's line-count report covers every tracked file."""

import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEXT_SUFFIXES = (".py", ".md", ".c", ".cc", ".cpp", ".h", ".cu", ".toml", ".txt", ".in",
                 ".j2", ".cmake", ".inc", ".def", ".yaml", ".cfg")
# A path ending in .md, with or without folders: docs/gate.md, ../ci/README.md.
MD_REF = re.compile(r"(?<![\w/.-])((?:\.\.?/)?(?:[\w.-]+/)*[\w.-]+\.md)\b")
# Documents that live outside the repository (the project's design notes, the
# issue tracker): a reader of the repository cannot open them.
OUTSIDE = re.compile(r"ARCHITECTURE(\.md)?\b|STYLE(\.md| item)\b|\b[Ii]ssue #?\d+")


def _tracked():
    if not os.path.isdir(os.path.join(ROOT, ".git")) and not os.path.isfile(
            os.path.join(ROOT, ".git")):
        pytest.skip("not a git checkout (an sdist): the habits are checked on the repository")
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, check=True,
                         capture_output=True).stdout.decode()
    return [p for p in out.split("\0") if p and os.path.isfile(os.path.join(ROOT, p))]


def _text_files():
    # tests/fixtures/ holds frozen copies of released files (the 1.0 header),
    # kept byte for byte: they say what was true when they shipped.
    return [p for p in _tracked() if not p.startswith("tests/fixtures/") and (
        p.endswith(TEXT_SUFFIXES) or os.path.basename(p) in ("run", "sanitizers", "lint"))]


def _resolves(path, ref):
    """Relative to the file, to an enclosing folder (the changelog a header
    names is device_api/'s), or to docs/ (docs name each other bare)."""
    folders, here = [], os.path.dirname(path)
    while True:
        folders.append(here)
        if not here:
            break
        here = os.path.dirname(here)
    candidates = [os.path.join(f, ref) for f in folders] + [os.path.join("docs", ref)]
    return any(os.path.isfile(os.path.join(ROOT, c)) for c in candidates)


def test_every_document_referenced_is_in_the_repository():
    missing = []
    for path in _text_files():
        with open(os.path.join(ROOT, path), encoding="utf-8", errors="replace") as f:
            for lineno, line in enumerate(f, 1):
                for ref in MD_REF.findall(line):
                    if "{" in ref or "<" in ref:  # a template placeholder, not a path
                        continue
                    if not _resolves(path, ref):
                        missing.append(f"{path}:{lineno}: {ref}")
    assert not missing, "references to documents that are not in the repository:\n" + "\n".join(missing)


def test_nothing_points_at_documents_outside_the_repository():
    found = []
    for path in _text_files():
        if path == "tests/test_repo_habits.py":
            continue
        with open(os.path.join(ROOT, path), encoding="utf-8", errors="replace") as f:
            for lineno, line in enumerate(f, 1):
                if OUTSIDE.search(line):
                    found.append(f"{path}:{lineno}: {line.strip()}")
    assert not found, ("these point at design notes or issues a reader of the repository cannot "
                       "open; state the rule itself instead:\n" + "\n".join(found))


def test_tests_readme_maps_every_test_file():
    with open(os.path.join(ROOT, "tests", "README.md")) as f:
        readme = f.read()
    named = set(re.findall(r"`(test_\w+\.py)`", readme))
    present = {p for p in os.listdir(os.path.join(ROOT, "tests")) if re.fullmatch(r"test_\w+\.py", p)}
    assert present - named == set(), f"test files missing from tests/README.md: {sorted(present - named)}"
    assert named - present == set(), \
        f"tests/README.md names files that do not exist: {sorted(named - present)}"


def test_line_count_report_covers_every_tracked_file():
    tracked = _tracked()
    out = subprocess.run([sys.executable, os.path.join(ROOT, ".ci", "line_counts.py")], cwd=ROOT,
                         check=True, capture_output=True, text=True).stdout
    rows = {}
    for line in out.splitlines()[1:]:
        m = re.fullmatch(r"(.+?)\s+(\d+)\s+(\d+)", line)
        assert m, f"unreadable report line: {line!r}"
        rows[m[1]] = (int(m[2]), int(m[3]))
    files = rows.pop("total (code and docs)")[0] + rows.pop("data files (*.json)")[0]
    assert files == len(tracked)
    json_files = sum(1 for p in tracked if p.endswith(".json"))
    assert sum(n for n, _ in rows.values()) + json_files == len(tracked)
    with open(os.path.join(ROOT, "sdk", "csrc", "tensor.cpp"), "rb") as f:
        assert rows["SDK C++ core"][1] >= f.read().count(b"\n")


@pytest.mark.parametrize("readme", ["sdk/README.md", "reference_backend/cpu/README.md",
                                    "reference_backend/cuda/README.md"])
def test_mechanism_maps_name_files_that_exist(readme):
    # The mechanism -> symbol -> file tables are how a newcomer finds code;
    # a file renamed or split without updating them sends the reader nowhere.
    base = os.path.dirname(os.path.join(ROOT, readme))
    with open(os.path.join(ROOT, readme)) as f:
        text = f.read()
    paths = set(re.findall(r"`((?:[\w.-]+/)*[\w.-]+\.(?:cpp|c|h|inc|def|py|txt))`", text))
    assert paths, f"{readme} names no files"
    names = {os.path.basename(p) for p in _tracked()}
    # A path with folders resolves from the README's folder (or its src/) or
    # the root; a bare file name must name some tracked file.
    missing = [p for p in sorted(paths) if not (
        any(os.path.isfile(os.path.join(d, p)) for d in (base, os.path.join(base, "src"), ROOT))
        if "/" in p else p in names)]
    assert not missing, f"{readme} names files that do not exist: {missing}"
