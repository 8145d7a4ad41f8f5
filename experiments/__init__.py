"""Experiment binaries on tff_conflict (`python -m experiments.<name>`) and their parts."""

# Before anything imports TensorFlow: tff_conflict keeps TF's and TFF's log noise off unless
# TFF_CONFLICT_VERBOSE=1 (tff_conflict/_quiet.py).
import tff_conflict  # pylint: disable=unused-import
