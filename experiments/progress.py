"""A terminal progress bar for training rounds: round, elapsed time, ETA, latest accuracy.

On a TTY the bar is `tqdm`'s, redrawn in place, with its ETA from the mean round time of this run
(`smoothing=0`); when the stream is not a TTY (a pipe, a log file, CI) it prints one plain line per
round instead, so logs stay readable.
"""

import sys
import time
from typing import Optional, TextIO

import tqdm


def format_duration(seconds: Optional[float]) -> str:
  """`h:mm:ss` or `m:ss`; `?` for None."""
  if seconds is None:
    return '?'
  seconds = int(round(max(0.0, seconds)))
  hours, rest = divmod(seconds, 3600)
  minutes, secs = divmod(rest, 60)
  return f'{hours}:{minutes:02d}:{secs:02d}' if hours else f'{minutes}:{secs:02d}'


class ProgressBar:
  """Progress over rounds `first_round + 1 .. total_rounds`.

  Args:
    total_rounds: the last round.
    first_round: rounds already done (a resumed run starts after them).
    label: printed before the bar (e.g. the algorithm's name).
    stream: where to write; `sys.stdout` by default.
    width: characters of the bar on a TTY.
    clock: returns seconds (tests pass a fake clock); the plain lines' times and ETA.
  """

  def __init__(self, total_rounds: int, *, first_round: int = 0, label: str = '',
               stream: Optional[TextIO] = None, width: int = 24, clock=time.monotonic):
    if total_rounds < 1:
      raise ValueError(f'total_rounds must be >= 1, got {total_rounds}')
    if not 0 <= first_round <= total_rounds:
      raise ValueError(f'first_round must be in [0, {total_rounds}], got {first_round}')
    self._total = total_rounds
    self._first = first_round
    self._label = f'{label} ' if label else ''
    self._stream = stream if stream is not None else sys.stdout
    self._clock = clock
    self._start = clock()
    self._accuracy: Optional[float] = None
    isatty = getattr(self._stream, 'isatty', None)
    self._tty = bool(isatty and isatty())
    self._bar: Optional[tqdm.tqdm] = None
    if self._tty:
      self._bar = tqdm.tqdm(
          total=total_rounds, initial=first_round, file=self._stream, desc=self._label or None,
          smoothing=0, mininterval=0, leave=True, dynamic_ncols=True,
          bar_format=('{desc}[{bar:%d}] round {n_fmt}/{total_fmt}  elapsed {elapsed}  '
                      'ETA {remaining}{postfix}') % width)

  @property
  def is_tty(self) -> bool:
    return self._tty

  def eta(self, round_num: int) -> Optional[float]:
    """Seconds left, extrapolated from the mean time of the rounds done in this run."""
    done = round_num - self._first
    if done <= 0:
      return None
    return (self._clock() - self._start) / done * (self._total - round_num)

  def _accuracy_text(self) -> str:
    return f'test_accuracy {"-" if self._accuracy is None else f"{self._accuracy:.4f}"}'

  def line(self, round_num: int, extra: str = '') -> str:
    """The plain line printed after `round_num` when the stream is not a TTY."""
    elapsed = self._clock() - self._start
    text = (f'{self._label}round {round_num:>{len(str(self._total))}d}/{self._total}  '
            f'elapsed {format_duration(elapsed)}  ETA {format_duration(self.eta(round_num))}  '
            f'{self._accuracy_text()}')
    if extra:
      text += f'  {extra}'
    return text

  def update(self, round_num: int, *, accuracy: Optional[float] = None, extra: str = '') -> None:
    """Shows the state after `round_num`; `accuracy` (if given) becomes the latest accuracy."""
    if accuracy is not None:
      self._accuracy = accuracy
    if self._bar is not None:
      postfix = self._accuracy_text() + (f'  {extra}' if extra else '')
      self._bar.set_postfix_str(postfix, refresh=False)
      self._bar.update(round_num - self._bar.n)
      return
    self._stream.write(self.line(round_num, extra) + '\n')
    self._stream.flush()

  def close(self) -> None:
    """Ends the bar's line on a TTY."""
    if self._bar is not None:
      self._bar.close()
      self._bar = None
