"""docs/methods.md's SCAFFOLD example (a user's own TFF loop keeping the client controls with
`ClientControls`) runs as written and trains."""

import os
import re

from tff_conflict import runtime

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SECTION = '## SCAFFOLD'


def methods_example() -> str:
  """The first ```python block of docs/methods.md's SCAFFOLD section."""
  with open(os.path.join(REPO_ROOT, 'docs', 'methods.md'), encoding='utf-8') as f:
    text = f.read()
  assert SECTION in text
  section = text[text.index(SECTION) + len(SECTION):]
  section = section[:section.index('\n## ')]
  match = re.search(r'^```python\n(.*?)^```$', section, flags=re.DOTALL | re.MULTILINE)
  assert match, 'the SCAFFOLD section has no python code block'
  return match.group(1)


def test_the_documented_loop_runs_and_keeps_the_controls(monkeypatch):
  code = methods_example()
  for part in ('learning.build_scaffold(', 'ClientControls.for_process(', 'controls.for_cohort(',
               'controls.update(', 'controls.save('):
    assert part in code, part
  # The test session has installed the local context already (tests/conftest.py).
  monkeypatch.setattr(runtime, 'set_local_context', lambda *a, **kw: None)
  printed = []
  namespace = {'__name__': 'scaffold_example', 'print': lambda *args: printed.append(args)}
  exec(compile(code, 'docs/methods.md', 'exec'), namespace)  # pylint: disable=exec-used
  assert [args[0] for args in printed] == [1, 2, 3]
  controls = namespace['controls']
  assert controls.version == 3
  taken_part = [c for c in controls.client_ids if controls.has_participated(c)]
  assert 5 <= len(taken_part) <= 15
  assert all(abs(controls.control(c)).sum() > 0 for c in taken_part)
