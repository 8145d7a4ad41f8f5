"""The repository stands on its own: no tracked file refers to a path outside it (a sibling
`shared/` folder with the project's working notes or papers) or to a tracker issue number.

What a reader needs lives in the repository: the methods and decisions in docs/methods.md, the
design in docs/design.md, measurements in BENCHMARKS.md.
"""

import os
import re
import shutil
import subprocess

import pytest

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Built from parts so that this file does not match itself.
_FORBIDDEN = re.compile('|'.join([
    r'\.\./shared',                               # a path into a sibling folder
    r'shared/(' + 'SP' + r'EC|TFF_NOTES|papers)',  # the working notes and papers
    r'[Ii]ssue [0-9]',                            # a tracker issue number
    r'\b' + 'SP' + r'EC\b',                       # the working specification, by name
]))


def _tracked_files():
  if shutil.which('git') is None:
    pytest.skip('git is not installed')
  try:
    out = subprocess.run(['git', 'ls-files', '-z'], cwd=REPO_ROOT, capture_output=True,
                         check=True, timeout=60).stdout
  except (subprocess.CalledProcessError, OSError) as e:
    pytest.skip(f'not a git checkout ({e})')
  return [name for name in out.decode('utf-8').split('\0') if name]


def offending_lines(paths):
  """`path:line: text` for every line of the given files that matches the forbidden patterns."""
  found = []
  for path in paths:
    full = os.path.join(REPO_ROOT, path)
    if not os.path.isfile(full):   # deleted in the working tree, not yet committed
      continue
    with open(full, 'rb') as f:
      data = f.read()
    if b'\0' in data:   # binary
      continue
    for number, line in enumerate(data.decode('utf-8', errors='replace').splitlines(), 1):
      if _FORBIDDEN.search(line):
        found.append(f'{path}:{number}: {line.strip()}')
  return found


def test_patterns_catch_what_they_should():
  hits = ['see ../' + 'shared/notes.md', 'shared/' + 'TFF_NOTES.md', 'as in ' + 'SP' + 'EC 2b',
          'fixed in iss' + 'ue 14', 'Iss' + 'ue 3 asked']
  misses = ['tf.TensorSpec([None])', 'LEAF_SIGNATURES', 'the Non-IID Issue in Heterogeneous',
            'TFF issue tracker #1739', 'shared fixtures', 'docs/methods.md, FedGH']
  assert all(_FORBIDDEN.search(text) for text in hits)
  assert not any(_FORBIDDEN.search(text) for text in misses)


def test_no_tracked_file_refers_outside_the_repository():
  bad = offending_lines(_tracked_files())
  assert not bad, ('tracked files refer to paths outside the repository or to tracker issues '
                   '(explain in the repository\'s own words; cite docs/methods.md or '
                   'docs/design.md):\n' + '\n'.join(bad))
