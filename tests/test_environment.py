"""The declared and pinned environment: pyproject.toml declares every package the code imports,
requirements.lock satisfies every declaration, and the lock keeps what speed relies on
(BUILD_NOTES.md)."""

import ast
import importlib.metadata
import os
import sys
import tomllib

from google.protobuf.internal import api_implementation
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_OWN = {'tff_conflict', 'experiments', 'perf', 'tests', 'tools'}


def _project():
  with open(os.path.join(REPO_ROOT, 'pyproject.toml'), 'rb') as f:
    return tomllib.load(f)['project']


def _declared(*extras):
  """Distribution names declared for the library plus `extras` (following self-references)."""
  project = _project()
  names, todo, seen_extras = set(), list(project['dependencies']), set()
  todo += [r for e in extras for r in project['optional-dependencies'][e]]
  while todo:
    req = Requirement(todo.pop())
    if canonicalize_name(req.name) == canonicalize_name(project['name']):
      for extra in req.extras - seen_extras:
        seen_extras.add(extra)
        todo += project['optional-dependencies'][extra]
      continue
    names.add(canonicalize_name(req.name))
  return names


def _imports(tree, lazy=False):
  """(module, lazy) for every absolute import; lazy: inside a function."""
  for node in ast.iter_child_nodes(tree):
    if isinstance(node, ast.Import):
      yield from ((alias.name, lazy) for alias in node.names)
    elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
      yield node.module, lazy
    else:
      inner = lazy or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
      yield from _imports(node, inner)


def _imported_distributions(folder, lazy_too=True):
  """{distribution: first file importing it} for the third-party imports under `folder`."""
  module_to_dists = importlib.metadata.packages_distributions()
  found = {}
  for root, _, files in os.walk(os.path.join(REPO_ROOT, folder)):
    for name in sorted(files):
      if not name.endswith('.py'):
        continue
      path = os.path.join(root, name)
      with open(path, encoding='utf-8') as f:
        tree = ast.parse(f.read())
      for module, lazy in _imports(tree):
        top = module.split('.')[0]
        if top in _OWN or top in sys.stdlib_module_names or (lazy and not lazy_too):
          continue
        dists = module_to_dists.get(top)
        assert dists, f'{path}: imports {module}, which no installed distribution provides'
        if top == 'google':   # a namespace package: google.protobuf is protobuf's
          dists = ['protobuf']
        for dist in dists:
          found.setdefault(canonicalize_name(dist), os.path.relpath(path, REPO_ROOT))
  return found


def test_the_library_declares_every_package_it_imports():
  # At module level: the dependencies; inside a function (one loader's needs): an extra.
  missing = {d: f for d, f in _imported_distributions('tff_conflict', lazy_too=False).items()
             if d not in _declared()}
  assert not missing, f'imported by tff_conflict but not in pyproject dependencies: {missing}'
  missing = {d: f for d, f in _imported_distributions('tff_conflict').items()
             if d not in _declared('leaf', 'tfds')}
  assert not missing, f'imported by tff_conflict but not declared: {missing}'


def test_binaries_benchmarks_and_tests_declare_what_they_import():
  for folder, extras in (('experiments', ('experiments',)), ('perf', ('experiments',)),
                         ('tests', ('test',))):
    missing = {d: f for d, f in _imported_distributions(folder).items()
               if d not in _declared(*extras)}
    assert not missing, f'imported under {folder}/ but not declared: {missing}'


def test_the_lock_satisfies_every_declared_requirement():
  pins = {}
  with open(os.path.join(REPO_ROOT, 'requirements.lock'), encoding='utf-8') as f:
    for line in f:
      line = line.split('#')[0].strip()
      if line:
        name, version = line.split('==')
        pins[canonicalize_name(name)] = version
  project = _project()
  requirements = project['dependencies'] + sum(project['optional-dependencies'].values(), [])
  for text in requirements:
    req = Requirement(text)
    if canonicalize_name(req.name) == canonicalize_name(project['name']):
      continue
    pinned = pins.get(canonicalize_name(req.name))
    assert pinned is not None, f'{req.name} is declared but not pinned in requirements.lock'
    assert req.specifier.contains(pinned, prereleases=True), f'lock pins {req.name}=={pinned}: {req}'


def test_experiments_are_not_installed_as_a_package():
  assert _project()['name'] == 'tff_conflict'
  with open(os.path.join(REPO_ROOT, 'pyproject.toml'), 'rb') as f:
    include = tomllib.load(f)['tool']['setuptools']['packages']['find']['include']
  assert include == ['tff_conflict*']


def test_protobuf_uses_a_compiled_backend():
  # TFF serializes a computation's graphs with protobuf on every call; the pure-Python backend
  # (protobuf 3.20.3 on Python 3.11) is markedly slower (BUILD_NOTES.md, protobuf).
  assert api_implementation.Type() in ('upb', 'cpp'), (
      f'protobuf runs its pure-Python backend ({api_implementation.Type()!r}): TFF rounds will be '
      'slow. See BUILD_NOTES.md, "Pins that deviate", protobuf.')
