"""gather: every client stacked or counted, in client order, for 1, 2, 7 and 101 clients; the
C++-runtime memory guard."""

import collections

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tff_conflict.aggregators import gather

D = 3
ROW_TYPE = collections.OrderedDict(update=tff.TensorType(np.float32, [D]),
                                   weight=tff.TensorType(np.float32))


def _build(limit_bytes=None):
  row_in = gather.row_with_status_type(ROW_TYPE)

  @tff.tensorflow.computation(tff.TensorType(np.float32, [D]), tff.TensorType(np.float32))
  def make_row(update, weight):
    return collections.OrderedDict(update=update, weight=weight,
                                   status=gather.row_status(weight, update))

  assert make_row.type_signature.result == row_in

  @tff.federated_computation(tff.FederatedType(tff.TensorType(np.float32, [D]), tff.CLIENTS),
                             tff.FederatedType(tff.TensorType(np.float32), tff.CLIENTS))
  def gather_fn(updates, weights):
    rows = tff.federated_map(make_row, (updates, weights))
    return gather.federated_gather(rows, ROW_TYPE, vector_size=D, limit_bytes=limit_bytes)

  return gather_fn


def test_type_signature():
  fn = _build()
  assert fn.type_signature.result == tff.FederatedType(gather.gathered_type(ROW_TYPE), tff.SERVER)
  assert fn.type_signature.result.member.stacks.update.shape == (None, D)


@pytest.mark.parametrize('num_clients', [1, 2, 7, 101])
def test_every_client_stacked_in_order(num_clients):
  fn = _build()
  updates = [np.full(D, i, np.float32) for i in range(num_clients)]
  weights = [float(i + 1) for i in range(num_clients)]
  out = fn(updates, weights)
  np.testing.assert_array_equal(out['stacks']['update'], np.stack(updates))
  np.testing.assert_array_equal(out['stacks']['weight'], weights)
  np.testing.assert_array_equal(out['counts'], [num_clients, 0, 0])


def test_zero_weight_and_non_finite_rows_are_counted_not_stacked():
  fn = _build()
  updates = [np.full(D, i, np.float32) for i in range(7)]
  weights = [1.0] * 7
  weights[1] = 0.0                 # TFF's "non-finite delta" marker
  updates[3][1] = np.nan
  updates[4][0] = np.inf
  weights[5] = np.nan              # a non-finite weight
  out = fn(updates, weights)
  np.testing.assert_array_equal(out['stacks']['update'][:, 0], [0, 2, 6])
  np.testing.assert_array_equal(out['counts'], [3, 1, 3])


def test_all_excluded_gives_empty_stacks():
  out = _build()([np.zeros(D, np.float32)] * 2, [0.0, 0.0])
  assert out['stacks']['update'].shape == (0, D)
  np.testing.assert_array_equal(out['counts'], [0, 2, 0])


def test_estimated_gather_bytes_by_hand():
  # 1.6 * r * K (K + 1) / 2, rounded up: r = 10 -> 16, 48, 96 bytes for K = 1, 2, 3.
  assert [gather.estimated_gather_bytes(10, k) for k in range(4)] == [0, 16, 48, 96]
  assert gather.estimated_gather_bytes(3, 1) == 5        # 4.8 rounded up


@pytest.mark.parametrize('row_bytes,limit,expected', [
    (10, 15, 0), (10, 16, 1), (10, 47, 1), (10, 48, 2), (10, 96, 3),
    (5, 8 * 5050, 100), (5, 8 * 5050 - 1, 99), (7, 10**9, None)])
def test_max_clients_for(row_bytes, limit, expected):
  k = gather.max_clients_for(row_bytes, limit)
  if expected is not None:
    assert k == expected
  assert gather.estimated_gather_bytes(row_bytes, k) <= limit
  assert limit < gather.estimated_gather_bytes(row_bytes, k + 1)


def test_max_clients_for_d_1_2m_float32_in_24_gib():
  # The figure BENCHMARKS.md quotes: half of a 24 GiB machine, d = 1.2M float32 rows.
  k = gather.max_clients_for(4 * 1_200_000 + 4, 12 * 2**30)
  assert k == 57
  assert gather.max_clients_for(4, None) is None


def test_memory_guard_refuses_round_with_clear_error():
  row_bytes = 4 * D + 4
  limit = gather.estimated_gather_bytes(row_bytes, 2)      # K_max = 2
  fn = _build(limit_bytes=limit)
  np.testing.assert_array_equal(fn([np.ones(D, np.float32)] * 2, [1.0, 1.0])['counts'], [2, 0, 0])
  with pytest.raises(Exception) as info:
    fn([np.ones(D, np.float32)] * 3, [1.0] * 3)
  message = str(info.value)
  assert 'K_max = 2' in message and f'd = {D}' in message and f'{limit} bytes' in message
  # Excluded clients are not stacked, so they do not count against the limit.
  out = fn([np.ones(D, np.float32)] * 4, [1.0, 0.0, 1.0, 0.0])
  np.testing.assert_array_equal(out['counts'], [2, 2, 0])


def test_limit_settings(monkeypatch):
  monkeypatch.setattr(gather, '_limit_override', gather._UNSET)
  monkeypatch.setenv('TFF_CONFLICT_MAX_GATHER_BYTES', '1234')
  assert gather.max_gather_bytes() == 1234
  monkeypatch.setenv('TFF_CONFLICT_MAX_GATHER_BYTES', '0')
  assert gather.max_gather_bytes() is None
  monkeypatch.setenv('TFF_CONFLICT_MAX_GATHER_BYTES', 'lots')
  with pytest.raises(ValueError, match='lots'):
    gather.max_gather_bytes()
  monkeypatch.delenv('TFF_CONFLICT_MAX_GATHER_BYTES')
  assert gather.max_gather_bytes() > 0
  with gather.gather_memory_limit(None):
    assert gather.max_gather_bytes() is None
    with gather.gather_memory_limit(99):
      assert gather.max_gather_bytes() == 99
    assert gather.max_gather_bytes() is None
  assert gather.max_gather_bytes() > 0
  for bad in (0, -1, 1.5, True, '10'):
    with pytest.raises(ValueError, match='max_gather_bytes'):
      gather.set_max_gather_bytes(bad)


def test_row_status():
  assert int(gather.row_status(tf.constant(2.0), tf.constant([1.0]))) == gather.INCLUDED
  assert int(gather.row_status(tf.constant(0.0), tf.constant([1.0]))) == gather.ZERO_WEIGHT
  assert int(gather.row_status(tf.constant(-1.0), tf.constant([1.0]))) == gather.ZERO_WEIGHT
  assert int(gather.row_status(tf.constant(0.0), tf.constant([np.nan]))) == gather.NON_FINITE
  assert int(gather.row_status(tf.constant(1.0), tf.constant([1.0]),
                               tf.constant(np.inf))) == gather.NON_FINITE
