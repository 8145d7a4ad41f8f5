"""Random logits/labels for the loss tests."""

import numpy as np
import pytest


@pytest.fixture
def random_batch():
  rng = np.random.default_rng(1234)
  labels = rng.integers(0, 5, size=12)
  logits = rng.normal(scale=3.0, size=(12, 5))
  return labels, logits


@pytest.fixture
def extreme_batch():
  """Logits of +-1e4 (and mixed), labels both predicted and mispredicted with certainty."""
  logits = np.array([[1e4, -1e4, 0.0],
                     [1e4, -1e4, 0.0],
                     [-1e4, 1e4, 1e4],
                     [1e4, 1e4, 1e4],
                     [-1e4, -1e4, -1e4],
                     [0.0, 1e4, -1e4]])
  labels = np.array([0, 1, 2, 0, 1, 2])
  return labels, logits
