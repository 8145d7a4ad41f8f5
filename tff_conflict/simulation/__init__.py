"""What runs a library process round after round (TFF's `tff.simulation` / `tff.program` parts):
the run loop with its exact resume and progress bar, seeded client sampling and cohort datasets,
SCAFFOLD's client controls, checkpoints and metrics files (docs/design.md, "Results on disk")."""

from tff_conflict.simulation.checkpoints import CheckpointError
from tff_conflict.simulation.checkpoints import CheckpointManager
from tff_conflict.simulation.checkpoints import saved_versions
from tff_conflict.simulation.metrics import flatten_metrics
from tff_conflict.simulation.metrics import HEADLINE_COLUMNS
from tff_conflict.simulation.metrics import METRICS_FILE
from tff_conflict.simulation.metrics import MetricsReleaseManager
from tff_conflict.simulation.metrics import PER_CLIENT_COLUMNS
from tff_conflict.simulation.metrics import PER_CLIENT_FILE
from tff_conflict.simulation.metrics import read_csv
from tff_conflict.simulation.metrics import read_metrics
from tff_conflict.simulation.metrics import ROUND_COLUMN
from tff_conflict.simulation.metrics import trained_nothing
from tff_conflict.simulation.metrics import TRAINED_EXAMPLES
from tff_conflict.simulation.progress import Progress
from tff_conflict.simulation.rounds import checkpointed
from tff_conflict.simulation.rounds import preprocess
from tff_conflict.simulation.rounds import restored
from tff_conflict.simulation.rounds import RoundData
from tff_conflict.simulation.rounds import sample_clients
from tff_conflict.simulation.rounds import scaffold_controls
from tff_conflict.simulation.rounds import train_round
from tff_conflict.simulation.training_loop import check_rounds
from tff_conflict.simulation.training_loop import HPARAMS_FILE
from tff_conflict.simulation.training_loop import provenance
from tff_conflict.simulation.training_loop import read_hparams
from tff_conflict.simulation.training_loop import ResumeError
from tff_conflict.simulation.training_loop import run_training
from tff_conflict.simulation.training_loop import write_hparams

__all__ = [
    'check_rounds',
    'CheckpointError',
    'CheckpointManager',
    'checkpointed',
    'flatten_metrics',
    'HEADLINE_COLUMNS',
    'HPARAMS_FILE',
    'METRICS_FILE',
    'MetricsReleaseManager',
    'PER_CLIENT_COLUMNS',
    'PER_CLIENT_FILE',
    'preprocess',
    'Progress',
    'provenance',
    'read_csv',
    'read_hparams',
    'read_metrics',
    'restored',
    'ResumeError',
    'ROUND_COLUMN',
    'RoundData',
    'run_training',
    'sample_clients',
    'saved_versions',
    'scaffold_controls',
    'train_round',
    'trained_nothing',
    'TRAINED_EXAMPLES',
    'write_hparams',
]
