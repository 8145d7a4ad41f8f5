"""Experiment binaries for tff_conflict (run as `python -m experiments.<name>`)."""
