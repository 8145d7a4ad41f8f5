"""Cohorts that change: a client with no examples takes part with weight 0, on both runtimes.

For every method, a round over clients (a, b, c) and the same round with an empty client added
give the same model and the same training loss; rounds of 2 and 1 clients follow, the second of
only the empty client, and every weight and measurement stays finite. The default selection runs
FedCorrective on both runtimes and FedMGC (whose client weight is the loss) in process; the rest
is slow.
"""

import collections
import functools

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tests.conftest import make_tiny_client_datasets
from tests.conftest import make_tiny_keras_model
from tests.learning import conftest as h
from tff_conflict import learning
from tff_conflict import runtime

FAST = {('fed_corrective', 'cpp'), ('fed_corrective', 'inprocess'), ('fedmgc', 'inprocess')}
CASES = [pytest.param(name, kind, marks=() if (name, kind) in FAST else pytest.mark.slow)
         for name in sorted(learning.ALGORITHMS) for kind in ('cpp', 'inprocess')]


@functools.lru_cache(maxsize=None)
def _data():
  return make_tiny_client_datasets(num_clients=3, examples_per_client=16, batch_size=8, seed=0)


def _empty():
  return tf.data.Dataset.from_tensor_slices(collections.OrderedDict(
      x=np.zeros((0, h.NUM_FEATURES), np.float32), y=np.zeros((0,), np.int32))).batch(8)


def _flat(metrics, prefix=''):
  out = {}
  for key, value in metrics.items():
    if isinstance(value, collections.abc.Mapping):
      out.update(_flat(value, f'{prefix}{key}/'))
    else:
      out[prefix + key] = np.asarray(value, np.float64)
  return out


def _assert_finite(runner, output):
  for key, value in _flat(output.metrics).items():
    assert np.all(np.isfinite(value)), (key, value)
  for weight in runner.get_model_weights(output.state).trainable:
    assert np.all(np.isfinite(np.asarray(weight)))


@pytest.mark.parametrize('name,kind', CASES)
def test_an_empty_client_takes_part_with_zero_weight(name, kind):
  process = h.named_process(
      name, make_tiny_keras_model, input_spec=h.input_spec(),
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(learning_rate=0.1))
  runner = process if kind == 'cpp' else runtime.make_runner(process, kind)
  state = runner.initialize()
  a, b, c = _data()
  without = runner.next(state, h.client_inputs(process, [a, b, c]))
  with_empty = runner.next(state, h.client_inputs(process, [a, _empty(), b, c]))
  for x, y in zip(runner.get_model_weights(without.state).trainable,
                  runner.get_model_weights(with_empty.state).trainable):
    np.testing.assert_allclose(np.asarray(y), np.asarray(x), rtol=1e-5, atol=1e-6)
  m_without, m_with = _flat(without.metrics), _flat(with_empty.metrics)
  np.testing.assert_allclose(m_with['client_work/train/loss'],
                             m_without['client_work/train/loss'], rtol=1e-5)
  assert m_with['client_work/train/num_examples'] == m_without['client_work/train/num_examples']
  if 'aggregator/num_clients' in m_with:  # the conflict aggregators' diagnostics
    assert m_with['aggregator/num_clients'] == 4
    assert m_with['aggregator/num_excluded_zero_weight'] == 1
    assert m_with['aggregator/num_participating'] == 3
  if 'aggregator/corrective_weights' in m_with:  # the participants' weights only
    np.testing.assert_allclose(m_with['aggregator/corrective_weights'],
                               m_without['aggregator/corrective_weights'], rtol=1e-5)
  _assert_finite(runner, with_empty)
  output = runner.next(with_empty.state, h.client_inputs(process, [a, _empty()]))
  _assert_finite(runner, output)
  output = runner.next(output.state, h.client_inputs(process, [_empty()]))
  _assert_finite(runner, output)
  assert _flat(output.metrics)['client_work/train/num_examples'] == 0
