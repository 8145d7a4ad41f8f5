"""Command-line tools run from a checkout (`python tools/<name>.py`); importable for tests."""
