"""Client work and complete learning processes for the gradient-conflict methods.

Public surface:
  build_process                       any client loss + any server aggregator (+ FedProx term)
  build_fedavg, build_fedprox, build_fedgh, build_fedmgc, build_fedga, build_fedld,
  build_fed_corrective                each paper's whole method (thin wrappers of build_process)
  ALGORITHMS, LOSSES, AGGREGATORS     name -> builder / loss factory / aggregator factory
  build_loss_weighted_client_work     update_weight = the client's mean training loss (FedMGC)
  build_client_work, build_proximal_client_work, build_label_counting_client_work,
  build_corrective_client_work, build_update_field_finalizer, build_model_fn

The builders take a model as TFF's own algorithm builders do (a function returning a
`tff.learning.models.VariableModel`, or a `tff.learning.models.FunctionalModel`) or a function
returning an uncompiled Keras model with `input_spec` (`OrderedDict(x=..., y=...)` or `(x, y)`);
only a Keras model can have its loss replaced (FedMGC, FedGA, FedLD). Hyperparameter defaults and
ranges: `tff_conflict.hparams`.
"""

from tff_conflict.learning.algorithms import ALGORITHMS
from tff_conflict.learning.algorithms import build_fed_corrective
from tff_conflict.learning.algorithms import build_fedavg
from tff_conflict.learning.algorithms import build_fedga
from tff_conflict.learning.algorithms import build_fedgh
from tff_conflict.learning.algorithms import build_fedld
from tff_conflict.learning.algorithms import build_fedmgc
from tff_conflict.learning.algorithms import build_fedprox
from tff_conflict.learning.client_work import build_client_work
from tff_conflict.learning.client_work import build_label_counting_client_work
from tff_conflict.learning.client_work import build_loss_weighted_client_work
from tff_conflict.learning.client_work import build_proximal_client_work
from tff_conflict.learning.client_work import count_labels
from tff_conflict.learning.client_work import WEIGHTINGS
from tff_conflict.learning.corrective import build_corrective_client_work
from tff_conflict.learning.corrective import build_update_field_finalizer
from tff_conflict.learning.corrective import corrective_value_type
from tff_conflict.learning.models import build_model_fn
from tff_conflict.learning.process import build_process
from tff_conflict.learning.process import resolve_aggregator
from tff_conflict.learning.process import resolve_loss
from tff_conflict.learning.registry import AGGREGATORS
from tff_conflict.learning.registry import LOSSES
from tff_conflict.learning import registry
