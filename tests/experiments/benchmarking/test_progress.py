"""Progress over the grid: rounds, skipped runs leave the total, ETA from rounds run."""

import io

from experiments.benchmarking import progress


class _Clock:
  def __init__(self):
    self.now = 0.0

  def __call__(self):
    return self.now


def test_plain_lines_total_and_eta():
  stream, clock = io.StringIO(), _Clock()
  bar = progress.GridProgress(30, stream=stream, min_interval=10.0, clock=clock)
  bar.start_run(10, 'run a')
  for _ in range(10):
    clock.now += 2.0
    bar.tick()
  bar.end_run()
  assert bar.done == 10 and bar.total == 30
  assert bar.eta() == 40.0  # 2 s per round, 20 rounds left
  bar.start_run(10, 'run b (finished already)')
  bar.end_run()
  assert bar.total == 20 and bar.eta() == 20.0
  bar.start_run(10, 'run c fails after 3 rounds')
  for _ in range(3):
    clock.now += 2.0
    bar.tick()
  bar.end_run()
  assert bar.total == 13
  bar.close()
  lines = stream.getvalue().splitlines()
  assert lines[0].startswith('[benchmark] 1/30 rounds (3%)')
  assert lines[-1].startswith('[benchmark] 13/13 rounds (100%)') and 'ETA 0:00' in lines[-1]
  assert len(lines) <= 6  # at most one line per 10 s, plus the last


def test_disabled_writes_nothing():
  stream = io.StringIO()
  bar = progress.GridProgress(5, enabled=False, stream=stream)
  bar.start_run(5)
  bar.tick()
  bar.end_run()
  bar.close()
  assert stream.getvalue() == ''
