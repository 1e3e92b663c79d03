"""Makes ``pytest --pyargs devicekit.models.suite --device NAME`` work: the
options (--device, --plugin) and the device under test are the conformance
suite's (devicekit.conformance.pytest_plugin)."""

pytest_plugins = ["devicekit.conformance.pytest_plugin"]
