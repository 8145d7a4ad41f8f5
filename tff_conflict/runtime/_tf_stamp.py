"""TFF TensorFlow computations stamped into functions of TF's eager context (in this process;
docs/design.md, "The in-process runner").
"""

import itertools
import weakref
from collections.abc import Mapping
from typing import Any

import attrs
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_conflict import _compat
from tff_conflict.runtime import _function_names
from tff_conflict.runtime import _reduce_loop

_suffix_counter = itertools.count()


def binding_names(binding: Any) -> list[str]:
  """Tensor names of a TFF TensorFlow binding, in the binding's (= the type's) order."""
  kind = binding.WhichOneof('binding')
  if kind == 'tensor':
    return [binding.tensor.tensor_name]
  if kind == 'sequence':
    return [binding.sequence.variant_tensor_name]
  if kind == 'struct':
    return [name for element in binding.struct.element for name in binding_names(element)]
  raise ValueError(f'Unsupported TensorFlow binding kind {kind!r}.')


def flat_specs(type_spec: tff.types.Type) -> list[tf.TensorSpec]:
  """One `tf.TensorSpec` per leaf of `type_spec` (sequences are scalar variant tensors)."""
  if isinstance(type_spec, tff.types.TensorType):
    return [tf.TensorSpec(type_spec.shape, tf.dtypes.as_dtype(type_spec.dtype))]
  if isinstance(type_spec, tff.types.SequenceType):
    return [tf.TensorSpec([], tf.variant)]
  if isinstance(type_spec, tff.types.StructType):
    return [s for _, t in tff.structure.iter_elements(type_spec) for s in flat_specs(t)]
  raise ValueError(f'Unsupported type in a TensorFlow computation: {type_spec}')


def _element(value: Any, index: int, name: str | None) -> Any:
  """Element `index` (named `name`) of a Python or TFF container."""
  if isinstance(value, tff.structure.Struct):
    return value[index]
  if name is not None:
    if isinstance(value, Mapping):
      return value[name]
    if attrs.has(type(value)) or hasattr(value, '_fields') or hasattr(value, name):
      return getattr(value, name)
  if isinstance(value, Mapping):
    return list(value.values())[index]
  return value[index]


def flatten_value(value: Any, type_spec: tff.types.Type) -> list[Any]:
  """The leaves of `value` in the order of `type_spec` (datasets for sequence leaves)."""
  if isinstance(type_spec, tff.types.FederatedType):
    type_spec = type_spec.member
  if isinstance(type_spec, (tff.types.TensorType, tff.types.SequenceType)):
    return [value]
  if isinstance(type_spec, tff.types.StructType):
    flat = []
    for index, (name, element_type) in enumerate(tff.structure.iter_elements(type_spec)):
      if isinstance(element_type, tff.types.FederatedType):
        element_type = element_type.member
      flat.extend(flatten_value(_element(value, index, name), element_type))
    return flat
  raise ValueError(f'Unsupported type {type_spec}')


def pack_value(flat: list[Any], type_spec: tff.types.Type) -> Any:
  """Inverse of `flatten_value`: Python containers as TFF's runtime returns them."""
  if isinstance(type_spec, tff.types.FederatedType):
    type_spec = type_spec.member
  leaves = iter(flat)

  def build(t):
    if isinstance(t, tff.types.FederatedType):
      return build(t.member)
    if isinstance(t, tff.types.StructType):
      return tff.structure.Struct([(name, build(e)) for name, e in tff.structure.iter_elements(t)])
    return next(leaves)

  struct = build(type_spec)
  if next(leaves, None) is not None:
    raise ValueError(f'Too many leaves for type {type_spec}')
  return tff.types.type_to_py_container(struct, type_spec)


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


def computation_proto(comp: Any) -> Any:
  """The `Computation` proto of a TFF computation (a proto is returned as it is)."""
  if isinstance(comp, tff.framework.ConcreteComputation):
    return tff.framework.ConcreteComputation.get_proto(comp)
  if hasattr(comp, 'WhichOneof'):
    return comp
  raise ValueError(f'expected a TFF computation, got {type(comp).__name__}')


def unpack_graph_def(any_proto: Any) -> tf.compat.v1.GraphDef:
  """The `GraphDef` packed in a TFF TensorFlow computation's `graph_def` (a proto `Any`)."""
  graph_def = tf.compat.v1.GraphDef()
  if not any_proto.Unpack(graph_def):
    raise ValueError(f'the computation holds a {any_proto.type_url}, not a GraphDef')
  return graph_def


def uniquify_shared_names(graph_def: Any, suffix: str) -> None:
  """Appends `_suffix` to every `shared_name` attribute (variables, tables) of the top-level
  graph, in place; an empty one first becomes `empty_<i>` (as TFF's runtime does)."""
  empty = 0
  for node in graph_def.node:
    shared_name = node.attr.get('shared_name')
    if shared_name is not None:
      if not shared_name.s:
        shared_name.s = f'empty_{empty}'.encode()
        empty += 1
      shared_name.s += b'_' + suffix.encode()


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
  op_def = _compat.op_def(op_type)
  return op_def is None or op_def.is_stateful  # a function call counts as stateful


# Stateful op types whose effects end with the call that runs them: variables (initialized anew
# by every call of a stamped computation), the optimizers' in-place updates of them, in-memory
# datasets and iterators over the call's own datasets, assertions, and calls and control flow
# (their bodies are checked as functions of the library). Not: random ops (their kernels keep
# generator state between calls), shuffles, datasets that read files or call Python, prints,
# queues, tables, mutexes.
_REPLAYABLE_STATEFUL_OPS = frozenset({
    'VarHandleOp', 'ReadVariableOp', 'AssignVariableOp', 'AssignAddVariableOp',
    'AssignSubVariableOp', 'VarIsInitializedOp', 'VariableShape', 'DestroyResourceOp',
    'ResourceGather', 'ResourceGatherNd', 'ResourceStridedSliceAssign',
    'AnonymousIterator', 'AnonymousIteratorV2', 'AnonymousIteratorV3', 'MakeIterator',
    'IteratorGetNext', 'IteratorGetNextSync', 'IteratorGetNextAsOptional', 'DeleteIterator',
    'ReduceDataset', 'DatasetToSingleElement',
    'TensorDataset', 'TensorSliceDataset', 'SparseTensorSliceDataset', 'RangeDataset',
    'ListDataset',
    'Assert',
    'StatefulPartitionedCall', 'PartitionedCall', 'If', 'While', 'Case',
})
_REPLAYABLE_PREFIXES = ('ResourceApply', 'ResourceSparseApply', 'ResourceScatter')


def _replayable_op(op_type: str) -> bool:
  if op_type in _REPLAYABLE_STATEFUL_OPS or op_type.startswith(_REPLAYABLE_PREFIXES):
    return True
  op_def = _compat.op_def(op_type)
  return op_def is not None and not op_def.is_stateful


def replayable(graph_def: Any) -> bool:
  """Whether an extra call of a stamped computation of `graph_def` leaves later calls' results
  unchanged: every op of the graph and of its library is stateless, a call of a library function,
  or a stateful op whose effect ends with the call (`_REPLAYABLE_STATEFUL_OPS`)."""
  functions = {f.signature.name for f in graph_def.library.function}
  nodes = itertools.chain(graph_def.node, *(f.node_def for f in graph_def.library.function))
  return all(node.op in functions or _replayable_op(node.op) for node in nodes)


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

  Each call initializes the computation's variables, then computes its results, like one call in
  TFF's runtime. Values are flat lists in TFF's type order (`flatten_value`/`pack_value`);
  datasets are variant tensors.

  Attributes:
    name: label used in error messages.
    parameter_type: the TFF parameter type (None for a no-argument computation).
    result_type: the TFF result type.
    input_specs: one `tf.TensorSpec` per flat input leaf.
    num_outputs: how many flat tensors a call returns.
    replayable: whether an extra call leaves the results of later calls unchanged (no random,
      print, queue or table ops; `replayable`).
  """

  def __init__(self, comp: Any, name: str, *, optimize: bool = True):
    """Stamps `comp`.

    Args:
      comp: a TFF TensorFlow computation (or its `pb.Computation`).
      name: label used in error messages.
      optimize: whether TensorFlow runs Grappler over the function when it first runs it, and
        lowers its functional control flow (`call_config`). Grappler's rewrites speed up model
        training but cost a fraction of a second per function; small server-side computations
        are left as TFF built them.
    """
    proto = computation_proto(comp)
    if proto.WhichOneof('computation') != 'tensorflow':
      raise ValueError(f'{name} is not a TensorFlow computation '
                       f'(found {proto.WhichOneof("computation")!r}).')
    self.name = name
    self._optimize = optimize
    type_spec = tff.types.deserialize_type(proto.type)
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
    graph_def = unpack_graph_def(tf_proto.graph_def)
    _reduce_loop.replace_reduce_datasets(graph_def)
    # Shared names (variables, tables) are made unique per stamped copy, so that copies used
    # from several threads at once never share state.
    suffix = f'tffc_inprocess_{next(_suffix_counter)}'
    uniquify_shared_names(graph_def, suffix)
    graph_def = uniquify_function_names(graph_def, suffix)
    # One function that runs the initializer and then the results, or (when that cannot be done
    # exactly in one graph) two, called in that order.
    if token_name:
      _replace_with_constant(graph_def, token_name, f'tff_conflict_inprocess_{name}')
    _drop_control_inputs_from(graph_def, input_names)
    self.replayable = replayable(graph_def)
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
      config = call_config(self._optimize)
      if self._init is not None:
        self._init(tensors, config)
      return self._run(tensors, config)
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


class GraphFunction:
  """A `GraphDef`'s nodes as one TensorFlow function of this process's eager context.

  Inputs and outputs are tensor names of the graph; the graph's library functions are registered
  with it. Calling it runs the function eagerly, or adds a `StatefulPartitionedCall` of it to the
  `tf.function` being traced. `effect_name` names an op run for its effect only: the function then
  has no outputs, and its call can be depended on. The functions are removed from the context
  when this object is collected.
  """

  def __init__(self, graph_def: Any, name: str, input_names: list[str],
               output_names: list[str], effect_name: str | None = None):
    nodes = {n.name: n for n in graph_def.node}
    functions = {f.signature.name: f for f in graph_def.library.function}
    self.name = name
    self._output_types = [_output_dtype(nodes[_split_tensor_name(t)[0]],
                                        _split_tensor_name(t)[1], functions)
                          for t in output_names]
    for function_def in graph_def.library.function:
      if not _compat.has_function(function_def.signature.name):
        _compat.add_function_def(function_def)
    _compat.register_graph_function(
        graph_def, name, [_split_tensor_name(t) for t in input_names],
        [_split_tensor_name(t) for t in output_names],
        _node_name(effect_name) if effect_name else None)
    self._effect_only = bool(effect_name)
    weakref.finalize(self, _compat.remove_functions, [name] + list(functions))

  def __call__(self, tensors: list[tf.Tensor], config: bytes = b'') -> list[Any]:
    """The outputs (eagerly, or while tracing a `tf.function`); an `effect_name` function gives
    [] eagerly and [its call op] while tracing. `config`: a serialized `ConfigProto` the function
    is instantiated with (`call_config`)."""
    call = call_function(self.name, tensors, self._output_types, config)
    if not self._output_types and not tf.executing_eagerly():
      return [call] if self._effect_only else []  # the call op (stateful: tf.function runs it)
    return call


def call_function(name: str, tensors: list[tf.Tensor], output_types: list[tf.DType],
                  config: bytes = b'') -> Any:
  """One call of the eager context's function `name`: its outputs (a list), or while tracing a
  function without outputs the call op."""
  outputs = tf.raw_ops.StatefulPartitionedCall(args=list(tensors), Tout=output_types, f=name,
                                               config_proto=config)
  if not output_types:
    return [] if tf.executing_eagerly() else outputs
  return list(outputs)


class TracedFunction:
  """`fn` traced as a `tf.function` over `input_signature`, registered in the eager context and
  called on flat tensors by name (`call_config(optimize)`); returns a flat list."""

  def __init__(self, fn: Any, input_signature: list[tf.TensorSpec], *, optimize: bool = True):
    concrete = tf.function(fn, input_signature=input_signature,
                           autograph=False).get_concrete_function()
    concrete.add_to_graph()
    self._concrete = concrete  # keeps the function (and what it captures) alive
    self.name = concrete.function_def.signature.name
    self._captures = list(concrete.captured_inputs)
    self._output_types = [t.dtype for t in concrete.outputs]
    self._optimize = optimize

  def __call__(self, tensors: list[tf.Tensor]) -> list[tf.Tensor]:
    return call_function(self.name, list(tensors) + self._captures, self._output_types,
                         call_config(self._optimize))


def _split_tensor_name(tensor_name: str) -> tuple[str, int]:
  op_name, _, index = tensor_name.partition(':')
  return op_name, int(index or 0)


def _output_dtype(node: Any, index: int, functions: Mapping[str, Any]) -> tf.DType:
  """The dtype of output `index` of `node` (a registered op or a call of a library function)."""
  if node.op in functions:
    args = functions[node.op].signature.output_arg
  else:
    args = _compat.op_def(node.op).output_arg
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


def _optimize_once(config: tf.compat.v1.ConfigProto) -> None:
  rewrite_options = config.graph_options.rewrite_options
  rewrite_options.meta_optimizer_iterations = rewrite_options.ONE


def _as_built(config: tf.compat.v1.ConfigProto) -> None:
  config.graph_options.rewrite_options.disable_meta_optimizer = True
  config.experimental.disable_functional_ops_lowering = True


_configs: dict[tuple[bytes, bool], bytes] = {}


def call_config(optimize: bool) -> bytes:
  """The serialized `ConfigProto` eager calls of stamped functions are instantiated with: this
  thread's function call options with Grappler limited to one round (optimize=True) or off, and
  functional control flow (`If`, `Case`, `While`) kept as ops (optimize=False). Both only save
  instantiation time (docs/design.md, "The in-process runner")."""
  base = _compat.function_call_config()
  key = (base, optimize)
  config = _configs.get(key)
  if config is None:
    proto = tf.compat.v1.ConfigProto.FromString(base)
    (_optimize_once if optimize else _as_built)(proto)
    config = _configs[key] = proto.SerializeToString()
  return config
