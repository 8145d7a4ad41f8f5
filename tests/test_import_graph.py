"""The import graph of `tff_conflict/` and `experiments/`, imports inside functions included: no
cycle, the library imports no experiment code, and no arrow points back up to a binary, the
presets or a module that builds on the benchmark's machinery."""

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = ('tff_conflict', 'experiments')


def _modules(root: pathlib.Path = ROOT) -> dict[str, pathlib.Path]:
  out = {}
  for package in PACKAGES:
    for path in sorted((root / package).rglob('*.py')):
      name = '.'.join(path.relative_to(root).with_suffix('').parts)
      out[name.removesuffix('.__init__')] = path
  return out


def import_graph(root: pathlib.Path = ROOT) -> dict[str, set[str]]:
  """module -> the project modules it imports anywhere in its file (`from a import b` counts as
  `a.b` when that is a module, else `a`)."""
  modules = _modules(root)

  def resolve(name):
    while name and name not in modules:
      name = name.rpartition('.')[0]
    return name or None

  graph = {}
  for name, path in modules.items():
    package = name if path.name == '__init__.py' else name.rpartition('.')[0]
    targets = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
      if isinstance(node, ast.Import):
        targets.update(resolve(a.name) for a in node.names)
      elif isinstance(node, ast.ImportFrom):
        base = node.module or ''
        if node.level:
          parts = package.split('.')[:len(package.split('.')) - node.level + 1]
          base = '.'.join(parts + ([base] if base else []))
        targets.update(resolve(f'{base}.{a.name}') if f'{base}.{a.name}' in modules
                       else resolve(base) for a in node.names)
    graph[name] = {t for t in targets if t and t != name}
  return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
  """The strongly connected components of more than one module (Tarjan's algorithm)."""
  index, low, stack, on_stack, out = {}, {}, [], set(), []

  def visit(v):
    index[v] = low[v] = len(index)
    stack.append(v)
    on_stack.add(v)
    for w in sorted(graph[v]):
      if w not in index:
        visit(w)
        low[v] = min(low[v], low[w])
      elif w in on_stack:
        low[v] = min(low[v], index[w])
    if low[v] == index[v]:
      component = []
      while not component or component[-1] != v:
        component.append(stack.pop())
        on_stack.discard(component[-1])
      if len(component) > 1:
        out.append(sorted(component))

  for v in sorted(graph):
    if v not in index:
      visit(v)
  return out


def _entry_points(root: pathlib.Path = ROOT) -> set[str]:
  """The binaries (modules with a `__main__` block) and their presets."""
  return {name for name, path in _modules(root).items()
          if "if __name__ == '__main__'" in path.read_text()} | {'experiments.presets'}


def test_the_graph_sees_imports_inside_functions(tmp_path):
  for path, text in {'experiments/__init__.py': '', 'experiments/a.py': 'import os\n',
                     'experiments/b.py': 'def f():\n  from experiments import a\n',
                     'tff_conflict/__init__.py': 'from . import c\n',
                     'tff_conflict/c.py': 'from experiments import b\n'}.items():
    (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / path).write_text(text)
  graph = import_graph(tmp_path)
  assert graph['experiments.b'] == {'experiments.a'}
  assert graph['tff_conflict'] == {'tff_conflict.c'}
  assert graph['tff_conflict.c'] == {'experiments.b'}
  assert cycles({'a': {'b'}, 'b': {'c'}, 'c': {'a'}, 'd': {'a'}}) == [['a', 'b', 'c']]
  assert cycles(graph) == []


def test_no_import_cycle():
  assert cycles(import_graph()) == []


def test_the_library_imports_no_experiment_code():
  assert {(m, t) for m, ts in import_graph().items() if m.startswith('tff_conflict')
          for t in ts if t.startswith('experiments')} == set()


def test_no_arrow_back_up():
  """Only a binary imports a binary or the presets; and the benchmark's machinery
  (`experiments.benchmarking`) imports no module of `experiments/` that builds on it (as the
  binaries' plotting once did: the plots are the report's, in `benchmarking/plots.py`)."""
  graph = import_graph()
  entries = _entry_points()
  assert {(m, t) for m, ts in graph.items() if m not in entries
          for t in ts if t in entries} == set()
  inside = lambda m: m.startswith('experiments.benchmarking')
  above = {m for m, ts in graph.items() if m.startswith('experiments.') and not inside(m)
           and any(inside(t) for t in ts)}
  assert {(m, t) for m, ts in graph.items() if inside(m) for t in ts if t in above} == set()


def test_every_module_is_seen():
  names = import_graph()
  assert {'tff_conflict', 'experiments.benchmarking.plan', 'tff_conflict.data.regimes'} <= set(
      names)
  assert len(names) == sum(1 for p in PACKAGES for _ in (ROOT / p).rglob('*.py'))
