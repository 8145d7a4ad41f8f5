"""What runs a library process round after round (TFF's `tff.simulation` / `tff.program` parts):
seeded client sampling and cohort datasets, SCAFFOLD's client controls kept across rounds,
server-state checkpoints and metrics files (docs/design.md, "Results on disk")."""

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
from tff_conflict.simulation.rounds import checkpointed
from tff_conflict.simulation.rounds import preprocess
from tff_conflict.simulation.rounds import restored
from tff_conflict.simulation.rounds import RoundData
from tff_conflict.simulation.rounds import sample_clients
from tff_conflict.simulation.rounds import scaffold_controls
from tff_conflict.simulation.rounds import train_round

__all__ = [
    'CheckpointError',
    'CheckpointManager',
    'checkpointed',
    'flatten_metrics',
    'HEADLINE_COLUMNS',
    'METRICS_FILE',
    'MetricsReleaseManager',
    'PER_CLIENT_COLUMNS',
    'PER_CLIENT_FILE',
    'preprocess',
    'read_csv',
    'read_metrics',
    'restored',
    'ROUND_COLUMN',
    'RoundData',
    'sample_clients',
    'saved_versions',
    'scaffold_controls',
    'train_round',
    'trained_nothing',
    'TRAINED_EXAMPLES',
]
