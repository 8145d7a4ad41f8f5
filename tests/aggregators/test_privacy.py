"""Privacy and the conflict aggregators: central DP refuses them with the reason; clipping and
zeroing around them, and client-side clipping, compose and run."""

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff
import tensorflow_privacy as tfp

from tests.conftest import make_tiny_client_datasets
from tests.conftest import make_tiny_keras_model
from tests.learning import conftest as h
from tff_conflict import aggregators
from tff_conflict import learning


def _query():
  return tfp.GaussianSumQuery(l2_norm_clip=1.0, stddev=0.1)


@pytest.mark.parametrize('factory', [
    aggregators.GradientHarmonizationFactory(seed=0),
    aggregators.DominantGradientCorrectionFactory(weights_are_losses=False),
    aggregators.PrincipalGradientFactory(),
    aggregators.CorrectiveGradientFactory(),
    tff.aggregators.clipping_factory(1.0, aggregators.GradientHarmonizationFactory(seed=0)),
])
def test_central_dp_refuses_a_conflict_aggregator_and_says_why(factory):
  # TFF alone: a bare TypeError about the factory's type.
  with pytest.raises(TypeError, match='UnweightedAggregationFactory'):
    tff.aggregators.DifferentiallyPrivateFactory(_query(), record_aggregation_factory=factory)
  with pytest.raises(aggregators.PrivacyCompositionError) as info:
    aggregators.differentially_private_factory(_query(), record_aggregation_factory=factory)
  message = str(info.value)
  assert 'central differential privacy' in message
  assert "every client's update in the clear" in message and 'secure aggregation' in message
  assert 'clipping_factory / zeroing_factory' in message and '\n' not in message


def test_central_dp_without_a_conflict_aggregator_is_tffs():
  made = aggregators.differentially_private_factory(
      _query(), record_aggregation_factory=tff.aggregators.SumFactory())
  assert isinstance(made, tff.aggregators.DifferentiallyPrivateFactory)
  assert isinstance(aggregators.differentially_private_factory(_query()),
                    tff.aggregators.DifferentiallyPrivateFactory)
  assert aggregators.privacy.gathering_factories_in(tff.aggregators.MeanFactory()) == []


@pytest.mark.parametrize('wrap', [
    lambda inner: tff.aggregators.clipping_factory(0.05, inner),
    lambda inner: tff.aggregators.zeroing_factory(1e3, inner),
])
def test_clipping_and_zeroing_around_fedgh_and_client_side_clipping_compose(wrap):
  process = learning.build_process(
      make_tiny_keras_model, input_spec=h.input_spec(),
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(learning_rate=0.1),
      aggregator=wrap(aggregators.GradientHarmonizationFactory(seed=0)),
      clip_norm=1.0)   # each local step clipped on the client, before the update leaves
  state = process.initialize()
  output = process.next(state, make_tiny_client_datasets(num_clients=3))
  measurements = output.metrics['aggregator']
  flat = tf.nest.flatten(measurements)
  assert flat and all(np.all(np.isfinite(np.asarray(v, np.float64))) for v in flat)
  text = str(measurements)
  assert 'conflict_fraction_before' in text   # FedGH's diagnostics, nested under the wrapper
  weights = process.get_model_weights(output.state).trainable
  assert all(np.all(np.isfinite(w)) for w in weights)
