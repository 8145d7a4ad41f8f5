"""`learning.check_arguments`: a builder's checks without building its process (what a benchmark
runs for every process of its plan before any run)."""

import pytest
import tensorflow_federated as tff

from tests.conftest import make_tiny_hidden_keras_model
from tests.conftest import make_tiny_keras_model
from tests.learning import conftest as h
from tff_conflict import _checks
from tff_conflict import learning


def _sgd():
  return tff.learning.optimizers.build_sgdm(learning_rate=0.1)


@pytest.fixture
def no_composition(monkeypatch):
  """Makes composing a process fail loudly: a check must stop before it."""
  def refuse(*args, **kwargs):
    raise AssertionError('check_arguments composed a process')
  monkeypatch.setattr(tff.learning.templates, 'compose_learning_process', refuse)


@pytest.mark.parametrize('build, kwargs', [
    (learning.build_fedavg, {}),
    (learning.build_fednova, dict(aggregator='fedgh')),
    (learning.build_feddecorr, {}),
    (learning.build_scaffold, dict(num_clients=5)),
    (learning.build_process, dict(loss='calibrated', aggregator='fedgh')),
])
def test_good_arguments_pass_without_building(build, kwargs, no_composition):
  model_fn = (make_tiny_hidden_keras_model if build is learning.build_feddecorr
              else make_tiny_keras_model)
  learning.check_arguments(build, model_fn, input_spec=h.input_spec(),
                           client_optimizer_fn=_sgd(), **kwargs)


@pytest.mark.parametrize('build, kwargs, argument', [
    (learning.build_fednova, dict(aggregator='corrective'), 'normalized_averaging'),
    (learning.build_scaffold, dict(num_clients=5, aggregator='corrective'), 'aggregator'),
    (learning.build_process, dict(loss='focal', loss_kwargs=dict(gamma=-1.0)), 'gamma'),
    (learning.build_fedavg, dict(client_weighting='sometimes'), 'client_weighting'),
])
def test_bad_arguments_raise_the_builders_error(build, kwargs, argument, no_composition):
  with pytest.raises(_checks.ArgumentError) as e:
    learning.check_arguments(build, make_tiny_keras_model, input_spec=h.input_spec(),
                             client_optimizer_fn=_sgd(), **kwargs)
  assert argument in e.value.argument


def test_a_builder_that_reaches_no_library_builder_is_called_whole():
  calls = []
  learning.check_arguments(lambda *a, **k: calls.append((a, k)), 1, x=2)
  assert calls == [((1,), {'x': 2})]
  # and the checking mode ends with the call: a build afterwards builds
  process = learning.build_fedavg(make_tiny_keras_model, input_spec=h.input_spec(),
                                  client_optimizer_fn=_sgd())
  assert isinstance(process, tff.learning.templates.LearningProcess)


@pytest.mark.parametrize('build, kwargs, argument', [
    (learning.build_fednova, dict(aggregator='corrective'), 'normalized_averaging'),
    (learning.build_scaffold, dict(num_clients=5, aggregator='corrective'), 'aggregator'),
    (learning.build_fedmgc, dict(gamma=-1.0), 'gamma'),
])
def test_without_a_model_every_other_argument_is_checked(build, kwargs, argument,
                                                         no_composition):
  with pytest.raises(_checks.ArgumentError) as e:
    learning.check_arguments(build, learning.ANY_MODEL, client_optimizer_fn=_sgd(), **kwargs)
  assert argument in e.value.argument
  learning.check_arguments(build, learning.ANY_MODEL, client_optimizer_fn=_sgd(),
                           **{k: v for k, v in kwargs.items() if k == 'num_clients'})
  with pytest.raises(_checks.ArgumentError):   # outside a check, it is no model
    build(learning.ANY_MODEL, client_optimizer_fn=_sgd(),
          **{k: v for k, v in kwargs.items() if k == 'num_clients'})
