"""Function names inside TensorFlow graphs: which library functions a node calls, and renaming.

A `GraphDef` (or a `FunctionDef`'s body) refers to a function of its library by name in two ways:
as a node's op (a direct call) and in function-valued attributes (`f`, `then_branch`, `body`,
lists of branches), possibly nested in another function attribute's own attributes.
"""

from typing import Any, Iterable, Mapping


def attr_functions(attr: Any) -> list[str]:
  """The function names in one `AttrValue` (nested attributes included)."""
  found = []
  kind = attr.WhichOneof('value')
  if kind == 'func':
    found.append(attr.func.name)
    for inner in attr.func.attr.values():
      found.extend(attr_functions(inner))
  elif kind == 'list':
    for func in attr.list.func:
      found.append(func.name)
      for inner in func.attr.values():
        found.extend(attr_functions(inner))
  return found


def callees(nodes: Iterable[Any], library: Mapping[str, Any]) -> list[str]:
  """The functions of `library` that `nodes` call or name in attributes, each once, in order of
  first appearance."""
  found = []
  for node in nodes:
    found.append(node.op)
    for attr in node.attr.values():
      found.extend(attr_functions(attr))
  return [name for name in dict.fromkeys(found) if name in library]


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
