"""DeviceKit conformance suite (installed as devicekit.conformance_tests)."""
