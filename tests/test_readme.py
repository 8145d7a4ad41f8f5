"""README.md's "Using the library" example runs exactly as written, in its own Python process,
prints nothing on stderr (it calls `tff_conflict.quiet()`) and leaves no TFF worker
behind."""

import os
import re
import subprocess
import sys
import uuid

from tests import conftest

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SECTION = '## Using the library'


def readme_example() -> str:
  """The first ```python block of README.md's "Using the library" section."""
  with open(os.path.join(REPO_ROOT, 'README.md'), encoding='utf-8') as f:
    text = f.read()
  assert SECTION in text, f'README.md has no "{SECTION}" section'
  section = text[text.index(SECTION) + len(SECTION):]
  section = section[:section.index('\n## ')] if '\n## ' in section else section
  match = re.search(r'^```python\n(.*?)^```$', section, flags=re.DOTALL | re.MULTILINE)
  assert match, f'README.md\'s "{SECTION}" section has no python code block'
  return match.group(1)


def test_example_is_complete():
  code = readme_example()
  compile(code, 'README.md', 'exec')
  for part in ('runtime.set_local_context()', 'data.digits(', 'tf.keras.', 'learning.build_',
               'tff.learning.algorithms.build_weighted_fed_avg', 'aggregators.',
               'process.next(', 'evaluation.evaluate(',
               'DominantGradientCorrectionFactory(weights_are_losses=True)'):
    assert part in code, part


def test_example_runs_and_leaves_no_worker(tmp_path):
  script = tmp_path / 'readme_example.py'
  script.write_text(readme_example(), encoding='utf-8')
  token = uuid.uuid4().hex
  # No TF_CPP_MIN_LOG_LEVEL: the example's own `tff_conflict.quiet()` keeps the logs out.
  env = {k: v for k, v in os.environ.items() if k != 'TF_CPP_MIN_LOG_LEVEL'}
  env['TFF_CONFLICT_TEST_TOKEN'] = token
  result = subprocess.run([sys.executable, str(script)], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
  assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
  assert result.stderr == '', result.stderr[-4000:]   # no TF/TFF log noise, no teardown traceback
  lines = result.stdout.splitlines()
  assert sum('test accuracy' in line for line in lines) == 3, result.stdout
  assert sum('conflicting pairs' in line for line in lines) == 9, result.stdout
  assert conftest.workers_left(token) == []


def test_readme_stays_short():
  # A short generated table stands for the results; the rest lives in RESULTS.md and docs/.
  assert os.path.getsize(os.path.join(REPO_ROOT, 'README.md')) <= 8192
