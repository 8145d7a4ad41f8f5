"""perf.signals: SIGTERM at random moments of `train`'s first rounds (200 trials, slow; in the
background: `nice -n 10 python -m pytest -n 0 -m slow tests/perf/test_signals.py`) ends every run
with 143, no native crash, no dropped exception and no worker left; `native_crash` reads a
crash from an exit status or glibc's and faulthandler's messages."""

import json
import signal

import pytest

from perf import signals


@pytest.mark.parametrize('status, output, crashed', [
    (143, 'train: fedavg: interrupted after round 3 of 500; ...', False),
    (-15, '', False),   # before Python ran the binary's first line
    (0, 'round 3: test_accuracy 0.3', False),
    (134, 'free(): invalid next size (fast)\n', True),
    (-6, '', True),
    (-11, '', True),
    (143, 'Fatal Python error: Aborted\n', True),
])
def test_native_crash_reads_the_status_and_the_messages(status, output, crashed):
  assert signals.native_crash(status, output, signal.SIGTERM) == crashed


@pytest.mark.slow
def test_sigterm_in_the_first_rounds_ends_with_143_without_a_native_crash():
  summary = signals.first_rounds(200, seed=0)
  assert summary['unexpected'] == [], json.dumps(summary, indent=1)[-30000:]
  assert summary['statuses'] == {128 + signal.SIGTERM: 200}
