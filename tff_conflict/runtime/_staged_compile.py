"""TFF's MapReduceForm compiler, run one component at a time, each handed over when compiled.

`tff.backends.mapreduce.get_map_reduce_form_for_computation` returns the ten components of a
round's `MapReduceForm` together, at the end of several hundred milliseconds of Python
(BENCHMARKS.md, "Cold start"). `map_reduce_form` makes the same calls to TFF's compiler
(`form_utils` in TFF 0.87, the version this project pins) and gives each component to a callback as
soon as it exists, so that the caller can prepare it (`InProcessRunner` stamps it and has
TensorFlow instantiate it on another thread) while the rest is still being compiled. It also
compiles the components in another order: what a client runs first (`work`, and `zero` and
`accumulate`, which a FedAvg-like round fuses with it), then the server's `update`, whose
instantiation costs most after the client's, then `prepare`, `merge`, `report` and the secure
sums' parameters. Each component is compiled from its own part of the split computation and nothing
of one enters another, so the order does not change them: `tests/runtime/test_staged_compile.py`
compares every component with the one TFF's function compiles (`_fingerprint`).
"""

from collections.abc import Callable
from typing import Any

import tensorflow as tf

from tensorflow_federated.python.core.backends.mapreduce import form_utils
from tensorflow_federated.python.core.backends.mapreduce import forms
from tensorflow_federated.python.core.impl.compiler import building_block_factory
from tensorflow_federated.python.core.impl.compiler import tree_transformations
from tensorflow_federated.python.core.impl.computation import computation_impl
from tensorflow_federated.python.core.impl.context_stack import context_stack_impl

# The components in the order they are compiled and handed over.
ORDER = ('work', 'zero', 'accumulate', 'update', 'prepare', 'merge', 'report',
         'secure_sum_bitwidth', 'secure_sum_max_input', 'secure_modular_sum_modulus')

Callback = Callable[[str, Any], None]


def accumulator_type(before_aggregate: Any) -> Any:
  """The TFF type of `federated_aggregate`'s accumulator (`merge`'s first argument)."""
  federated_aggregate = building_block_factory.select_output_from_lambda(
      before_aggregate, 'federated_aggregate_param')
  return federated_aggregate.type_signature.result[3].parameter[0]


def map_reduce_form(comp: Any, grappler_config: tf.compat.v1.ConfigProto,
                    on_component: Callback | None = None) -> forms.MapReduceForm:
  """`get_map_reduce_form_for_computation(comp, grappler_config)`, component by component.

  Args:
    comp: a `tff.Computation` that TFF can compile to MapReduceForm (a learning process's `next`).
    grappler_config: as for TFF's function (merged with TFF's defaults the same way).
    on_component: called as `on_component('accumulator', type)` with the accumulator's TFF type
      before any component is compiled, then as `on_component(name, computation)` for each
      component (`ORDER`) as soon as it is compiled. Its exceptions propagate.

  Returns:
    The `tff.backends.mapreduce.MapReduceForm`, equal to TFF's.
  """
  notify = on_component or (lambda name, value: None)
  comp_bb = form_utils.check_computation_compatible_with_map_reduce_form(comp)
  config = form_utils._merge_grappler_config_with_default(grappler_config)  # pylint: disable=protected-access
  comp_bb, _ = tree_transformations.uniquify_reference_names(comp_bb)
  before_broadcast, after_broadcast = form_utils._split_ast_on_broadcast(comp_bb)  # pylint: disable=protected-access
  before_aggregate, after_aggregate = form_utils._split_ast_on_aggregate(after_broadcast)  # pylint: disable=protected-access
  notify('accumulator', accumulator_type(before_aggregate))

  components = {}

  def compiled(name: str, building_block: Any) -> None:
    components[name] = computation_impl.ConcreteComputation(
        computation_proto=building_block.proto, context_stack=context_stack_impl.context_stack)
    notify(name, components[name])

  federated_aggregate = building_block_factory.select_output_from_lambda(
      before_aggregate, 'federated_aggregate_param')
  select_value = form_utils._compile_selected_output_to_no_argument_tensorflow  # pylint: disable=protected-access
  select_function = form_utils._compile_selected_output_as_tensorflow_function  # pylint: disable=protected-access
  compiled('work', form_utils._extract_work(before_aggregate, config))  # pylint: disable=protected-access
  compiled('zero', select_value(federated_aggregate, 1, config))
  compiled('accumulate', select_function(federated_aggregate, 2, config))
  compiled('update', form_utils._extract_update(after_aggregate, config))  # pylint: disable=protected-access
  compiled('prepare', form_utils._extract_prepare(before_broadcast, config))  # pylint: disable=protected-access
  compiled('merge', select_function(federated_aggregate, 3, config))
  compiled('report', select_function(federated_aggregate, 4, config))
  for name, intrinsic in (('secure_sum_bitwidth', 'federated_secure_sum_bitwidth_param'),
                          ('secure_sum_max_input', 'federated_secure_sum_param'),
                          ('secure_modular_sum_modulus', 'federated_secure_modular_sum_param')):
    compiled(name, select_value(before_aggregate, (intrinsic, 1), config))
  return forms.MapReduceForm(comp.type_signature, *(components[name] for name in (
      'prepare', 'work', 'zero', 'accumulate', 'merge', 'report', 'secure_sum_bitwidth',
      'secure_sum_max_input', 'secure_modular_sum_modulus', 'update')))
