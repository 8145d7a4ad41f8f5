"""Speed and memory scripts, run as `python -m perf.<name>`; their figures are in BENCHMARKS.md."""

import tff_conflict

# Quiet like the binaries: `python -m perf.<name>` imports this package before the script's own
# imports.
tff_conflict.quiet()
