"""Client work and complete learning processes for the gradient-conflict methods: `build_process`
(any client loss with any server aggregator), the papers' methods and baselines (`build_*`) and
the registries `ALGORITHMS`, `LOSSES`, `AGGREGATORS`.
"""

from tff_conflict.learning.algorithms import ALGORITHMS
from tff_conflict.learning.algorithms import build_fed_corrective
from tff_conflict.learning.algorithms import build_fedavg
from tff_conflict.learning.algorithms import build_feddecorr
from tff_conflict.learning.algorithms import build_fedga
from tff_conflict.learning.algorithms import build_fedgh
from tff_conflict.learning.algorithms import build_fedld
from tff_conflict.learning.algorithms import build_fedmgc
from tff_conflict.learning.algorithms import build_fednova
from tff_conflict.learning.algorithms import build_fedprox
from tff_conflict.learning.checking import ANY_MODEL
from tff_conflict.learning.checking import check_arguments
from tff_conflict.learning.client_controls import ClientControls
from tff_conflict.learning.client_work import build_client_work
from tff_conflict.learning.client_work import build_label_counting_client_work
from tff_conflict.learning.client_work import build_loss_weighted_client_work
from tff_conflict.learning.client_work import build_normalized_client_work
from tff_conflict.learning.client_work import count_labels
from tff_conflict.learning.client_work import WEIGHTINGS
from tff_conflict.learning.corrective import build_corrective_client_work
from tff_conflict.learning.corrective import build_update_field_finalizer
from tff_conflict.learning.corrective import corrective_value_type
from tff_conflict.learning.decorrelation import check_trained_representation
from tff_conflict.learning.decorrelation import DecorrelatedModel
from tff_conflict.learning.fednova import NormalizedAveragingFactory
from tff_conflict.learning.models import build_model_fn
from tff_conflict.learning.process import build_process
from tff_conflict.learning.process import resolve_aggregator
from tff_conflict.learning.process import resolve_loss
from tff_conflict.learning.registry import AGGREGATORS
from tff_conflict.learning.scaffold import build_scaffold
from tff_conflict.learning.scaffold import control_layout
from tff_conflict.learning.registry import LOSSES
from tff_conflict.learning import registry
