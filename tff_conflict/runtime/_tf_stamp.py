"""TFF TensorFlow computations stamped into TensorFlow 2 concrete functions (in this process).

A TFF `tff.tensorflow.computation` is a serialized `GraphDef` with bindings that name its input and
output tensors (`pb.TensorFlow.parameter` / `.result`), plus an optional initialize op (variables
created inside the computation) and session-token tensor. `StampedComputation` imports that graph
into a `tf.compat.v1.wrap_function` graph, mapping the parameter tensors onto the function's inputs
(as `tensorflow_utils.deserialize_and_call_tf_computation` does), and prunes it into two concrete
functions: `init` (the initialize op) and `run` (the results). Each call runs `init` then `run`, so
every call starts from freshly initialized variables, like one call of the computation in TFF's
runtime. TF places the ops itself: on a GPU when one is visible, else on the CPU (no device is
pinned here).

Values cross the boundary as *flat lists* in TFF's type order (`structure.flatten` order, i.e. the
declared order of named fields; `tf.nest` would sort dict keys instead): tensors as `tf.Tensor`,
sequences as `tf.data.Dataset` variant tensors.
"""

import itertools
from collections.abc import Mapping
from typing import Any

import attrs
import numpy as np
import tensorflow as tf

from tensorflow_federated.proto.v0 import computation_pb2 as pb
from tensorflow_federated.python.common_libs import structure
from tensorflow_federated.python.core.impl.computation import computation_impl
from tensorflow_federated.python.core.impl.types import computation_types
from tensorflow_federated.python.core.impl.types import type_conversions
from tensorflow_federated.python.core.impl.types import type_serialization
from tensorflow_federated.python.core.impl.utils import tensorflow_utils
from tensorflow_federated.python.tensorflow_libs import graph_utils
from tensorflow_federated.python.tensorflow_libs import serialization_utils

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


def _rename_func_attr(attr, renames):
  kind = attr.WhichOneof('value')
  if kind == 'func':
    if attr.func.name in renames:
      attr.func.name = renames[attr.func.name]
    for inner in attr.func.attr.values():
      _rename_func_attr(inner, renames)
  elif kind == 'list':
    for func in attr.list.func:
      if func.name in renames:
        func.name = renames[func.name]


def _rename_nodes(nodes, renames):
  for node in nodes:
    if node.op in renames:
      node.op = renames[node.op]
    for attr in node.attr.values():
      _rename_func_attr(attr, renames)


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
    _rename_nodes(function.node_def, renames)
    for attr in function.attr.values():
      _rename_func_attr(attr, renames)
  for gradient in library.gradient:
    gradient.function_name = renames.get(gradient.function_name, gradient.function_name)
    gradient.gradient_func = renames.get(gradient.gradient_func, gradient.gradient_func)
  _rename_nodes(graph_def.node, renames)
  return graph_def


class StampedComputation:
  """A TFF TensorFlow computation as TF concrete functions: `flat tensors -> flat tensors`.

  Attributes:
    name: label used in error messages.
    parameter_type: the TFF parameter type (None for a no-argument computation).
    result_type: the TFF result type.
    input_specs: one `tf.TensorSpec` per flat input leaf.
  """

  def __init__(self, comp: Any, name: str):
    proto = computation_proto(comp)
    if proto.WhichOneof('computation') != 'tensorflow':
      raise ValueError(f'{name} is not a TensorFlow computation '
                       f'(found {proto.WhichOneof("computation")!r}).')
    self.name = name
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
    # Shared names (variables, tables) are made unique per stamped copy, so that copies used
    # from several threads at once never share state.
    suffix = f'tffc_inprocess_{next(_suffix_counter)}'
    graph_def = tensorflow_utils._uniquify_shared_names_with_suffix(  # pylint: disable=protected-access
        graph_def, suffix)
    graph_def = uniquify_function_names(graph_def, suffix)
    fetched = {}

    def import_graph(*inputs):
      input_map = dict(zip(input_names, inputs))
      if input_map:
        input_map = graph_utils.add_control_dep_mappings(input_map)
      if token_name:
        input_map[token_name] = tf.constant(f'tff_conflict_inprocess_{name}')
      returns = output_names + ([init_name] if init_name else [])
      elements = tf.graph_util.import_graph_def(
          graph_def, input_map=input_map, return_elements=returns, name='stamped')
      fetched['outputs'] = elements[:len(output_names)]
      fetched['init'] = elements[len(output_names)] if init_name else None
      return fetched['outputs']

    wrapped = tf.compat.v1.wrap_function(import_graph, self.input_specs)
    feeds = list(wrapped.inputs[:len(self.input_specs)])
    self._run = wrapped.prune(feeds, list(fetched['outputs']))
    self._init = wrapped.prune(feeds, [fetched['init']]) if fetched['init'] is not None else None
    self.num_outputs = len(output_names)

  def __call__(self, flat_inputs: list[Any]) -> list[tf.Tensor]:
    """Runs the computation on flat leaves (tensors, arrays or datasets); returns flat tensors."""
    if len(flat_inputs) != len(self.input_specs):
      raise ValueError(f'{self.name}: expected {len(self.input_specs)} flat inputs, '
                       f'got {len(flat_inputs)}.')
    tensors = [to_tensor(v, s) for v, s in zip(flat_inputs, self.input_specs)]
    if self._init is not None:
      self._init(*tensors)
    outputs = self._run(*tensors)
    return list(outputs)
