"""Every conformance case as one pytest test (the same registry the CLI runs)."""

from devicekit.conformance.pytest_plugin import check


def test_case(conformance_case, request):
    check(conformance_case, request.config)
