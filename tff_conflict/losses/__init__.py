"""Client losses of the gradient-conflict methods: a per-example kernel and a `tf.keras.losses.Loss`
around it, on sparse labels and logits:

  FocalLoss(gamma, beta)                         focal_loss             FedMGC
  MarginControlLoss(margin_weight, margin_form)  margin_control_loss    FedLD
  CalibratedLabelLoss(counts, form)              calibrated_label_loss  FedGA

and FedDecorr's regularizer on representations, `decorrelation_loss(z, form)`.

The formulas: docs/methods.md under each method.
"""

from tff_conflict.losses.calibrated import batch_class_counts
from tff_conflict.losses.calibrated import calibrated_label_loss
from tff_conflict.losses.calibrated import calibrated_labels
from tff_conflict.losses.calibrated import CalibratedLabelLoss
from tff_conflict.losses.decorrelation import decorrelation_loss
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
    'decorrelation_loss',
    'focal_loss',
    'FocalLoss',
    'log1p_squared_norm',
    'margin_control_loss',
    'MarginControlLoss',
]
