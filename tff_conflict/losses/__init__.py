"""Client losses of the gradient-conflict methods on sparse labels and logits, each a per-example
kernel and a Keras loss: focal (FedMGC), margin control (FedLD), calibrated labels (FedGA), and
FedDecorr's `decorrelation_loss` on representations.
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
