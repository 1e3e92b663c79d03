"""The model regression as plain pytest (see test_models.py)."""
