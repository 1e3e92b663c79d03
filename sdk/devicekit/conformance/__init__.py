"""The conformance runner: runs the suite in ``devicekit.conformance_tests``
against one plugin device and writes the reports."""
