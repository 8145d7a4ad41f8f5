"""The benchmark of `python -m experiments.benchmark`, as a library.

  config.BenchmarkConfig   the grid, shared run settings, tuning settings, outputs (checked)
  methods                  methods, variants with fixed arguments, their tuning grids
  tuning                   candidates and the choice on a validation split
  engine.Engine            builds each learning process once and runs one run at a time
  grid.run_benchmark       tuning, then every reporting run, then the report
  report                   report.md, plots, RESULTS.md from the files on disk
  diagnosis                the per-method "Diagnosis" sections of the report (a registry)
  stats                    paired differences with Student-t intervals
  runs                     one run's settings, directory, summary and result file
  progress                 progress over the whole grid, with ETA

The binary `experiments/benchmark.py` only maps flags to a `BenchmarkConfig`.
"""
