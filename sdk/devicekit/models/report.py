"""The model run's report.json, junit.xml and report.html: the conformance
report family (``devicekit.conformance.report``), with the model parts added.

report.json is the conformance schema (version 1: versions, plugin path and
sha256, device, run, summary by section, cases) with ``"suite": "models"``,
sections = models, ``op`` = the model, and one key more, ``models``: per
model its title, config and hash, layers, loss curves per dtype, the base ops
it needs, and whether the reference still matches the committed golden. A
case that did not pass carries ``replay`` (the whole model in that dtype)
and, when a layer was found, ``details.layer_replay`` (just that layer).
The three files are written as one set and carry the run's id, as the
conformance reports do.
"""

import json
import shlex
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from importlib import resources

import jinja2

from ..conformance import report as conformance_report
from ..conformance.case import OUTCOMES, Case


@dataclass(frozen=True)
class ModelCase(Case):
    """A conformance :class:`Case` whose seed is the model's (weights and data)."""

    model_seed: int = 0

    @property
    def seed(self):
        return self.model_seed


def make_cases(models, dtypes, phases, seeds, optional_models=()):
    """Cases ``models/<model>/<dtype>/<phase>``; float32 is required, the others
    optional; every case of ``optional_models`` is optional (a multi-rank case
    on a plugin without the collectives part). ``phases``: one list for every
    model, or {model: its phases} (``harness.phases_of``)."""
    return [ModelCase(id=f"models/{m}/{d}/{p}", fn=None, section=m, op=m, dtype=d,
                      required=d == "float32" and m not in optional_models,
                      model_seed=seeds[m])
            for m in models for d in dtypes
            for p in (phases[m] if isinstance(phases, dict) else phases)]


def replay_command(row, run):
    where = " ".join(f"--{k} {shlex.quote(run[k + '_arg'])}" for k in ("plugin", "device")
                     if run.get(k + "_arg"))
    return (f"devicekit models {where} --model {row['op']} --dtype {row['dtype']} "
            f"--steps {run['steps']}")


def build(meta, run, cases, results, models, corpus=None):
    """``corpus``: given for a stopped run (its cases are those that answered)."""
    expected = len(cases)
    executed = sum(1 for c in cases if c.id in results)
    corpus = corpus or {"checked": True, "ok": executed == expected, "executed": executed,
                        "expected_min": expected, "short": [] if executed == expected else
                        [f"{expected - executed} cases got no result"]}
    rep = conformance_report.build(meta, run, cases, results, corpus, {})
    rep["suite"] = "models"
    for row in rep["cases"]:
        if "replay" in row:
            row["replay"] = replay_command(row, run)
    rep["models"] = models
    return rep


def junit_xml(report):
    """The conformance JUnit mapping, with suites named ``models.<model>``."""
    root = ET.fromstring(conformance_report.junit_xml(report).split("?>", 1)[-1])
    root.set("name", f"devicekit models {report['device']['name']}")
    for el in root.iter():
        for attr in ("name", "classname"):
            v = el.get(attr)
            if v and v.startswith("conformance."):
                el.set(attr, "models." + v[len("conformance."):])
    return ET.tostring(root, encoding="unicode", xml_declaration=True)


def render_html(report):
    text = resources.files("devicekit.models").joinpath("templates/report.html.j2").read_text()
    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)
    cells = {}
    for row in report["cases"]:
        cells.setdefault((row["op"], row["dtype"]), {})[row["id"].rsplit("/", 1)[1]] = row
    models = list(dict.fromkeys(r["op"] for r in report["cases"]))
    dtypes = list(dict.fromkeys(r["dtype"] for r in report["cases"]))
    phases = list(dict.fromkeys(r["id"].rsplit("/", 1)[1] for r in report["cases"]))
    problems = [r for r in report["cases"] if r["outcome"] != "pass"]
    return env.from_string(text).render(r=report, models=models, dtypes=dtypes, phases=phases,
                                        cells=cells, problems=problems, outcomes=OUTCOMES)


def render(report):
    """{file name: text} of the report set."""
    return {"report.json": json.dumps(report, indent=1, default=str),
            "junit.xml": junit_xml(report), "report.html": render_html(report)}


def write(report, folder):
    """The set, all three files at once or none (``conformance.report.write_set``)."""
    return conformance_report.write_set(render(report), folder)
