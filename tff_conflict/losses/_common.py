"""Shared helpers of the loss kernels: label/logit normalization."""

import tensorflow as tf

from tff_conflict._checks import ArgumentError


def prepare(labels, logits):
  """Converts to `(labels int32 [B], logits float [B, C])`.

  `labels` may have shape `[B]` or `[B, 1]` and any integer or float dtype (Keras sometimes hands
  float labels to a loss); `logits` must have rank 2 and a floating dtype.
  """
  logits = tf.convert_to_tensor(logits)
  if not logits.dtype.is_floating:
    raise ArgumentError(argument='logits', value=logits, message=(
        f'logits must have a floating dtype, got {logits.dtype!r}'))
  if logits.shape.rank is not None and logits.shape.rank != 2:
    raise ArgumentError(argument='logits', value=logits, message=(
        f'logits must have shape [batch, num_classes], got shape {logits.shape}'))
  labels = tf.convert_to_tensor(labels)
  if labels.shape.rank == 2:
    if labels.shape[1] is not None and labels.shape[1] != 1:
      raise ArgumentError(argument='labels', value=labels, message=(
          f'labels must have shape [batch] or [batch, 1], got shape {labels.shape}'))
    labels = tf.reshape(labels, [-1])
  elif labels.shape.rank is not None and labels.shape.rank != 1:
    raise ArgumentError(argument='labels', value=labels, message=(
        f'labels must have shape [batch] or [batch, 1], got shape {labels.shape}'))
  labels = tf.cast(labels, tf.int32)
  return labels, logits


def true_class_log_prob(labels, log_probs):
  """`log_probs[b, labels[b]]` for each example b (raises on CPU for out-of-range labels)."""
  return tf.gather(log_probs, labels[:, tf.newaxis], axis=1, batch_dims=1)[:, 0]
