"""Makes ``pytest --pyargs devicekit.conformance_tests --device NAME`` work:
the options and the case parametrisation live in devicekit.conformance.pytest_plugin."""

pytest_plugins = ["devicekit.conformance.pytest_plugin"]
