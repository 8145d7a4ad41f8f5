"""`ReduceDataset` ops of a stamped graph replaced by in-graph loops over a dataset iterator
(docs/design.md, "The in-process runner").
"""

import copy
from typing import Any

import tensorflow as tf

from tff_conflict.runtime import _function_names

_REDUCE_OP = 'ReduceDataset'
_LOOP_SUFFIX = '_tffc_reduce_loop'
_CALL_OP = 'StatefulPartitionedCall'

# (reduce function name, state specs, element specs, argument dtypes) -> (loop name, FunctionDefs)
_traced: dict[tuple[Any, ...], tuple[str, list[Any]]] = {}


def _element_specs(reduce_fn: Any, num_state: int, num_arguments: int) -> list[tf.TensorSpec]:
  """The dataset element's leaves: `reduce_fn`'s inputs between the state and the arguments."""
  args = reduce_fn.signature.input_arg
  specs = []
  for index in range(num_state, len(args) - num_arguments):
    shape = tf.TensorShape(None)
    arg_attr = reduce_fn.arg_attr.get(index)
    if arg_attr is not None and '_output_shapes' in arg_attr.attr:
      shapes = arg_attr.attr['_output_shapes'].list.shape
      if len(shapes) == 1:
        shape = tf.TensorShape(shapes[0])
    specs.append(tf.TensorSpec(shape, tf.dtypes.as_dtype(args[index].type)))
  return specs


def _trace_loop(reduce_fn_name: str, state_specs: list[tf.TensorSpec],
                element_specs: list[tf.TensorSpec],
                argument_types: list[tf.DType]) -> tuple[str, list[Any]]:
  """The loop for one `ReduceDataset`: its name and every `FunctionDef` it needs (the loop and
  its `While` condition and body; not `reduce_fn_name` itself)."""
  num_state = len(state_specs)
  element_types = [s.dtype for s in element_specs]
  element_shapes = [s.shape for s in element_specs]
  state_types = [s.dtype for s in state_specs]

  def loop(dataset, *rest):
    state, arguments = list(rest[:num_state]), list(rest[num_state:])
    iterator = tf.raw_ops.AnonymousIteratorV3(output_types=element_types,
                                                     output_shapes=element_shapes)
    made = tf.raw_ops.MakeIterator(dataset=dataset, iterator=iterator)
    with tf.control_dependencies([made]):
      first = tf.raw_ops.IteratorGetNextAsOptional(
          iterator=iterator, output_types=element_types, output_shapes=element_shapes)

    def has_next(optional, *unused_state):
      return tf.raw_ops.OptionalHasValue(optional=optional)

    def step(optional, *state):
      element = tf.raw_ops.OptionalGetValue(
          optional=optional, output_types=element_types, output_shapes=element_shapes)
      new_state = list(tf.raw_ops.StatefulPartitionedCall(
          args=list(state) + list(element) + arguments, Tout=state_types, f=reduce_fn_name))
      for tensor, spec in zip(new_state, state_specs):
        tensor.set_shape(spec.shape)
      with tf.control_dependencies(new_state):
        following = tf.raw_ops.IteratorGetNextAsOptional(
            iterator=iterator, output_types=element_types, output_shapes=element_shapes)
      return [following] + new_state

    final = tf.while_loop(
        has_next, step, [first] + state, parallel_iterations=1,
        shape_invariants=[tf.TensorShape([])] + [s.shape for s in state_specs])
    return [tf.identity(t) for t in final[1:]]

  signature = ([tf.TensorSpec([], tf.variant)] + list(state_specs)
               + [tf.TensorSpec(None, dtype) for dtype in argument_types])
  concrete = tf.function(loop, autograph=False).get_concrete_function(*signature)
  main = concrete.function_def
  nested = [f for f in concrete.graph.as_graph_def().library.function
            if f.signature.name != main.signature.name]
  return main.signature.name, [main] + nested


def _loop_function_defs(reduce_fn_name: str, state_specs: list[tf.TensorSpec],
                        element_specs: list[tf.TensorSpec],
                        argument_types: list[tf.DType]) -> tuple[str, list[Any]]:
  key = (reduce_fn_name, tuple(state_specs), tuple(element_specs), tuple(argument_types))
  if key not in _traced:
    name, function_defs = _trace_loop(reduce_fn_name, state_specs, element_specs,
                                      argument_types)
    # The suffix keeps the generated functions' names apart from those of the graph they join.
    renames = {f.signature.name: f.signature.name + _LOOP_SUFFIX for f in function_defs}
    for function_def in function_defs:
      function_def.signature.name = renames[function_def.signature.name]
      _function_names.rename_nodes(function_def.node_def, renames)
    _traced[key] = renames[name], function_defs
  name, function_defs = _traced[key]
  return name, [copy.deepcopy(f) for f in function_defs]


def _rename_outputs_in_function(function_def: Any, node_name: str) -> None:
  """In a FunctionDef, `node_name:components:i` (ReduceDataset) -> `node_name:output:i`."""
  old, new = f'{node_name}:components:', f'{node_name}:output:'
  for node in function_def.node_def:
    for i, name in enumerate(node.input):
      if name.startswith(old):
        node.input[i] = new + name[len(old):]
  for key, value in function_def.ret.items():
    if value.startswith(old):
      function_def.ret[key] = new + value[len(old):]


def replace_reduce_datasets(graph_def: Any) -> int:
  """Replaces, in place, every `ReduceDataset` of `graph_def` (top level and library) by a call of
  an equivalent in-graph `While` loop over a dataset iterator, so that its reduce function is
  instantiated once per stamped graph instead of at every call (docs/design.md, "The in-process
  runner"). Returns how many were replaced.

  Raises:
    ValueError: if a `ReduceDataset`'s reduce function is not in `graph_def`'s library.
  """
  functions = {f.signature.name: f for f in graph_def.library.function}
  generated: dict[str, Any] = {}
  count = 0
  containers = [(graph_def.node, None)] + [(f.node_def, f) for f in graph_def.library.function]
  for nodes, function_def in containers:
    for node in nodes:
      if node.op != _REDUCE_OP:
        continue
      reduce_fn_name = node.attr['f'].func.name
      reduce_fn = functions.get(reduce_fn_name)
      if reduce_fn is None:
        raise ValueError(f'ReduceDataset {node.name!r} calls {reduce_fn_name!r}, which is not in '
                         "the graph's function library")
      state_types = [tf.dtypes.as_dtype(t) for t in node.attr['Tstate'].list.type]
      state_shapes = [tf.TensorShape(s) for s in node.attr['output_shapes'].list.shape]
      argument_types = [tf.dtypes.as_dtype(t) for t in node.attr['Targuments'].list.type]
      state_specs = [tf.TensorSpec(shape, dtype)
                     for shape, dtype in zip(state_shapes, state_types)]
      element_specs = _element_specs(reduce_fn, len(state_types), len(argument_types))
      loop_name, loop_defs = _loop_function_defs(reduce_fn_name, state_specs, element_specs,
                                                 argument_types)
      for loop_def in loop_defs:
        if loop_def.signature.name in functions:
          raise ValueError(f'the graph already has a function named {loop_def.signature.name!r}')
        generated[loop_def.signature.name] = loop_def
      input_types = [tf.variant] + state_types + argument_types
      node.op = _CALL_OP
      node.ClearField('attr')
      node.attr['Tin'].list.type.extend([t.as_datatype_enum for t in input_types])
      node.attr['Tout'].list.type.extend([t.as_datatype_enum for t in state_types])
      node.attr['f'].func.name = loop_name
      node.attr['config'].s = b''
      node.attr['config_proto'].s = b''
      node.attr['executor_type'].s = b''
      if function_def is not None:
        _rename_outputs_in_function(function_def, node.name)
      count += 1
  graph_def.library.function.extend(generated.values())
  return count
