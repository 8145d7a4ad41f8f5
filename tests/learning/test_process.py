"""`build_process`'s resolution of names and objects (no TFF build)."""

import tensorflow as tf
import tensorflow_federated as tff

from tff_conflict import aggregators
from tff_conflict import learning
from tff_conflict import losses


def test_loss_names_give_new_objects_with_the_papers_defaults():
  with tf.Graph().as_default():
    focal = learning.resolve_loss('focal')()
    assert isinstance(focal, losses.FocalLoss)
    assert (focal.get_config()['gamma'], focal.get_config()['beta']) == (0.5, 1.0)
    margin = learning.resolve_loss('margin')()
    assert margin.get_config()['margin_weight'] == 0.01
    assert learning.resolve_loss('calibrated', dict(counts='dataset'))().counts == 'dataset'
    ce = learning.resolve_loss('ce')()
    assert isinstance(ce, tf.keras.losses.SparseCategoricalCrossentropy)
    assert ce.get_config()['from_logits']


def test_loss_object_is_copied_per_model():
  original = losses.FocalLoss(gamma=1.5, beta=2.0)
  make = learning.resolve_loss(original)
  first, second = make(), make()
  assert first is not original and first is not second
  assert first.get_config() == original.get_config()


def test_aggregator_names_and_objects():
  assert isinstance(learning.resolve_aggregator('mean'), tff.aggregators.MeanFactory)
  dgc = learning.resolve_aggregator('dgc')
  assert isinstance(dgc, aggregators.DominantGradientCorrectionFactory)
  assert learning.registry.weights_are_losses(dgc)
  assert not learning.registry.weights_are_losses(
      learning.resolve_aggregator('dgc', dict(weights_are_losses=False)))
  assert isinstance(learning.resolve_aggregator('principal'), aggregators.PrincipalGradientFactory)
  assert isinstance(learning.resolve_aggregator('fedgh', dict(order='index', seed=3)),
                    aggregators.GradientHarmonizationFactory)
  corrective = learning.resolve_aggregator('corrective', dict(alpha=0.0))
  assert learning.registry.is_corrective_factory(corrective)
  mean = tff.aggregators.MeanFactory()
  assert learning.resolve_aggregator(mean) is mean
  wrapped = learning.resolve_aggregator(tff.aggregators.UnweightedMeanFactory())
  assert isinstance(wrapped, tff.aggregators.WeightedAggregationFactory)
