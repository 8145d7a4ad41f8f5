"""Client losses of the gradient-conflict methods (docs/methods.md: FedMGC, FedGA, FedLD).

Each loss is a plain kernel `f(labels, logits, **hyperparameters) -> per-example losses [B]`
and a `tf.keras.losses.Loss` class around it (sparse integer labels of shape `[B]` or `[B, 1]`,
logits `[B, C]`, mean over the batch by default; `get_config` / `from_config` round-trip), usable
with `tff.learning.models.from_keras_model(keras_model, loss=...)`:

  FocalLoss(gamma, beta)             focal_loss              FedMGC, fedmgc paper eq. (10)
  MarginControlLoss(margin_weight)   margin_control_loss     FedLD, fedld paper eq. (3)
  CalibratedLabelLoss(counts)        calibrated_label_loss   FedGA, fedga paper eqs. (8)-(10)
"""

from tff_conflict.losses.calibrated import batch_class_counts
from tff_conflict.losses.calibrated import calibrated_label_loss
from tff_conflict.losses.calibrated import calibrated_labels
from tff_conflict.losses.calibrated import CalibratedLabelLoss
from tff_conflict.losses.focal import focal_loss
from tff_conflict.losses.focal import FocalLoss
from tff_conflict.losses.margin import log1p_squared_norm
from tff_conflict.losses.margin import margin_control_loss
from tff_conflict.losses.margin import MarginControlLoss

__all__ = [
    'batch_class_counts',
    'calibrated_label_loss',
    'calibrated_labels',
    'CalibratedLabelLoss',
    'focal_loss',
    'FocalLoss',
    'log1p_squared_norm',
    'margin_control_loss',
    'MarginControlLoss',
]
