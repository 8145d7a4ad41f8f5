"""Experiment binaries on tff_conflict (`python -m experiments.<name>`) and their parts."""
