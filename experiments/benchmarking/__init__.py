"""The method comparison of `python -m experiments.benchmark` as a library: config -> plan ->
grid/engine -> runs.csv -> report. Its modules: docs/design.md, "The method comparison".
"""
