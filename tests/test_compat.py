"""tff_conflict._compat: the one-line warning when TF/TFF differ from the tested versions."""

import subprocess
import sys
import warnings

import pytest

from tff_conflict import _compat


@pytest.fixture
def unchecked(monkeypatch):
  monkeypatch.setattr(_compat, '_checked', False)


def test_warns_once_in_one_line_naming_tested_and_installed_versions(monkeypatch, unchecked):
  monkeypatch.setitem(_compat.TESTED_VERSIONS, 'tensorflow_federated', '0.0.1')
  with pytest.warns(RuntimeWarning) as record:
    _compat.check_versions()
    _compat.check_versions()
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  assert len(record) == 1
  message = str(record[0].message)
  assert '\n' not in message
  tested_tf = _compat.TESTED_VERSIONS['tensorflow']
  assert (f'tested with TF {tested_tf} and TFF 0.0.1; installed are TF {tf.__version__} and '
          f'TFF {tff.__version__}') in message


def test_silent_with_the_tested_versions(monkeypatch, unchecked):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  monkeypatch.setattr(_compat, 'TESTED_VERSIONS', {'tensorflow': tf.__version__,
                                                   'tensorflow_federated': tff.__version__})
  with warnings.catch_warnings():
    warnings.simplefilter('error')
    _compat.check_versions()


def test_importing_the_package_loads_no_compat_module():
  code = 'import sys, tff_conflict; print("tff_conflict._compat" in sys.modules)'
  result = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                          check=True, timeout=300)
  assert result.stdout.strip() == 'False'
