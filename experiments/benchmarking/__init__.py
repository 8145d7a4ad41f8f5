"""The method comparison of `python -m experiments.benchmark` (RESULTS.md), as a library; data
flows one way: config -> plan -> grid/engine -> runs.csv -> report.

  config.BenchmarkConfig   the grid, tuning, and `ExperimentConfig`'s parts every run shares
  methods                  methods, variants with fixed arguments, their tuning grids
  plan.make_plan           the config resolved once: methods with grids, tuning tasks, runs
  tuning                   candidates and the choice on a validation split
  engine.Engine            builds each learning process once and runs one run at a time
  grid.run_benchmark       executes a plan: tuning, every reporting run, the report
  runs                     one run's settings, directory, summary and result file
  report                   report.md, plots, RESULTS.md from the files on disk
  control                  the positive control (a published effect the harness reproduces)

Statistics: `experiments.stats`; the per-method diagnoses: `experiments.diagnosis`.
"""
