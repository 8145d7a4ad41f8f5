"""A client's label outside [0, classes), through every builder, on TFF's C++ runtime and on the
in-process runner: one `runtime.DataError` of at most 3 lines naming the range, not the runtime's
dump."""

import collections

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tests.conftest import make_tiny_keras_model
from tests.learning import conftest as h
from tff_conflict import learning
from tff_conflict import runtime
from tff_conflict.runtime import _errors

NUM_CLASSES = 3


def _client(label):
  x = np.random.default_rng(0).normal(size=(6, 4)).astype(np.float32)
  y = np.array([0, 1, 2, 0, 1, 2], np.int32)
  y[4] = label
  return tf.data.Dataset.from_tensor_slices(collections.OrderedDict(x=x, y=y)).batch(3)


def _process(name):
  return h.named_process(
      name, make_tiny_keras_model, input_spec=_client(0).element_spec,
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(learning_rate=0.1))


def _assert_clean(info, label):
  message = str(info.value)
  assert len(message.splitlines()) <= 3, message
  assert message.startswith(f'labels must be class indices in [0, {NUM_CLASSES})'), message
  labels = message.rsplit("the batch's labels: [", 1)[1].rstrip(']').split()
  assert str(label) in labels, message   # the batch that failed, with its bad label
  assert info.value.__cause__ is None and info.value.__context__ is None   # no dump chained


_DEFAULT = ('fedavg', 'fedga')


@pytest.mark.parametrize('name', [n if n in _DEFAULT else pytest.param(n, marks=pytest.mark.slow)
                                  for n in sorted(learning.ALGORITHMS)])
@pytest.mark.parametrize('label', [NUM_CLASSES, -1])
def test_a_label_out_of_range_on_the_in_process_runner(name, label):
  process = _process(name)
  runner = runtime.make_runner(process, 'inprocess')
  state = runner.initialize()
  with pytest.raises(runtime.DataError) as info:
    runner.next(state, h.client_inputs(process, [_client(0), _client(label)]))
  _assert_clean(info, label)


@pytest.mark.parametrize('name', [n if n == 'fedavg' else pytest.param(n, marks=pytest.mark.slow)
                                  for n in sorted(learning.ALGORITHMS)])
def test_a_label_equal_to_the_number_of_classes_on_the_cpp_runtime(name):
  process = _process(name)
  state = process.initialize()
  with pytest.raises(runtime.DataError) as info:
    process.next(state, h.client_inputs(process, [_client(0), _client(NUM_CLASSES)]))
  _assert_clean(info, NUM_CLASSES)


def test_other_errors_pass_through_unchanged():
  error = RuntimeError('assertion failed: [some other check] [Condition x < y did not hold]')
  assert _errors.data_error(error) is None

  def fail():
    raise error

  with pytest.raises(RuntimeError) as info:
    _errors.translating(fail)()
  assert info.value is error
