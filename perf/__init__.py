"""Speed and memory scripts (`python -m perf.<name>`); their figures are in BENCHMARKS.md.

Like the experiment binaries, a script here runs quietly: importing this package (which
`python -m perf.<name>` does before the script's own imports) calls `tff_conflict.quiet()`.
"""

import tff_conflict

tff_conflict.quiet()
