"""gather: every client stacked or counted, in client order, whatever the tree of accumulate and
merge; the counter layout (no quadratic copies); the C++-runtime memory guard."""

import collections

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tff_conflict.aggregators import _gather as gather

D = 3
ROW_TYPE = collections.OrderedDict(update=tff.TensorType(np.float32, [D]),
                                   weight=tff.TensorType(np.float32))

# (radices, small_row_bytes): the default (this D makes every field small, so concatenation),
# the default counter with every field in pieces, and a tiny mixed-radix counter (capacity 5) that
# carries and overflows within a few clients.
LAYOUTS = {
    'small_fields': dict(),
    'pieces': dict(small_row_bytes=0),
    'pieces_radices_2_3': dict(small_row_bytes=0, radices=(2, 3)),
}


def _build(limit_bytes=None, **layout):
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
    return gather.federated_gather(rows, ROW_TYPE, vector_size=D, limit_bytes=limit_bytes,
                                   **layout)

  return gather_fn


@pytest.fixture(scope='module', params=sorted(LAYOUTS))
def gather_fn(request):
  return _build(**LAYOUTS[request.param])


def test_type_signature():
  fn = _build()
  assert fn.type_signature.result == tff.FederatedType(gather.gathered_type(ROW_TYPE), tff.SERVER)
  assert fn.type_signature.result.member.stacks.update.shape == (None, D)


def test_pieces_are_declared_without_a_static_row_shape():
  """Grappler (run by TFF's compiler) allocates a [1, d] feed per [None, d] placeholder."""
  zero, accumulate, merge, report = gather.build_gather_computations(
      ROW_TYPE, limit_bytes=None, vector_size=D, small_row_bytes=0)
  acc_type = accumulate.type_signature.parameter[0]
  for piece in acc_type.pieces:
    assert piece.update.shape == (None, None) and piece.weight.shape == (None,)
  assert merge.type_signature.result == acc_type
  assert report.type_signature.result == gather.gathered_type(ROW_TYPE)
  assert report.type_signature.result.stacks.update.shape == (None, D)
  # With the default layout the weight is a small field, concatenated as [None].
  _, accumulate, _, _ = gather.build_gather_computations(ROW_TYPE, limit_bytes=None,
                                                         vector_size=D)
  assert accumulate.type_signature.parameter[0].small.weight.shape == (None,)


@pytest.mark.parametrize('num_clients', [1, 2, 7, 101])
def test_every_client_stacked_in_order(gather_fn, num_clients):
  updates = [np.full(D, i, np.float32) for i in range(num_clients)]
  weights = [float(i + 1) for i in range(num_clients)]
  out = gather_fn(updates, weights)
  np.testing.assert_array_equal(out['stacks']['update'], np.stack(updates))
  np.testing.assert_array_equal(out['stacks']['weight'], weights)
  np.testing.assert_array_equal(out['counts'], [num_clients, 0, 0])


def test_zero_weight_and_non_finite_rows_are_counted_not_stacked(gather_fn):
  updates = [np.full(D, i, np.float32) for i in range(9)]
  weights = [1.0] * 9
  weights[1] = 0.0                 # TFF's "non-finite delta" marker
  updates[3][1] = np.nan
  updates[4][0] = np.inf
  weights[5] = np.nan              # a non-finite weight
  out = gather_fn(updates, weights)
  np.testing.assert_array_equal(out['stacks']['update'][:, 0], [0, 2, 6, 7, 8])
  np.testing.assert_array_equal(out['counts'], [5, 1, 3])


def test_all_excluded_gives_empty_stacks(gather_fn):
  out = gather_fn([np.zeros(D, np.float32)] * 2, [0.0, 0.0])
  assert out['stacks']['update'].shape == (0, D)
  assert out['stacks']['weight'].shape == (0,)
  np.testing.assert_array_equal(out['counts'], [0, 2, 0])


# The pure-TF layout, eagerly: random trees of accumulate chains and merges against a list.


def _row(i, status=gather.INCLUDED):
  return collections.OrderedDict(update=tf.fill([D], float(i)), weight=tf.constant(float(i)),
                                 status=tf.constant(status, tf.int32))


@pytest.mark.parametrize('radices,small_row_bytes',
                         [((2, 3), 0), ((3,), 0), ((2, 2, 2), 4), ((2, 3), 64)])
def test_random_accumulate_merge_trees_keep_client_order(radices, small_row_bytes):
  layout = gather._Layout(ROW_TYPE, radices, small_row_bytes)
  rng = np.random.default_rng(sum(radices) + small_row_bytes)
  i = 0

  def chain(acc, expected, length):
    nonlocal i
    for _ in range(length):
      status = int(rng.choice([gather.INCLUDED] * 3 + [gather.ZERO_WEIGHT, gather.NON_FINITE]))
      acc = layout.accumulate(acc, _row(i, status))
      if status == gather.INCLUDED:
        expected = expected + [i]
      i += 1
    return acc, expected

  for _ in range(25):
    # A few chains of up to 3 capacities (carries, overflows), merged in a random tree, then a
    # chain on the merged accumulator.
    parts = [chain(layout.zero(), [], int(rng.integers(0, 16))) for _ in range(rng.integers(1, 5))]
    while len(parts) > 1:
      k = int(rng.integers(0, len(parts) - 1))
      (a, ea), (b, eb) = parts[k], parts[k + 1]
      parts[k:k + 2] = [(layout.merge(a, b), ea + eb)]
    acc, expected = chain(*parts[0], int(rng.integers(0, 4)))
    out = layout.report(acc)
    assert out['stacks']['update'].numpy()[:, 0].tolist() == expected
    assert out['stacks']['weight'].numpy().tolist() == expected
    assert int(out['counts'][gather.INCLUDED]) == len(expected)


def test_lone_client_row_is_in_the_slot_merge_concatenates():
  """What the in-process runner's buffer relies on."""
  layout = gather._Layout(ROW_TYPE, (2, 3), 0)
  singles = [layout.accumulate(layout.zero(), _row(i)) for i in range(3)]
  for single in singles:
    filled = [p for p in layout.pieces if single['pieces'][p]['update'].shape[0]]
    assert filled == ['l0s0']
  merged = layout.merge(layout.merge(singles[0], singles[1]), singles[2])
  np.testing.assert_array_equal(
      merged['pieces']['l0s0']['update'],
      tf.concat([s['pieces']['l0s0']['update'] for s in singles], 0))


def test_canonical_layout_by_hand():
  """Radices (2, 3): rows 0..4 fill l0s0, then carry into l1s0 / l1s1; row 5 overflows."""
  layout = gather._Layout(ROW_TYPE, (2, 3), 0)
  assert layout.pieces == ['head', 'l1s0', 'l1s1', 'l0s0', 'tail']

  def rows_in(acc):
    return {p: acc['pieces'][p]['update'].numpy()[:, 0].tolist() for p in layout.pieces
            if acc['pieces'][p]['update'].shape[0]}

  acc = layout.zero()
  seen = []
  for i in range(7):
    acc = layout.accumulate(acc, _row(i))
    seen.append(rows_in(acc))
  assert seen == [
      {'l0s0': [0]},
      {'l1s0': [0, 1]},
      {'l1s0': [0, 1], 'l0s0': [2]},
      {'l1s0': [0, 1], 'l1s1': [2, 3]},
      {'l1s0': [0, 1], 'l1s1': [2, 3], 'l0s0': [4]},
      {'head': [0, 1, 2, 3, 4, 5]},
      {'head': [0, 1, 2, 3, 4, 5], 'l0s0': [6]},
  ]
  merged = layout.merge(acc, layout.accumulate(layout.zero(), _row(7)))
  assert rows_in(merged) == {'l0s0': [0, 1, 2, 3, 4, 5, 6, 7]}
  assert rows_in(layout.accumulate(merged, _row(8))) == {'l0s0': list(range(8)), 'tail': [8]}


def test_counter_copied_rows_by_hand():
  # Radices (2, 3), as in test_canonical_layout_by_hand: rows 1 and 3 carry 2 rows each, row 5
  # overflows (head gets 6 rows), rows 7 and 9 carry 2, row 11 overflows again (head: 12 rows).
  assert [gather.counter_copied_rows(k, (2, 3)) for k in range(1, 13)] == [
      0, 2, 2, 4, 4, 10, 10, 12, 12, 14, 14, 26]
  # The default counter: nothing below 16 rows, one copy per row up to 255, two up to 4095.
  assert gather.counter_copied_rows(15) == 0
  assert gather.counter_copied_rows(16) == 16
  assert gather.counter_copied_rows(100) == 96
  assert gather.counter_copied_rows(256) == 256 + 240
  with pytest.raises(ValueError, match='radices'):
    gather.counter_copied_rows(3, (1, 2))


def _copied_rows_by_simulation(num_rows, radices):
  """The counter's copies, row by row (docs/design.md, "The gather")."""
  copied, head_rows, capacity = 0, 0, int(np.prod(radices))
  for n in range(num_rows):
    level, rem = 0, n
    while level < len(radices) and rem % radices[level] == radices[level] - 1:
      rem //= radices[level]
      level += 1
    if level == len(radices):
      head_rows += capacity
      copied += head_rows
    elif level > 0:
      copied += int(np.prod(radices[:level]))
  return copied


def test_counter_copied_rows_closed_form_equals_simulation():
  rng = np.random.default_rng(0)
  for radices in [(2,), (2, 3), (3, 2, 4), (16, 16, 16), (5, 7)]:
    for k in list(range(40)) + [int(x) for x in rng.integers(40, 5000, size=10)]:
      assert gather.counter_copied_rows(k, radices) == _copied_rows_by_simulation(k, radices)


def test_estimated_gather_bytes_by_hand():
  # K = 2, no copies: 10 * (0 + 5 * 2) for the pieces, 2 * (3 + 5 * 2) for the small fields.
  assert gather.estimated_gather_bytes(10, 2, small_row_bytes=2) == 126
  assert gather.estimated_gather_bytes(10, 0) == 0
  # Radices (2, 3), K = 6: 10 copied rows.
  assert gather.estimated_gather_bytes(1, 6, radices=(2, 3)) == 10 + 30


@pytest.mark.parametrize('row_bytes,small,limit', [
    (10, 0, 49), (10, 0, 50), (10, 4, 10**4), (4_800_000, 4, 12 * 2**30), (7, 0, 10**9)])
def test_max_clients_for(row_bytes, small, limit):
  k = gather.max_clients_for(row_bytes, limit, small_row_bytes=small)
  assert gather.estimated_gather_bytes(row_bytes, k, small_row_bytes=small) <= limit
  assert limit < gather.estimated_gather_bytes(row_bytes, k + 1, small_row_bytes=small)
  assert gather.max_clients_for(row_bytes, None) is None


def test_max_clients_for_d_1_2m_float32_in_12_gib():
  # Half of a 24 GiB machine, d = 1.2M float32 update rows (BENCHMARKS.md quotes the guard for
  # the real model, d = 1,206,590 on the measured free memory).
  assert gather.max_clients_for(4 * 1_200_000, 12 * 2**30, small_row_bytes=4) == 408
  assert gather.max_clients_for(10, 49) == 0


def test_memory_guard_refuses_round_with_clear_error():
  small_bytes = 4 * D + 4
  limit = gather.estimated_gather_bytes(0, 2, small_row_bytes=small_bytes)   # K_max = 2
  fn = _build(limit_bytes=limit)
  np.testing.assert_array_equal(fn([np.ones(D, np.float32)] * 2, [1.0, 1.0])['counts'], [2, 0, 0])
  with pytest.raises(Exception) as info:
    fn([np.ones(D, np.float32)] * 3, [1.0] * 3)
  message = str(info.value)
  assert 'K_max = 2' in message and f'd = {D}' in message and f'{limit} bytes' in message
  # Excluded clients are not stacked, so they do not count against the limit.
  out = fn([np.ones(D, np.float32)] * 4, [1.0, 0.0, 1.0, 0.0])
  np.testing.assert_array_equal(out['counts'], [2, 2, 0])


def test_a_limit_that_admits_no_client_is_refused_when_built():
  small_bytes = 4 * D + 4
  one = gather.estimated_gather_bytes(0, 1, small_row_bytes=small_bytes)
  with pytest.raises(ValueError, match=rf'max_gather_bytes = {one - 1} admits no client: .* '
                                       rf'd = {D} .* needs an estimated {one} bytes'):
    _build(limit_bytes=one - 1)
  fn = _build(limit_bytes=one)   # K_max = 1
  np.testing.assert_array_equal(fn([np.ones(D, np.float32)], [1.0])['counts'], [1, 0, 0])


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


def test_bad_radices():
  for bad in ((), (1,), (2, 0), (2.0,), (True, 2)):
    with pytest.raises(ValueError, match='radices'):
      gather._Layout(ROW_TYPE, bad, 0)


def test_row_status():
  assert int(gather.row_status(tf.constant(2.0), tf.constant([1.0]))) == gather.INCLUDED
  assert int(gather.row_status(tf.constant(0.0), tf.constant([1.0]))) == gather.ZERO_WEIGHT
  assert int(gather.row_status(tf.constant(-1.0), tf.constant([1.0]))) == gather.ZERO_WEIGHT
  assert int(gather.row_status(tf.constant(0.0), tf.constant([np.nan]))) == gather.NON_FINITE
  assert int(gather.row_status(tf.constant(1.0), tf.constant([1.0]),
                               tf.constant(np.inf))) == gather.NON_FINITE
