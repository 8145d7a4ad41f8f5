"""TFF TensorFlow computations stamped into TensorFlow 2 concrete functions (in this process).

A TFF `tff.tensorflow.computation` is a serialized `GraphDef` with bindings that name its input and
output tensors (`pb.TensorFlow.parameter` / `.result`), plus an optional initialize op (variables
created inside the computation) and session-token tensor. `StampedComputation` rewrites the graph's
`ReduceDataset` ops into in-graph loops (`_reduce_loop`), makes every node that the results need
run after the initialize op (`order_after_initializer`), keeps only the nodes the results need, and
registers that as one function of the eager context (`GraphFunction`), whose inputs are the
parameter tensors and whose outputs are the result tensors of the bindings. Each call is one
TensorFlow call that initializes the variables and then computes the results, so every call starts
from freshly initialized variables, like one call of the computation in TFF's runtime (where the
initializer cannot be ordered inside the graph exactly, it is a second function, called first). TF
places the ops itself: on a GPU when one is visible, else on the CPU (no device is pinned here).

Values cross the boundary as *flat lists* in TFF's type order (`structure.flatten` order, i.e. the
declared order of named fields; `tf.nest` would sort dict keys instead): tensors as `tf.Tensor`,
sequences as `tf.data.Dataset` variant tensors.
"""

import contextlib
import itertools
import weakref
from collections.abc import Mapping
from typing import Any

import attrs
import numpy as np
import tensorflow as tf

from tensorflow.core.protobuf import config_pb2
from tensorflow.core.protobuf import rewriter_config_pb2
from tensorflow.python.client import pywrap_tf_session as c_api
from tensorflow.python.eager import context
from tensorflow.python.eager import execute
from tensorflow.python.framework import c_api_util
from tensorflow.python.framework import op_def_registry
from tensorflow.python.ops import gen_functional_ops

from tensorflow_federated.proto.v0 import computation_pb2 as pb
from tensorflow_federated.python.common_libs import structure
from tensorflow_federated.python.core.impl.computation import computation_impl
from tensorflow_federated.python.core.impl.types import computation_types
from tensorflow_federated.python.core.impl.types import type_conversions
from tensorflow_federated.python.core.impl.types import type_serialization
from tensorflow_federated.python.core.impl.utils import tensorflow_utils
from tensorflow_federated.python.tensorflow_libs import serialization_utils

from tff_conflict.runtime import _function_names
from tff_conflict.runtime import _reduce_loop
from tff_conflict.runtime import _warmup

_suffix_counter = itertools.count()


def binding_names(binding: pb.TensorFlow.Binding) -> list[str]:
  """Tensor names of a TFF TensorFlow binding, in the binding's (= the type's) order."""
  kind = binding.WhichOneof('binding')
  if kind == 'tensor':
    return [binding.tensor.tensor_name]
  if kind == 'sequence':
    return [binding.sequence.variant_tensor_name]
  if kind == 'struct':
    return [name for element in binding.struct.element for name in binding_names(element)]
  raise ValueError(f'Unsupported TensorFlow binding kind {kind!r}.')


def flat_specs(type_spec: computation_types.Type) -> list[tf.TensorSpec]:
  """One `tf.TensorSpec` per leaf of `type_spec` (sequences are scalar variant tensors)."""
  if isinstance(type_spec, computation_types.TensorType):
    return [tf.TensorSpec(type_spec.shape, tf.dtypes.as_dtype(type_spec.dtype))]
  if isinstance(type_spec, computation_types.SequenceType):
    return [tf.TensorSpec([], tf.variant)]
  if isinstance(type_spec, computation_types.StructType):
    return [s for _, t in structure.iter_elements(type_spec) for s in flat_specs(t)]
  raise ValueError(f'Unsupported type in a TensorFlow computation: {type_spec}')


def _element(value: Any, index: int, name: str | None) -> Any:
  """Element `index` (named `name`) of a Python or TFF container."""
  if isinstance(value, structure.Struct):
    return value[index]
  if name is not None:
    if isinstance(value, Mapping):
      return value[name]
    if attrs.has(type(value)) or hasattr(value, '_fields') or hasattr(value, name):
      return getattr(value, name)
  if isinstance(value, Mapping):
    return list(value.values())[index]
  return value[index]


def flatten_value(value: Any, type_spec: computation_types.Type) -> list[Any]:
  """The leaves of `value` in the order of `type_spec` (datasets for sequence leaves)."""
  if isinstance(type_spec, computation_types.FederatedType):
    type_spec = type_spec.member
  if isinstance(type_spec, (computation_types.TensorType, computation_types.SequenceType)):
    return [value]
  if isinstance(type_spec, computation_types.StructType):
    flat = []
    for index, (name, element_type) in enumerate(structure.iter_elements(type_spec)):
      if isinstance(element_type, computation_types.FederatedType):
        element_type = element_type.member
      flat.extend(flatten_value(_element(value, index, name), element_type))
    return flat
  raise ValueError(f'Unsupported type {type_spec}')


def pack_value(flat: list[Any], type_spec: computation_types.Type) -> Any:
  """Inverse of `flatten_value`: Python containers as TFF's runtime returns them."""
  if isinstance(type_spec, computation_types.FederatedType):
    type_spec = type_spec.member
  leaves = iter(flat)

  def build(t):
    if isinstance(t, computation_types.FederatedType):
      return build(t.member)
    if isinstance(t, computation_types.StructType):
      return structure.Struct([(name, build(e)) for name, e in structure.iter_elements(t)])
    return next(leaves)

  struct = build(type_spec)
  if next(leaves, None) is not None:
    raise ValueError(f'Too many leaves for type {type_spec}')
  return type_conversions.type_to_py_container(struct, type_spec)


def to_tensor(value: Any, spec: tf.TensorSpec) -> tf.Tensor:
  """One flat leaf as a tensor of `spec`: datasets become variant tensors."""
  if spec.dtype == tf.variant:
    if isinstance(value, tf.data.Dataset):
      return tf.data.experimental.to_variant(value)
    if isinstance(value, tf.Tensor) and value.dtype == tf.variant:
      return value
    raise ValueError(f'client data must be tf.data.Dataset objects, got {type(value).__name__}')
  if isinstance(value, tf.Tensor) and value.dtype == spec.dtype:
    return value
  return tf.convert_to_tensor(np.asarray(value), dtype=spec.dtype)


def to_numpy(tensor: tf.Tensor) -> Any:
  """A read-only numpy value, as TFF's runtime returns (numpy scalars for rank 0)."""
  array = tensor.numpy()
  if isinstance(array, np.ndarray):
    if array.ndim == 0:
      return array[()]
    array.setflags(write=False)
  return array


def computation_proto(comp: Any) -> pb.Computation:
  if isinstance(comp, pb.Computation):
    return comp
  return computation_impl.ConcreteComputation.get_proto(comp)


def uniquify_function_names(graph_def, suffix: str):
  """Renames every function of `graph_def`'s library (and each reference to it) with `suffix`.

  Eager TF keeps one global function library: two stamped graphs whose libraries define the same
  name differently (Grappler specializes a function differently per MapReduceForm component, and
  per process) would otherwise collide ("duplicate function with name ...").
  """
  library = graph_def.library
  renames = {f.signature.name: f'{f.signature.name}_{suffix}' for f in library.function}
  if not renames:
    return graph_def
  for function in library.function:
    function.signature.name = renames[function.signature.name]
    _function_names.rename_nodes(function.node_def, renames)
    for attr in function.attr.values():
      _function_names.rename_attr(attr, renames)
  for gradient in library.gradient:
    gradient.function_name = renames.get(gradient.function_name, gradient.function_name)
    gradient.gradient_func = renames.get(gradient.gradient_func, gradient.gradient_func)
  _function_names.rename_nodes(graph_def.node, renames)
  return graph_def


def _node_name(tensor_or_node: str) -> str:
  """`'^a'`, `'a:1'`, `'a'` -> `'a'` (a top-level GraphDef input reference)."""
  return tensor_or_node.lstrip('^').split(':')[0]


def _fan_in(nodes: Mapping[str, Any], roots: list[str]) -> set[str]:
  """Names of `roots` and of every node they depend on (data and control inputs)."""
  seen: set[str] = set()
  stack = [_node_name(r) for r in roots]
  while stack:
    name = stack.pop()
    if name in seen or name not in nodes:
      continue
    seen.add(name)
    stack.extend(_node_name(i) for i in nodes[name].input)
  return seen


def _is_stateful(op_type: str) -> bool:
  op_def = op_def_registry.get(op_type)
  return op_def is None or op_def.is_stateful  # a function call counts as stateful


# Stateful ops of an initializer whose outputs the rest of the graph may use before the
# initializer has run: they create a handle and read nothing.
_HANDLE_OPS = frozenset({'VarHandleOp'})


def order_after_initializer(graph_def: Any, init_name: str, fetches: list[str]) -> bool:
  """Makes everything `fetches` need run after the initializer `init_name`, in one graph.

  TFF runs a computation with variables as two steps: its initialize op, then its results. Here
  every node that the results need and that is not itself part of the initializer, and that has
  no inputs or takes an input from the initializer's subgraph, gets a control input from
  `init_name`; so every node outside the initializer runs after it, as in the second step. This
  is exact unless the rest of the graph uses a value the initializer's subgraph computes with a
  stateful op other than a handle (e.g. a variable read), which the second step would compute
  again: then nothing is changed and False is returned.
  """
  nodes = {n.name: n for n in graph_def.node}
  init = _node_name(init_name)
  if init not in nodes:
    return False
  initializer = _fan_in(nodes, [init])
  needed = _fan_in(nodes, fetches) - initializer
  for name in needed:
    for source in map(_node_name, nodes[name].input):
      if (source in initializer and nodes[source].op not in _HANDLE_OPS
          and _is_stateful(nodes[source].op)):
        return False
  control = f'^{init}'
  for name in needed:
    node = nodes[name]
    if not node.input or any(_node_name(i) in initializer for i in node.input):
      node.input.append(control)
  return True


def extract_subgraph(graph_def: Any, fetches: list[str]) -> Any:
  """A copy of `graph_def` with only the nodes `fetches` need (and the whole library)."""
  nodes = {n.name: n for n in graph_def.node}
  keep = _fan_in(nodes, fetches)
  out = type(graph_def)()
  out.versions.CopyFrom(graph_def.versions)
  out.library.CopyFrom(graph_def.library)
  out.node.extend(n for n in graph_def.node if n.name in keep)
  return out


class StampedComputation:
  """A TFF TensorFlow computation as one TF concrete function: `flat tensors -> flat tensors`.

  Attributes:
    name: label used in error messages.
    parameter_type: the TFF parameter type (None for a no-argument computation).
    result_type: the TFF result type.
    input_specs: one `tf.TensorSpec` per flat input leaf.
    num_outputs: how many flat tensors a call returns.
    replayable: whether an extra call leaves the results of later calls unchanged (no random,
      print, queue or table ops; `_warmup.replayable`).
  """

  def __init__(self, comp: Any, name: str, *, optimize: bool = True):
    """Stamps `comp`.

    Args:
      comp: a TFF TensorFlow computation (or its `pb.Computation`).
      name: label used in error messages.
      optimize: whether TensorFlow runs Grappler over the function when it first runs it, and
        lowers its functional control flow (`call_options`). Grappler's rewrites speed up model
        training but cost a fraction of a second per function; small server-side computations
        are left as TFF built them.
    """
    proto = computation_proto(comp)
    if proto.WhichOneof('computation') != 'tensorflow':
      raise ValueError(f'{name} is not a TensorFlow computation '
                       f'(found {proto.WhichOneof("computation")!r}).')
    self.name = name
    self._optimize = optimize
    type_spec = type_serialization.deserialize_type(proto.type)
    self.parameter_type = type_spec.parameter
    self.result_type = type_spec.result
    tf_proto = proto.tensorflow
    self.input_specs = flat_specs(self.parameter_type) if self.parameter_type is not None else []
    input_names = binding_names(tf_proto.parameter) if self.parameter_type is not None else []
    if len(input_names) != len(self.input_specs):
      raise ValueError(f'{name}: parameter binding and type disagree.')
    output_names = binding_names(tf_proto.result)
    init_name = tf_proto.initialize_op or None
    token_name = tf_proto.session_token_tensor_name or None
    graph_def = serialization_utils.unpack_graph_def(tf_proto.graph_def)
    _reduce_loop.replace_reduce_datasets(graph_def)
    # Shared names (variables, tables) are made unique per stamped copy, so that copies used
    # from several threads at once never share state.
    suffix = f'tffc_inprocess_{next(_suffix_counter)}'
    graph_def = tensorflow_utils._uniquify_shared_names_with_suffix(  # pylint: disable=protected-access
        graph_def, suffix)
    graph_def = uniquify_function_names(graph_def, suffix)
    # One function that runs the initializer and then the results, or (when that cannot be done
    # exactly in one graph) two, called in that order.
    if token_name:
      _replace_with_constant(graph_def, token_name, f'tff_conflict_inprocess_{name}')
    _drop_control_inputs_from(graph_def, input_names)
    self.replayable = _warmup.replayable(graph_def)
    self._init = None
    if init_name and not order_after_initializer(graph_def, init_name, output_names):
      self._init = GraphFunction(
          extract_subgraph(graph_def, [init_name] + input_names), f'{name}_init_{suffix}',
          input_names, [], effect_name=init_name)
    self._run = GraphFunction(extract_subgraph(graph_def, output_names + input_names),
                              f'{name}_{suffix}', input_names, output_names)
    self.num_outputs = len(output_names)

  def __call__(self, flat_inputs: list[Any]) -> list[tf.Tensor]:
    """Runs the computation on flat leaves (tensors, arrays or datasets); returns flat tensors."""
    if len(flat_inputs) != len(self.input_specs):
      raise ValueError(f'{self.name}: expected {len(self.input_specs)} flat inputs, '
                       f'got {len(flat_inputs)}.')
    tensors = [to_tensor(v, s) for v, s in zip(flat_inputs, self.input_specs)]
    return self.call_tensors(tensors)

  def call_tensors(self, tensors: list[tf.Tensor]) -> list[tf.Tensor]:
    """Runs the computation on tensors of `input_specs`' dtypes (not checked), eagerly or while
    tracing a `tf.function` (then it adds the calls to that function)."""
    if tf.executing_eagerly():
      with call_options(self._optimize):
        if self._init is not None:
          self._init(tensors)
        return self._run(tensors)
    if self._init is None:
      return self._run(tensors)
    done = self._init(tensors)
    with tf.control_dependencies(done):
      return self._run(tensors)


def _replace_with_constant(graph_def: Any, tensor_name: str, value: str) -> None:
  """The node of `tensor_name` (TFF's session-token placeholder), if kept, becomes a constant."""
  for node in graph_def.node:
    if node.name == _node_name(tensor_name):
      node.op = 'Const'
      node.ClearField('attr')
      node.attr['dtype'].type = tf.string.as_datatype_enum
      node.attr['value'].tensor.CopyFrom(tf.make_tensor_proto(value))
      del node.input[:]


def _drop_control_inputs_from(graph_def: Any, names: list[str]) -> None:
  """Removes control inputs `^n` for the nodes `names` (a function's inputs: they are available
  before anything in the function runs, so such an edge orders nothing)."""
  controls = {f'^{_node_name(n)}' for n in names}
  if not controls:
    return
  for node in graph_def.node:
    kept = [i for i in node.input if i not in controls]
    if len(kept) != len(node.input):
      del node.input[:]
      node.input.extend(kept)


def _remove_functions(names: list[str]) -> None:
  try:
    ctx = context.context()
    for name in names:
      if ctx.has_function(name):
        ctx.remove_function(name)
  except Exception:  # pylint: disable=broad-except
    pass  # e.g. at interpreter shutdown


class GraphFunction:
  """A `GraphDef`'s nodes as one TensorFlow function of this process's eager context.

  TensorFlow's C API imports the graph and turns it into a function (no Python object per op);
  inputs and outputs are tensor names of the graph, and the graph's library functions are
  registered with it. Calling it runs the function eagerly, or adds a `StatefulPartitionedCall` of
  it to the `tf.function` being traced. `effect_name` names an op run for its effect only: the
  function then has no outputs, and its call can be depended on. The functions are removed from
  the context when this object is collected.
  """

  def __init__(self, graph_def: Any, name: str, input_names: list[str],
               output_names: list[str], effect_name: str | None = None):
    nodes = {n.name: n for n in graph_def.node}
    functions = {f.signature.name: f for f in graph_def.library.function}
    self.name = name
    self._output_types = [_output_dtype(nodes[_split_tensor_name(t)[0]],
                                        _split_tensor_name(t)[1], functions)
                          for t in output_names]
    graph = tf.Graph()
    options = c_api.TF_NewImportGraphDefOptions()
    try:
      c_api.TF_ImportGraphDefOptionsSetPrefix(options, '')
      for tensor_name in input_names + output_names:
        c_api.TF_ImportGraphDefOptionsAddReturnOutput(options, *_split_tensor_name(tensor_name))
      if effect_name:
        c_api.TF_ImportGraphDefOptionsAddReturnOperation(options, _node_name(effect_name))
      with c_api_util.tf_buffer(graph_def.SerializeToString()) as serialized:
        with graph._c_graph.get() as c_graph:  # pylint: disable=protected-access
          results = c_api.TF_GraphImportGraphDefWithResults(c_graph, serialized, options)
      try:
        tensors = c_api.TF_ImportGraphDefResultsReturnOutputs(results)
        effects = c_api.TF_ImportGraphDefResultsReturnOperations(results)
      finally:
        c_api.TF_DeleteImportGraphDefResults(results)
    finally:
      c_api.TF_DeleteImportGraphDefOptions(options)
    inputs, outputs = tensors[:len(input_names)], tensors[len(input_names):]
    ctx = context.context()
    for function_def in graph_def.library.function:
      if not ctx.has_function(function_def.signature.name):
        ctx.add_function_def(function_def)
    with graph._c_graph.get() as c_graph:  # pylint: disable=protected-access
      function = c_api.TF_GraphToFunction_wrapper(
          c_graph, name, False, None, inputs, outputs, [], list(effects),
          [f'effect_{i}'.encode() for i in range(len(effects))], None, '')
    try:
      ctx.add_c_function(function)
    finally:
      c_api.TF_DeleteFunction(function)
    self._effect_only = bool(effect_name)
    weakref.finalize(self, _remove_functions, [name] + list(functions))

  def __call__(self, tensors: list[tf.Tensor]) -> list[Any]:
    """The outputs (eagerly, or while tracing a `tf.function`); an `effect_name` function gives
    [] eagerly and [its call op] while tracing."""
    if tf.executing_eagerly():
      ctx = context.context()
      options = ctx.function_call_options
      outputs = execute.execute(
          self.name, num_outputs=len(self._output_types), inputs=list(tensors),
          attrs=('executor_type', options.executor_type or '',
                 'config_proto', options.config_proto_serialized),
          ctx=ctx)
      return list(outputs) if outputs else []
    call = gen_functional_ops.stateful_partitioned_call(
        args=list(tensors), Tout=self._output_types, f=self.name)
    if not self._output_types:  # the call op itself (tf.function runs it: it is stateful)
      return [call] if self._effect_only else []
    return list(call)


def _split_tensor_name(tensor_name: str) -> tuple[str, int]:
  op_name, _, index = tensor_name.partition(':')
  return op_name, int(index or 0)


def _output_dtype(node: Any, index: int, functions: Mapping[str, Any]) -> tf.DType:
  """The dtype of output `index` of `node` (a registered op or a call of a library function)."""
  if node.op in functions:
    args = functions[node.op].signature.output_arg
  else:
    args = op_def_registry.get(node.op).output_arg
  position = 0
  for arg in args:
    if arg.number_attr:
      types = [arg.type or node.attr[arg.type_attr].type] * node.attr[arg.number_attr].i
    elif arg.type_list_attr:
      types = list(node.attr[arg.type_list_attr].list.type)
    else:
      types = [arg.type or node.attr[arg.type_attr].type]
    if index < position + len(types):
      return tf.dtypes.as_dtype(types[index - position])
    position += len(types)
  raise ValueError(f'{node.name!r} has no output {index}')


_call_options: dict[tuple[bytes, str, bool], Any] = {}


@contextlib.contextmanager
def call_options(optimize: bool):
  """Eager function calls of this thread are instantiated with the runner's options.

  optimize=True: Grappler runs one round of its optimizers instead of its default two (measured
  on the training steps of the benchmarks: the second round cost a sixth of `work`'s first call
  and left its later calls as fast). optimize=False: the function runs as built, without
  Grappler, and with its functional control flow (`If`, `Case`, `While`) kept as ops instead of
  lowered into the caller's graph. Both only save instantiation time: Grappler's rewrites, and
  lowering a `Case` (every branch inlined into the caller), cost more at a function's first call
  than they save in the server-side computations' few later calls; a kept functional op
  instantiates a branch when it first runs it.

  (The options are part of each call's attributes, so a function instantiated with other options
  is another cached kernel; each stamped computation always uses the same.)
  """
  ctx = context.context()
  previous = ctx.function_call_options
  key = (previous.config_proto_serialized, previous.executor_type, bool(optimize))
  options = _call_options.get(key)
  if options is None:
    config = config_pb2.ConfigProto.FromString(previous.config_proto_serialized)
    rewrite_options = config.graph_options.rewrite_options
    if optimize:
      rewrite_options.meta_optimizer_iterations = rewriter_config_pb2.RewriterConfig.ONE
    else:
      rewrite_options.disable_meta_optimizer = True
      config.experimental.disable_functional_ops_lowering = True
    options = context.FunctionCallOptions(executor_type=previous.executor_type,
                                          config_proto=config)
    _call_options[key] = options
  ctx.function_call_options = options
  try:
    yield
  finally:
    ctx.function_call_options = previous


def call_concrete(function: Any, tensors: list[tf.Tensor]) -> list[tf.Tensor]:
  """Calls a concrete function on flat tensors of its input signature; returns a flat list."""
  outputs = _call_flat(function, tensors)
  if outputs is None:
    return []
  return [outputs] if isinstance(outputs, tf.Tensor) else list(outputs)


def _call_flat(function: Any, tensors: list[tf.Tensor]) -> Any:
  # The flat call skips ConcreteFunction.__call__'s attempt at binding a structured signature
  # (whose failure message formats every argument: a third of a small round's time).
  return function._call_flat(tensors, function.captured_inputs)  # pylint: disable=protected-access
