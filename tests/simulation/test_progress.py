"""Progress: plain lines off a TTY, an in-place bar on one, ETA from the mean round, a grid's
runs reconciling the total."""

import io

import pytest

from tff_conflict.simulation import progress


class _FakeClock:

  def __init__(self):
    self.now = 100.0

  def __call__(self):
    return self.now


class _Tty(io.StringIO):

  def isatty(self):
    return True


def test_plain_lines_when_not_a_tty():
  clock, out = _FakeClock(), io.StringIO()
  bar = progress.Progress(4, stream=out, clock=clock, label='fedavg')
  clock.now += 10
  bar.tick(postfix='test_accuracy 0.5000  train_loss 1.0000')
  clock.now += 10
  bar.tick(postfix='test_accuracy 0.5000')
  bar.close()
  lines = out.getvalue().splitlines()
  assert lines == [
      'fedavg round 1/4  elapsed 0:10  ETA 0:30  test_accuracy 0.5000  train_loss 1.0000',
      'fedavg round 2/4  elapsed 0:20  ETA 0:20  test_accuracy 0.5000']
  assert '\r' not in out.getvalue()


def test_bar_redraws_in_place_on_a_tty_and_ends_the_line():
  out = _Tty()
  bar = progress.Progress(4, done=1, stream=out, width=4, label='fedgh')
  bar.tick(postfix='test_accuracy 0.2500  train_loss 1.0000')
  bar.tick()
  bar.tick()
  bar.close()
  text = out.getvalue()
  draws = text.split('\r')[1:]
  assert draws[0].startswith('fedgh [#') and 'round 1/4' in draws[0]  # resumed after round 1
  assert any('round 2/4' in d and 'test_accuracy 0.2500  train_loss 1.0000' in d for d in draws)
  assert draws[-1].startswith('fedgh [####] round 4/4') and 'test_accuracy 0.2500' in draws[-1]
  assert text.endswith('\n') and text.count('\n') == 1


def test_eta_counts_only_rounds_of_this_run_after_resume():
  clock = _FakeClock()
  bar = progress.Progress(10, done=6, stream=io.StringIO(), clock=clock)
  assert bar.eta() is None
  clock.now += 8
  bar.tick()
  bar.tick()
  assert bar.eta() == pytest.approx(8.0)  # 4 s per round, 2 rounds left


def test_eta_leaves_out_units_skipped_as_done_before():
  # A resumed grid: 6 runs found on disk at once, then 2 run in 8 s; 4 left at 4 s each.
  clock = _FakeClock()
  bar = progress.Progress(12, stream=io.StringIO(), clock=clock, unit='run')
  for _ in range(6):
    bar.tick(skipped=True)
  assert bar.eta() is None and bar.done == 6
  clock.now += 8
  bar.tick()
  bar.tick()
  assert bar.eta() == pytest.approx(16.0)
  tty = progress.Progress(12, stream=_Tty(), unit='run')   # tqdm's rate: (n - initial) / elapsed
  for _ in range(6):
    tty.tick(skipped=True)
  tty.tick()
  shown = tty._bar.format_dict  # pylint: disable=protected-access
  assert (shown['n'], shown['initial']) == (7, 6)
  tty.close()


def test_a_grid_of_runs_rate_limits_plain_lines_and_shows_the_last():
  stream, clock = io.StringIO(), _FakeClock()
  bar = progress.Progress(30, label='[benchmark]', stream=stream, min_interval=10.0, clock=clock,
                          unit='run')
  for i in range(12):
    clock.now += 2.0
    bar.tick(postfix=f'run {i} done')
  assert bar.eta() == pytest.approx(36.0)  # 2 s per run, 18 runs left
  bar.total = 13   # the plan firmed up
  bar.tick(postfix='run 12 done')
  bar.close()
  lines = stream.getvalue().splitlines()
  assert lines[0] == '[benchmark] run  1/30  elapsed 0:02  ETA 0:58  run 0 done'
  assert lines[-1].startswith('[benchmark] run 13/13') and 'ETA 0:00' in lines[-1]
  assert 'run 12 done' in lines[-1]
  assert len(lines) <= 5  # at most one line per 10 s, plus the last


def test_disabled_writes_nothing():
  stream = io.StringIO()
  bar = progress.Progress(5, enabled=False, stream=stream)
  bar.tick()
  bar.close()
  assert stream.getvalue() == ''


@pytest.mark.parametrize('seconds, text', [(None, '?'), (0, '0:00'), (61.4, '1:01'),
                                           (3725, '1:02:05')])
def test_format_duration(seconds, text):
  assert progress.format_duration(seconds) == text


def test_bad_arguments():
  with pytest.raises(ValueError, match='total'):
    progress.Progress(-1)
  with pytest.raises(ValueError, match='done'):
    progress.Progress(3, done=4)
