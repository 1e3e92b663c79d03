"""The porting guide and the generated README, run as written.

Every fenced block marked ``sh`` in docs/porting_guide.md is run, in order,
in one bash script (so ``cd`` carries over), with ``set -euo pipefail``: a
command that fails, or a guide that drifted from the code, fails this test.
Then the ``sh`` blocks of the README that ``devicekit new`` generated run the
same way in that project (where the guide left it).

Where: a fresh venv (tests/_venv.py: no base site-packages; DeviceKit's
dependencies, pip, pytest and scikit-build-core exposed from this test
environment through a .pth), and a work folder whose ``wheels/`` holds
DeviceKit's wheel built from this checkout, which the guide's first command
installs. The user's PATH is the venv's bin folder, then the machine's (the
vendor side needs cc and cmake).

Two settings make it run offline, and say so here rather than in the guide:
``PIP_NO_INDEX=1`` (pip installs from ``wheels/`` and what is exposed), and
``PIP_NO_BUILD_ISOLATION=0`` (pip's inverted spelling of "no isolation"),
because an isolated build would download scikit-build-core. That the
template's isolated build needs nothing else is checked in
tests/test_scaffold.py (its [build-system] requires only scikit-build-core,
and the build never consults devicekit).

Slow (a DeviceKit wheel, a plugin project built with CMake and as a wheel,
conformance runs; about 1.5 minutes on 2 busy cores): marked
``slow``, still part of ``python -m pytest tests``. Needs a C compiler and
CMake (skipped with the reason otherwise).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
import zipfile
from pathlib import Path

import pytest

from devicekit import api_target

from _venv import REPO_ROOT, make_venv, runtime_requirements
from conftest import _find_c_compiler
from conftest import HUNG_S

pytestmark = pytest.mark.slow

GUIDE = REPO_ROOT / "docs" / "porting_guide.md"
SH_BLOCK = re.compile(r"^```sh\n(.*?)^```", re.S | re.M)


def sh_blocks(text: str) -> list[str]:
    return [m[1] for m in SH_BLOCK.finditer(text)]


def script(blocks: list[str], marker_file: Path) -> str:
    """One bash script; before each block, the time is appended to marker_file."""
    parts = ["set -euo pipefail"]
    for i, block in enumerate(blocks):
        parts.append(f'echo "{i} $(date +%s.%N)" >> "{marker_file}"')
        parts.append(f"echo '--- block {i}' >&2\nset -x\n{block}set +x")
    parts.append(f'echo "end $(date +%s.%N)" >> "{marker_file}"')
    return "\n".join(parts) + "\n"


def durations(times: dict) -> str:
    keys = list(times)
    return " ".join(f"{a}:{times[b] - times[a]:.1f}s" for a, b in zip(keys, keys[1:]))


class User:
    def __init__(self, root: Path, venv: Path):
        self.root, self.venv = root, venv
        self.work = root / "work"

    def env(self) -> dict:
        env = {k: v for k, v in os.environ.items()
               if k not in ("DEVICEKIT_PLUGIN_PATH", "DEVICEKIT_PLUGIN_OVERRIDE", "PYTHONPATH",
                            "PYTHONHOME", "VIRTUAL_ENV")
               and not k.startswith("PIP_")}
        env.update(PATH=os.pathsep.join([str(self.venv / "bin"), os.environ["PATH"]]),
                   VIRTUAL_ENV=str(self.venv), PIP_NO_INDEX="1", PIP_NO_BUILD_ISOLATION="0",
                   PIP_DISABLE_PIP_VERSION_CHECK="1")
        return env

    def run_blocks(self, blocks: list[str], cwd: Path, name: str):
        markers = self.root / f"{name}.times"
        result = subprocess.run(["bash", "-c", script(blocks, markers)], cwd=cwd, env=self.env(),
                                capture_output=True, text=True, timeout=HUNG_S)
        assert result.returncode == 0, (
            f"{name}: a command failed (exit {result.returncode}); the last lines:\n"
            f"{result.stdout[-3000:]}\n{result.stderr[-6000:]}")
        times = {}
        for line in markers.read_text().splitlines():
            key, stamp = line.split()
            times[key] = float(stamp)
        return result, times


@pytest.fixture(scope="module")
def user(tmp_path_factory, devicekit_wheel) -> User:
    if _find_c_compiler() is None or shutil.which("cmake") is None:
        pytest.skip("the guide's vendor side needs a C compiler and cmake on PATH")
    root = tmp_path_factory.mktemp("guide")
    t0 = time.perf_counter()
    venv = root / "venv"
    make_venv(venv, {"pip", "pytest", "scikit-build-core"} | runtime_requirements("devicekit"))
    u = User(root, venv)
    (u.work / "wheels").mkdir(parents=True)
    shutil.copy(devicekit_wheel, u.work / "wheels")
    u.venv_seconds = time.perf_counter() - t0
    return u


def test_the_guide_marks_its_commands():
    blocks = sh_blocks(GUIDE.read_text())
    text = "\n".join(blocks)
    # The path the guide promises, in this order: the extraction did not collapse.
    steps = ["pip install --find-links wheels devicekit", "devicekit new acme", "cd devicekit-acme",
             "devicekit dev --run conformance -k runtime", "plugin_kernel_exp",
             "pip wheel . --no-deps -w dist", "pip install --force-reinstall --no-deps",
             "devicekit dev --run devices    # with devicekit-acme installed",
             "devicekit dev --run bench"]
    positions = [text.find(s) for s in steps]
    assert -1 not in positions, dict(zip(steps, positions))
    assert positions == sorted(positions), dict(zip(steps, positions))


def test_porting_guide_then_generated_readme_run_verbatim(user):
    blocks = sh_blocks(GUIDE.read_text())
    result, times = user.run_blocks(blocks, user.work, "guide")
    project = user.work / "devicekit-acme"
    # Section 8: the dev build ran ahead of the installed wheel, and said so.
    assert "devicekit dev: it shadows the installed devicekit-acme 0.1.0: " in result.stderr
    # What the commands claim to have made is there.
    (wheel,) = (project / "dist").glob("devicekit_acme-0.1.0-py3-none-*.whl")
    with zipfile.ZipFile(wheel) as z:
        meta = z.read("devicekit_acme-0.1.0.dist-info/METADATA").decode()
    # The scaffold targets this DeviceKit's device API; the wheel requires the
    # first DeviceKit that loads it.
    first = "%d.%d" % api_target.FIRST_DEVICEKIT[api_target.installed_api()]
    assert re.search(rf"^Requires-Dist: devicekit<1,>={re.escape(first)}$|"
                     rf"^Requires-Dist: devicekit>={re.escape(first)},<1$", meta, re.M), meta
    assert (project / "reports" / "report.json").is_file()
    bench = json.loads((project / "bench.json").read_text())
    measured = {(r["op"], r["dtype"]) for r in bench["results"]}
    assert measured == {("add", "float32"), ("exp", "float32")}, measured
    # Figures for the record (shown with -s): from the fresh venv to the end of
    # the first block running runtime conformance, and the block that edits
    # the exp kernel in and runs its cases.
    green = next(i for i, b in enumerate(blocks) if "conformance -k runtime" in b) + 1
    edit = next(i for i, b in enumerate(blocks) if "plugin_kernel_exp" in b)
    print(f"\nguide: venv {user.venv_seconds:.1f}s; clean venv -> green runtime conformance "
          f"{times[str(green)] - times['0'] + user.venv_seconds:.1f}s; edit exp -> its cases "
          f"pass {times[str(edit + 1)] - times[str(edit)]:.1f}s; whole guide "
          f"{times['end'] - times['0']:.1f}s; per block {durations(times)}")

    # The generated README, in the project the guide made (the wheel is still
    # installed): one test, since the README's commands start where the guide
    # left the project.
    readme = sh_blocks((project / "README.md").read_text())
    assert any("devicekit dev" in b for b in readme) and any("pip wheel" in b for b in readme)
    (project / "dist").rename(project / "dist-guide")
    result, times = user.run_blocks(readme, project, "readme")
    assert list((project / "dist").glob("devicekit_acme-0.1.0-py3-none-*.whl"))
    print(f"readme: {times['end'] - times['0']:.1f}s; per block {durations(times)}")
