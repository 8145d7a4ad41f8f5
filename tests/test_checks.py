"""`tff_conflict._checks`: one argument order `(name, value)`, normalized results, and an error
naming the argument and the value for everything outside the range."""

import math
import re

import numpy as np
import pytest

from tff_conflict import _checks


@pytest.mark.parametrize('check,good,bad,wording', [
    (_checks.check_finite, [0, -2.5, np.float32(1.5)], [math.nan, math.inf, True, '1', None],
     'x must be a finite number, got'),
    (_checks.check_nonnegative, [0, 0.0, 3, np.float64(2.0)],
     [-1e-9, math.nan, math.inf, np.bool_(True), '0', None], 'x must be a finite number >= 0, got'),
    (_checks.check_positive, [1e-300, 2, np.int64(3)], [0, 0.0, -1, math.nan, math.inf, False],
     'x must be a finite number > 0, got'),
    (_checks.check_ratio, [1, 1.0, 1e-9, np.float32(0.5)], [0, -0.5, 1.0001, math.nan, math.inf,
                                                            True, '0.5'],
     r'x must be a number in \(0, 1\], got'),
    (_checks.check_unit_interval, [0, 1, 0.5, np.float64(1.0)], [-1e-12, 1.5, math.nan, True],
     r'x must be a number in \[0, 1\], got'),
])
def test_real_checks(check, good, bad, wording):
  for value in good:
    result = check('x', value)
    assert type(result) is float and result == float(value)
  for value in bad:
    with pytest.raises(ValueError, match=wording) as info:
      check('x', value)
    assert repr(value) in str(info.value)


def test_integer_checks():
  assert _checks.check_int('n', np.int32(3), minimum=1) == 3
  assert type(_checks.check_int('n', np.int64(3))) is int
  assert _checks.check_int('n', -7) == -7
  for bad in (0, 2.0, True, '3', None):
    with pytest.raises(ValueError, match=f'n must be an integer >= 1, got {bad!r}'):
      _checks.check_int('n', bad, minimum=1)
  assert _checks.check_optional_int('n', None, minimum=1) is None
  assert _checks.check_optional_int('n', 0, minimum=0) == 0
  with pytest.raises(ValueError, match='n must be None or an integer >= 1, got 0'):
    _checks.check_optional_int('n', 0, minimum=1)
  assert _checks.check_seed('seed', None) is None
  assert _checks.check_seed('seed', -2**63) == -2**63
  for bad in (2**63, 1.0, True, np.array([1, 2])):
    with pytest.raises(ValueError, match='seed must be None or an integer in'):
      _checks.check_seed('seed', bad)


def test_choice_and_bool():
  assert _checks.check_choice('mode', 'b', ('a', 'b')) == 'b'
  for bad in ('c', None, 1, ['a']):
    with pytest.raises(ValueError, match=re.escape(f"mode must be one of 'a', 'b', got {bad!r}")):
      _checks.check_choice('mode', bad, ('a', 'b'))
  assert _checks.check_bool('flag', np.bool_(False)) is False
  for bad in (0, 1, 'True', None):
    with pytest.raises(ValueError, match=f'flag must be a Python bool, got {bad!r}'):
      _checks.check_bool('flag', bad)
