"""A terminal progress bar for training rounds: round, elapsed time, ETA, latest accuracy.

On a TTY the bar redraws one line in place (carriage return); when the stream is not a TTY (a
pipe, a log file, CI) it prints one plain line per round instead, so logs stay readable.
"""

import sys
import time
from typing import Optional, TextIO


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
    clock: returns seconds (tests pass a fake clock).
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
    self._width = width
    self._clock = clock
    self._start = clock()
    self._accuracy: Optional[float] = None
    isatty = getattr(self._stream, 'isatty', None)
    self._tty = bool(isatty and isatty())
    self._drawn = False

  @property
  def is_tty(self) -> bool:
    return self._tty

  def eta(self, round_num: int) -> Optional[float]:
    """Seconds left, extrapolated from the mean time of the rounds done in this run."""
    done = round_num - self._first
    if done <= 0:
      return None
    return (self._clock() - self._start) / done * (self._total - round_num)

  def line(self, round_num: int, extra: str = '') -> str:
    """The text shown after `round_num`."""
    elapsed = self._clock() - self._start
    acc = '-' if self._accuracy is None else f'{self._accuracy:.4f}'
    text = (f'{self._label}round {round_num:>{len(str(self._total))}d}/{self._total}  '
            f'elapsed {format_duration(elapsed)}  ETA {format_duration(self.eta(round_num))}  '
            f'test_accuracy {acc}')
    if extra:
      text += f'  {extra}'
    if self._tty:
      filled = int(self._width * round_num / self._total)
      text = f'[{"#" * filled}{"." * (self._width - filled)}] {text}'
    return text

  def update(self, round_num: int, *, accuracy: Optional[float] = None, extra: str = '') -> None:
    """Shows the state after `round_num`; `accuracy` (if given) becomes the latest accuracy."""
    if accuracy is not None:
      self._accuracy = accuracy
    text = self.line(round_num, extra)
    if self._tty:
      self._stream.write('\r\x1b[2K' + text)
      self._drawn = True
    else:
      self._stream.write(text + '\n')
    self._stream.flush()

  def close(self) -> None:
    """Ends the in-place line on a TTY."""
    if self._tty and self._drawn:
      self._stream.write('\n')
      self._stream.flush()
      self._drawn = False
