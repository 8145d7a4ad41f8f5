"""Registers `experiments.diagnosis` with the benchmark (listed in `diagnosis.DIAGNOSIS_MODULES`):
its variants as methods (`fedga_soft`, `fedld_preserve_norms`, ...), its run summary columns in
runs.csv, and one diagnosis section per method of the report."""

from experiments import diagnosis

diagnosis.register_with_benchmark()
