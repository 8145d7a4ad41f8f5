"""Renaming the functions a TensorFlow graph calls: as node ops (direct calls) and in
function-valued attributes (`f`, `then_branch`, `body`, lists of branches, nested ones)."""

from typing import Any, Iterable, Mapping


def rename_attr(attr: Any, renames: Mapping[str, str]) -> None:
  """Renames, in place, the functions that `attr` names (those in `renames`)."""
  kind = attr.WhichOneof('value')
  if kind == 'func':
    attr.func.name = renames.get(attr.func.name, attr.func.name)
    for inner in attr.func.attr.values():
      rename_attr(inner, renames)
  elif kind == 'list':
    for func in attr.list.func:
      func.name = renames.get(func.name, func.name)
      for inner in func.attr.values():
        rename_attr(inner, renames)


def rename_nodes(nodes: Iterable[Any], renames: Mapping[str, str]) -> None:
  """Renames, in place, the functions that `nodes` call (ops) or name in attributes."""
  for node in nodes:
    node.op = renames.get(node.op, node.op)
    for attr in node.attr.values():
      rename_attr(attr, renames)
