"""`DataError`: a check on the clients' data that failed inside a computation, said in one line
instead of the runtime's dump (TFF's C++ runtime: a 2 KB gRPC `_InactiveRpcError`; the
in-process runner: a TensorFlow `InvalidArgumentError` full of node names)."""

import functools
import re
from typing import Any, Callable, Optional

# The messages of tff_conflict's own checks on client data (`tf.debugging.assert_*` in a client
# computation) -> what the checked values are: `tff_conflict.learning.models.label_checked`.
DATA_CHECKS = {'labels must be class indices': "the batch's labels"}

_ASSERTION = re.compile(r'assertion failed: \[(?P<message>.*?)\] \[(?P<condition>Condition [^\]]*)'
                        r'\](?: \[x \([^)]*\) = \] \[(?P<values>[^\]]*)\])?', re.S)


class DataError(ValueError):
  """A client's data failed one of tff_conflict's checks while a round ran (e.g. a label outside
  `[0, num_classes)`); the message is the check's, with the values that failed it."""


def data_error(error: BaseException) -> Optional[DataError]:
  """The `DataError` that `error` (raised by a runtime) carries, or None."""
  match = _ASSERTION.search(str(error))
  check = None if match is None else next(
      (c for c in DATA_CHECKS if match['message'].startswith(c)), None)
  if check is None:
    return None
  message = ' '.join(match['message'].split()).rstrip('.')
  values = ' '.join(match['values'].split()) if match['values'] else ''
  found = f'; {DATA_CHECKS[check]}: [{values}]' if values else ''
  return DataError(f'{message}{found}')


def translating(call: Callable[..., Any]) -> Callable[..., Any]:
  """`call`, raising `DataError` (without the runtime's exception chained) when it fails on a
  data check."""

  @functools.wraps(call)
  def wrapped(*args, **kwargs):
    try:
      return call(*args, **kwargs)
    except Exception as e:  # pylint: disable=broad-except
      clean = data_error(e)
      if clean is None:
        raise
    raise clean

  wrapped.translates_data_errors = True
  return wrapped
