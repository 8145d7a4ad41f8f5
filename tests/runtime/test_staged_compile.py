"""tff_conflict.runtime._staged_compile: TFF's MapReduceForm compiler, component by component,
gives the same components as `tff.backends.mapreduce.get_map_reduce_form_for_computation`."""

import numpy as np
import pytest
import tensorflow_federated as tff

from tests.runtime.test_inprocess import _fed_avg
from tests.runtime.test_inprocess import _secure_process
from tests.runtime.test_inprocess import _stacking_process
from tff_conflict.runtime import _fingerprint
from tff_conflict.runtime import _staged_compile
from tff_conflict.runtime import _tf_stamp
from tff_conflict.runtime import inprocess


@pytest.mark.parametrize('make_process', [_fed_avg, _stacking_process, _secure_process],
                         ids=['fed_avg', 'gathering', 'secure_sums'])
def test_components_equal_tffs_and_arrive_in_order(make_process):
  process = make_process()
  options = inprocess._compile_options()  # pylint: disable=protected-access
  expected = tff.backends.mapreduce.get_map_reduce_form_for_computation(process.next, options)
  received = []
  form = _staged_compile.map_reduce_form(process.next, options,
                                         lambda name, value: received.append((name, value)))
  assert [name for name, _ in received] == ['accumulator'] + list(_staged_compile.ORDER)
  # The accumulator's leaves (what the runner reads from it) are those of `merge`'s argument.
  assert (_tf_stamp.flat_specs(received[0][1]) ==
          _tf_stamp.flat_specs(expected.merge.type_signature.parameter[0]))
  assert form.type_signature == expected.type_signature
  for name, value in received[1:]:
    assert value is getattr(form, name)
    assert value.type_signature == getattr(expected, name).type_signature, name
    assert (_fingerprint.fingerprint(_tf_stamp.computation_proto(value)) ==
            _fingerprint.fingerprint(_tf_stamp.computation_proto(getattr(expected, name)))), name


def test_the_callbacks_errors_propagate():

  def refuse(name, unused_value):
    if name == 'update':
      raise RuntimeError('stop at update')

  with pytest.raises(RuntimeError, match='stop at update'):
    _staged_compile.map_reduce_form(_fed_avg().next, inprocess._compile_options(), refuse)  # pylint: disable=protected-access


def test_a_process_that_is_not_map_reduce_compatible_is_refused():

  @tff.federated_computation(tff.FederatedType(np.float32, tff.CLIENTS))
  def only_clients(values):
    return tff.federated_mean(values)

  with pytest.raises(TypeError):  # TFF's own check of the signature
    _staged_compile.map_reduce_form(only_clients, inprocess._compile_options())  # pylint: disable=protected-access
