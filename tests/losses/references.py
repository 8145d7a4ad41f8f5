"""Float64 NumPy references of the client losses, written from the papers with plain loops."""

import math

import numpy as np


def log_softmax_row(z):
  m = max(z)
  lse = m + math.log(sum(math.exp(v - m) for v in z))
  return [v - lse for v in z], lse


def softmax_row(z):
  logp, _ = log_softmax_row(z)
  return [math.exp(v) for v in logp]


def cross_entropy(labels, logits):
  out = []
  for y, z in zip(labels, np.asarray(logits, np.float64).tolist()):
    logp, _ = log_softmax_row(z)
    out.append(-logp[int(y)])
  return np.array(out)


def focal(labels, logits, gamma, beta):
  """fedmgc eq. (10): -beta (1 - p_t)^gamma log p_t, per example."""
  out = []
  for y, z in zip(labels, np.asarray(logits, np.float64).tolist()):
    logp, _ = log_softmax_row(z)
    # 1 - p_t as -expm1(log p_t): `1.0 - math.exp(...)` loses ~1e-9 relative accuracy in float64
    # when p_t is close to 1, more than the library's error.
    one_minus_p_t = -math.expm1(logp[int(y)])
    out.append(-beta * one_minus_p_t ** gamma * logp[int(y)])
  return np.array(out)


def margin(labels, logits, lam):
  """fedld eq. (3): CE + lambda log(1 + |z|^2), per example."""
  ce = cross_entropy(labels, logits)
  out = []
  for c, z in zip(ce, np.asarray(logits, np.float64).tolist()):
    out.append(c + lam * math.log(1.0 + sum(v * v for v in z)))
  return np.array(out)


def margin_batch_probabilities(labels, logits, lam):
  """The fedld authors' code: mean CE + lambda log(1 + |P|_F^2), P the batch's softmax
  probabilities; returned per example as CE_b + the batch term (their mean is the loss)."""
  ce = cross_entropy(labels, logits)
  squared = sum(v * v for z in np.asarray(logits, np.float64).tolist() for v in softmax_row(z))
  return np.array([c + lam * math.log(1.0 + squared) for c in ce])


def class_counts(labels, num_classes):
  counts = [0] * num_classes
  for y in labels:
    counts[int(y)] += 1
  return counts


def calibrated_targets(labels, logits, counts=None):
  """fedga eq. (10): q_j = 1, q_i = (N_j - N_i) / N_j p_i; N of the batch unless given."""
  logits = np.asarray(logits, np.float64).tolist()
  num_classes = len(logits[0])
  if counts is None:
    counts = class_counts(labels, num_classes)
  q = []
  for y, z in zip(labels, logits):
    p = softmax_row(z)
    j = int(y)
    row = []
    for i in range(num_classes):
      row.append(1.0 if i == j else (counts[j] - counts[i]) / counts[j] * p[i])
    q.append(row)
  return np.array(q)


def calibrated(labels, logits, counts=None):
  """FedGA (docs/methods.md, FedGA): per example logsumexp(z) - q . z."""
  q = calibrated_targets(labels, logits, counts)
  out = []
  for qb, z in zip(q.tolist(), np.asarray(logits, np.float64).tolist()):
    _, lse = log_softmax_row(z)
    out.append(lse - sum(a * b for a, b in zip(qb, z)))
  return np.array(out)


def calibrated_soft_target(labels, logits, counts=None):
  """The fedga authors' code: per example the soft-target cross-entropy -sum_i q_i log p_i."""
  q = calibrated_targets(labels, logits, counts)
  out = []
  for qb, z in zip(q.tolist(), np.asarray(logits, np.float64).tolist()):
    logp, _ = log_softmax_row(z)
    out.append(-sum(a * b for a, b in zip(qb, logp)))
  return np.array(out)


def calibrated_soft_target_gradient(labels, logits, counts=None):
  """d/dz of -sum_i q_i log p_i with q held constant: (sum_i q_i) p - q, per example."""
  q = calibrated_targets(labels, logits, counts)
  grad = []
  for qb, z in zip(q.tolist(), np.asarray(logits, np.float64).tolist()):
    p = softmax_row(z)
    total = sum(qb)
    grad.append([total * pi - qi for pi, qi in zip(p, qb)])
  return np.array(grad)


def softmax(logits):
  return np.array([softmax_row(z) for z in np.asarray(logits, np.float64).tolist()])


def numeric_gradient(fn, logits, h=1e-6):
  """Central differences of sum(fn(logits)) with respect to each logit (float64)."""
  logits = np.asarray(logits, np.float64)
  grad = np.zeros_like(logits)
  for b in range(logits.shape[0]):
    for c in range(logits.shape[1]):
      up = logits.copy()
      down = logits.copy()
      up[b, c] += h
      down[b, c] -= h
      grad[b, c] = (np.sum(fn(up)) - np.sum(fn(down))) / (2 * h)
  return grad
