"""`PeakRss`: the peak resident memory of this process and of its TFF workers, for the scripts."""

import threading

import psutil

from tff_conflict import runtime


class PeakRss:
  """Samples, in a thread every `interval` seconds, the RSS of this process (`own`) and the sum
  over its running `worker_binary` processes (`workers`).

  Attributes (bytes): `base`, the (own, workers) sample on entering the block; `peak`, the
  largest of each; `peak_total`, the largest sum of the two in one sample.
  """

  def __init__(self, interval: float = 0.005):
    self._interval = interval
    self._stop = threading.Event()
    self._thread = None
    self.base = self.peak = (0, 0)
    self.peak_total = 0

  @staticmethod
  def _sample() -> tuple[int, int]:
    own = psutil.Process().memory_info().rss
    workers = 0
    for pid in runtime.worker_pids():
      try:
        workers += psutil.Process(pid).memory_info().rss
      except psutil.Error:  # ended between listing and reading
        pass
    return own, workers

  def _record(self, sample: tuple[int, int]) -> None:
    self.peak = (max(self.peak[0], sample[0]), max(self.peak[1], sample[1]))
    self.peak_total = max(self.peak_total, sum(sample))

  def __enter__(self) -> 'PeakRss':
    self.base = self.peak = self._sample()
    self.peak_total = sum(self.base)
    self._stop.clear()

    def loop():
      while not self._stop.wait(self._interval):
        self._record(self._sample())

    self._thread = threading.Thread(target=loop, daemon=True)
    self._thread.start()
    return self

  def __exit__(self, *exc) -> None:
    self._stop.set()
    self._thread.join()
    self._record(self._sample())

  def extra_gb(self) -> tuple[float, float]:
    """The peaks' growth over `base` in GB, as (own, workers)."""
    return tuple((p - b) / 1e9 for p, b in zip(self.peak, self.base))
