"""The progress bar: plain lines off a TTY, an in-place bar on one, ETA from the mean round."""

import io

import pytest

from experiments import progress


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
  bar = progress.ProgressBar(4, stream=out, clock=clock, label='fedavg')
  clock.now += 10
  bar.update(1, accuracy=0.5, extra='train_loss 1.0000')
  clock.now += 10
  bar.update(2)
  bar.close()
  lines = out.getvalue().splitlines()
  assert lines == [
      'fedavg round 1/4  elapsed 0:10  ETA 0:30  test_accuracy 0.5000  train_loss 1.0000',
      'fedavg round 2/4  elapsed 0:20  ETA 0:20  test_accuracy 0.5000']
  assert '\r' not in out.getvalue()


def test_bar_redraws_in_place_on_a_tty_and_ends_the_line():
  out = _Tty()
  bar = progress.ProgressBar(4, first_round=1, stream=out, width=4, label='fedgh')
  assert bar.is_tty
  bar.update(2, accuracy=0.25, extra='train_loss 1.0000')
  bar.update(4)
  bar.close()
  text = out.getvalue()
  draws = text.split('\r')[1:]
  assert draws[0].startswith('fedgh [#') and 'round 1/4' in draws[0]  # resumed after round 1
  assert 'round 2/4' in draws[1] and 'test_accuracy 0.2500  train_loss 1.0000' in draws[1]
  assert draws[-1].startswith('fedgh [####] round 4/4') and 'test_accuracy 0.2500' in draws[-1]
  assert text.endswith('\n') and text.count('\n') == 1


def test_eta_counts_only_rounds_of_this_run_after_resume():
  clock = _FakeClock()
  bar = progress.ProgressBar(10, first_round=6, stream=io.StringIO(), clock=clock)
  assert bar.eta(6) is None
  clock.now += 8
  assert bar.eta(8) == pytest.approx(8.0)  # 4 s per round, 2 rounds left


@pytest.mark.parametrize('seconds, text', [(None, '?'), (0, '0:00'), (61.4, '1:01'),
                                           (3725, '1:02:05')])
def test_format_duration(seconds, text):
  assert progress.format_duration(seconds) == text


def test_bad_arguments():
  with pytest.raises(ValueError, match='total_rounds'):
    progress.ProgressBar(0)
  with pytest.raises(ValueError, match='first_round'):
    progress.ProgressBar(3, first_round=4)
