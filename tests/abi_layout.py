"""Measure the binary layout of device_api.h with the C compiler.

Parses every `typedef struct` and `typedef enum` of the header, generates a C
program that prints each field's offset and size and each enumerator's value,
and runs it. Used by test_abi_layout.py against the frozen 1.0 snapshot, and
run as a script to print the current layout (to freeze a new minor):

    python tests/abi_layout.py > tests/abi/device_api_1_0_layout.json
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HEADER = os.path.join(ROOT, "device_api", "include", "devicekit", "device_api.h")


def _strip_comments(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def _collapse_braces(body):
    while True:
        new = re.sub(r"\{[^{}]*\}", "", body)
        if new == body:
            return body
        body = new


def _read_with_parts(header):
    """The header's text with the parts it includes by a quoted name from its
    own folder (device_api_ops.h, generated from the op spec) spliced in."""
    folder = os.path.dirname(header)
    return re.sub(r'^#include "([\w.]+)"$',
                  lambda m: open(os.path.join(folder, m.group(1))).read(),
                  open(header).read(), flags=re.M)


def parse(header=HEADER):
    text = _strip_comments(_read_with_parts(header))
    structs = {}
    for m in re.finditer(r"typedef struct (\w+) \{(.*?)\} \1;", text, flags=re.S):
        fields = []
        for decl in _collapse_braces(m.group(2)).split(";"):
            decl = decl.strip()
            if not decl:
                continue
            decl = re.sub(r"\[[^\]]*\]", "", decl)  # an array field: its name, not its length
            fn = re.match(r"DK_API_FN\((\w+)\)", decl)
            fields.append(fn.group(1) if fn else re.findall(r"\w+", decl)[-1])
        structs[m.group(1)] = fields
    enums = {}
    for m in re.finditer(r"typedef enum (\w+) \{(.*?)\} \1;", text, flags=re.S):
        enums[m.group(1)] = [e.split("=")[0].strip() for e in m.group(2).split(",") if e.strip()]
    return structs, enums


def measure(header=HEADER):
    """Return {"structs": {S: {"size": n, "fields": {f: [offset, size]}}}, "enums": {E: {k: v}}}."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise RuntimeError("no C compiler (cc) on PATH")
    structs, enums = parse(header)
    lines = ['#include <stdio.h>', '#include <stddef.h>', f'#include "{header}"', "int main(void) {"]
    for s, fields in structs.items():
        lines.append(f'  printf("S {s} %zu\\n", sizeof({s}));')
        for f in fields:
            lines.append(f'  printf("F {s} {f} %zu %zu\\n", offsetof({s}, {f}), '
                         f'sizeof((({s}*)0)->{f}));')
    for e, names in enums.items():
        for k in names:
            lines.append(f'  printf("E {e} {k} %lld\\n", (long long){k});')
    lines += ["  return 0;", "}"]
    with tempfile.TemporaryDirectory() as tmp:
        src, exe = os.path.join(tmp, "layout.c"), os.path.join(tmp, "layout")
        open(src, "w").write("\n".join(lines))
        subprocess.run([cc, "-std=c11", src, "-o", exe], check=True, capture_output=True, text=True)
        out = subprocess.run([exe], check=True, capture_output=True, text=True).stdout
    result = {"structs": {}, "enums": {}}
    for line in out.splitlines():
        kind, *rest = line.split()
        if kind == "S":
            result["structs"][rest[0]] = {"size": int(rest[1]), "fields": {}}
        elif kind == "F":
            result["structs"][rest[0]]["fields"][rest[1]] = [int(rest[2]), int(rest[3])]
        else:
            result["enums"].setdefault(rest[0], {})[rest[1]] = int(rest[2])
    return result


if __name__ == "__main__":
    json.dump(measure(), sys.stdout, indent=1, sort_keys=True)
    print()
