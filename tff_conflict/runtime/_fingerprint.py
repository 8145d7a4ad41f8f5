"""A fingerprint of a TFF computation that does not depend on how TensorFlow numbered its names.

TensorFlow names the functions of a traced graph's library with a process-wide counter
(`cond_true_9504`, `__inference_next_fn_9644`, `while_cond_4918`), and the same counter appears in
argument names (`while_cond_4918___redundant_placeholder0`) and in function attributes that name
other functions (`forward_function_name`). The same learning process therefore serializes to
different bytes depending on what the process traced before it. `fingerprint` hashes a
canonical copy of the computation instead, in which every TensorFlow graph is rewritten as:

  - every library function is renamed after the SHA-256 of its canonical body (a Merkle hash:
    functions it calls are renamed first, so a call names its callee's content), and every
    reference to it (a node's op, a function-valued attribute) follows;
  - inside a function, its input and output arguments are renamed by position (`$i0`, `$o0`:
    names no node can have);
  - a function's own string attributes that name a library function (`forward_function_name`,
    `backward_function_name`: metadata linking a gradient pair) are blanked;
  - the library is sorted by the new names.

Each rewrite is a bijection within a graph (renaming) or drops metadata that TensorFlow does not
execute, so two computations with equal fingerprints run the same TensorFlow programs with the
same TFF structure around them. A library whose functions call each other in a cycle (which
TensorFlow does not run) is hashed as it is.
"""

import hashlib
from typing import Any

from tensorflow.core.framework import graph_pb2

from tensorflow_federated.proto.v0 import computation_pb2 as pb
from tensorflow_federated.python.tensorflow_libs import serialization_utils

from tff_conflict.runtime import _function_names


class _Cycle(Exception):
  """The library's functions call each other in a cycle."""


def fingerprint(computation_proto: pb.Computation) -> bytes:
  """The SHA-256 of `computation_proto` with its TensorFlow graphs canonicalized (module
  docstring)."""
  canonical = pb.Computation()
  canonical.CopyFrom(computation_proto)
  _canonicalize_graphs(canonical)
  return hashlib.sha256(canonical.SerializeToString(deterministic=True)).digest()


def _canonicalize_graphs(computation: pb.Computation) -> None:
  """Rewrites, in place, the graph of every TensorFlow computation inside `computation`."""
  stack = [computation]
  while stack:
    comp = stack.pop()
    kind = comp.WhichOneof('computation')
    if kind == 'tensorflow':
      graph_def = serialization_utils.unpack_graph_def(comp.tensorflow.graph_def)
      try:
        graph_def = canonical_graph_def(graph_def)
      except _Cycle:
        continue
      comp.tensorflow.graph_def.value = graph_def.SerializeToString(deterministic=True)
    elif kind == 'lambda':
      stack.append(getattr(comp, 'lambda').result)
    elif kind == 'block':
      stack.extend(local.value for local in comp.block.local)
      stack.append(comp.block.result)
    elif kind == 'call':
      stack.append(comp.call.function)
      if comp.call.HasField('argument'):
        stack.append(comp.call.argument)
    elif kind == 'struct':
      stack.extend(element.value for element in comp.struct.element)
    elif kind == 'selection':
      stack.append(comp.selection.source)
    # intrinsic, data, reference, placement, literal, xla: no TensorFlow graph inside


def canonical_graph_def(graph_def: graph_pb2.GraphDef) -> graph_pb2.GraphDef:
  """A copy of `graph_def` with its library canonicalized (module docstring).

  Raises:
    _Cycle: if library functions call each other in a cycle.
  """
  functions = {f.signature.name: f for f in graph_def.library.function}
  names: dict[str, str] = {}
  in_progress: set[str] = set()

  def canonical_name(name: str) -> str:
    if name in names:
      return names[name]
    if name in in_progress:
      raise _Cycle(name)
    in_progress.add(name)
    function = functions[name]
    for callee in _function_names.callees(function.node_def, functions):
      canonical_name(callee)
    body = _canonical_function(function, names, functions)
    in_progress.discard(name)
    names[name] = 'f' + hashlib.sha256(body.SerializeToString(deterministic=True)).hexdigest()
    return names[name]

  for name in functions:
    canonical_name(name)
  out = graph_pb2.GraphDef()
  out.versions.CopyFrom(graph_def.versions)
  out.node.extend(graph_def.node)
  _function_names.rename_nodes(out.node, names)
  library = [_canonical_function(f, names, functions) for f in graph_def.library.function]
  for function, original in zip(library, graph_def.library.function):
    function.signature.name = names[original.signature.name]
  out.library.function.extend(sorted(library, key=lambda f: f.signature.name))
  gradients = []
  for gradient in graph_def.library.gradient:
    gradients.append((names.get(gradient.function_name, gradient.function_name),
                      names.get(gradient.gradient_func, gradient.gradient_func)))
  for function_name, gradient_func in sorted(gradients):
    out.library.gradient.add(function_name=function_name, gradient_func=gradient_func)
  return out


def _canonical_function(function: Any, names: dict[str, str], functions: dict[str, Any]) -> Any:
  """A copy of `function` without its name, with positional argument names, callees renamed
  with `names`, and string attributes naming library functions blanked."""
  out = type(function)()
  out.CopyFrom(function)
  out.signature.name = ''
  arguments = {}
  for index, arg in enumerate(out.signature.input_arg):
    arguments[arg.name] = f'$i{index}'
    arg.name = f'$i{index}'
  for node in out.node_def:
    for position, tensor in enumerate(node.input):
      control = tensor.startswith('^')
      base, sep, rest = tensor.lstrip('^').partition(':')
      if base in arguments:
        node.input[position] = ('^' if control else '') + arguments[base] + sep + rest
  returns = dict(out.ret)
  out.ClearField('ret')
  outputs = {}
  for index, arg in enumerate(out.signature.output_arg):
    outputs[arg.name] = f'$o{index}'
    arg.name = f'$o{index}'
  for key, tensor in returns.items():
    base, sep, rest = tensor.partition(':')
    out.ret[outputs.get(key, key)] = arguments.get(base, base) + sep + rest
  _function_names.rename_nodes(out.node_def, names)
  for attr in out.attr.values():
    _function_names.rename_attr(attr, names)
    if attr.WhichOneof('value') == 's' and attr.s.decode('utf-8', 'replace') in functions:
      attr.s = b''
  return out
