"""Every method hyperparameter, declared once (default, valid range, source, benchmark grid), and
each method's spec (`METHODS`) with its diagnosis variants; the registries, builders, flags, grids,
the benchmark's variants and docs derive from them."""

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Optional

from tff_conflict import _checks

# How an Hparam's values are checked (`Hparam.kind`).
NONNEGATIVE = 'finite number >= 0'
POSITIVE = 'finite number > 0'
OPTIONAL_POSITIVE = 'None or finite number > 0'
RATIO = 'number in (0, 1]'
UNIT_INTERVAL = 'number in [0, 1]'
CHOICE = 'choice'
BOOL = 'bool'
SEED = 'seed'

_NUMERIC_CHECKS = {
    NONNEGATIVE: _checks.check_nonnegative,
    POSITIVE: _checks.check_positive,
    OPTIONAL_POSITIVE: _checks.check_optional_positive,
    RATIO: _checks.check_ratio,
    UNIT_INTERVAL: _checks.check_unit_interval,
}


@dataclasses.dataclass(frozen=True)
class Hparam:
  """One hyperparameter of one method component.

  Attributes:
    method: the method it belongs to ('FedMGC', ...).
    component: the part of the method that reads it ('focal loss', ...).
    keyword: the keyword argument that carries it in the library (losses, kernels, factories,
      builders, registries).
    flag: the experiment flag that carries it (`--<flag>`), or None when no flag sets it.
    default: the default value, the same in every layer.
    kind: how values are checked: one of NONNEGATIVE, POSITIVE, OPTIONAL_POSITIVE, RATIO,
      UNIT_INTERVAL, CHOICE, BOOL, SEED.
    description: what it does, in one line.
    source: where the default (and the range) come from.
    choices: the accepted strings of a CHOICE.
    grid: the values a benchmark tunes it over by default (empty: not tuned).
  """
  method: str
  component: str
  keyword: str
  flag: Optional[str]
  default: Any
  kind: str
  description: str
  source: str
  choices: tuple[str, ...] = ()
  grid: tuple[Any, ...] = ()

  @property
  def valid_range(self) -> str:
    """The accepted values in words, e.g. 'a finite number >= 0' or "one of 'batch', 'dataset'"."""
    if self.kind == CHOICE:
      return _checks.one_of(self.choices)
    if self.kind == BOOL:
      return 'a bool'
    if self.kind == SEED:
      return 'None or an integer in [-2**63, 2**63)'
    if self.kind == OPTIONAL_POSITIVE:
      return 'None or a finite number > 0'
    return f'a {self.kind}'

  def check(self, value: Any, name: Optional[str] = None) -> Any:
    """`value`, normalized (float, bool, str or int); `ArgumentError` naming `name` otherwise.

    Args:
      value: the value to check.
      name: the name the error gives the argument; default `keyword` (a flag validator passes
        `--<flag>`).
    """
    name = self.keyword if name is None else name
    if self.kind in _NUMERIC_CHECKS:
      return _NUMERIC_CHECKS[self.kind](name, value)
    if self.kind == CHOICE:
      return _checks.check_choice(name, value, self.choices)
    if self.kind == BOOL:
      return _checks.check_bool(name, value)
    return _checks.check_seed(name, value)


# ---- FedProx -------------------------------------------------------------------------------------

PROXIMAL_STRENGTH = Hparam(
    method='FedProx', component='proximal term', keyword='proximal_strength',
    flag='proximal_strength', default=0.01, kind=NONNEGATIVE, grid=(0.001, 0.01, 0.1, 1.0),
    description='mu of the proximal term mu/2 |w - w0|^2 added to each local objective; 0 is '
    'FedAvg.',
    source='FedProx, Sec. 5 (experiments): mu is tuned in {0.001, 0.01, 0.1, 1} per dataset; '
    '0.01, a weak pull from that grid that leaves local training close to FedAvg\'s, is the '
    'default.')

# ---- FedDecorr ----------------------------------------------------------------------------------

FEDDECORR_BETA = Hparam(
    method='FedDecorr', component='decorrelation loss', keyword='beta', flag='decorr_beta',
    default=0.1, kind=NONNEGATIVE, grid=(0.01, 0.05, 0.1),
    description='weight beta of the decorrelation term in the client loss CE + beta L_decorr(z), '
    'z the representations feeding the classifier layer; 0 is FedAvg.',
    source='FedGH, Sec. IV-A (beta = 0.1 in FedDecorr, its baseline); the FedDecorr paper '
    '(Shi et al., ICLR 2023) uses beta in 0.01-0.1 by dataset.')

FEDDECORR_FORM = Hparam(
    method='FedDecorr', component='decorrelation loss', keyword='form', flag='decorr_form',
    default='authors', kind=CHOICE, choices=('authors', 'paper'),
    description='L_decorr: the mean squared off-diagonal entry of z^T z over N, z standardised '
    'with the unbiased variance (authors), or ||K||_F^2 / m^2 of the correlation matrix '
    'K = z^T z / N (paper).',
    source='FedDecorr\'s public code (FedDecorrLoss, which produced the published numbers) for '
    'authors; the paper\'s Sec. 4 for paper.')

# ---- FedGH ---------------------------------------------------------------------------------------

FEDGH_ORDER = Hparam(
    method='FedGH', component='gradient harmonization', keyword='order', flag='fedgh_order',
    default='random', kind=CHOICE, choices=('random', 'index'),
    description='order in which each update is projected off the others: random (drawn per '
    'round from the seed) or index (ascending; order-free, for testing).',
    source='FedGH, Algorithm 1 (line 78: "in random order").')

FEDGH_SEED = Hparam(
    method='FedGH', component='gradient harmonization', keyword='seed', flag='seed',
    default=None, kind=SEED,
    description='seed of the per-round random orders; None draws one when the process is '
    'initialized.',
    source='not in the paper (its experiments fix a random seed without stating it); None draws '
    'one, so a run is reproducible from its initial state.')

# ---- FedMGC --------------------------------------------------------------------------------------

FOCAL_GAMMA = Hparam(
    method='FedMGC', component='focal loss', keyword='gamma', flag='focal_gamma',
    default=0.5, kind=NONNEGATIVE, grid=(0.5, 1.0, 2.0),
    description='focusing exponent gamma of -beta (1 - p_t)^gamma log p_t; 0 is cross-entropy '
    'times beta.',
    source='FedMGC, Sec. V-A 2 ("Hyperparameter Settings"): gamma is tuned in '
    '{0.1, 0.2, 0.5, 1.0} per dataset and no single value is given; 0.5, the middle of that '
    'range, is the default (the focal-loss paper\'s gamma = 2 lies outside FedMGC\'s grid).')

FOCAL_BETA = Hparam(
    method='FedMGC', component='focal loss', keyword='beta', flag='focal_beta',
    default=1.0, kind=POSITIVE,
    description='scale beta of the focal loss (compensates the smaller loss values of '
    'gamma > 0); beta = 0 would make the loss identically 0.',
    source='FedMGC, eq. (10) and Sec. V-A 2: beta is tuned in {1.0, 1.2, 1.5, 2.0}; 1.0, the '
    'grid\'s value that leaves the loss scale unchanged, is the default.')

DGC_SELECTION_RATIO = Hparam(
    method='FedMGC', component='dominant gradient correction', keyword='selection_ratio',
    flag='selection_ratio', default=0.5, kind=RATIO, grid=(0.3, 0.5, 0.7),
    description='fraction lambda of the round\'s clients chosen as dominant '
    '(ceil(lambda K) clients).',
    source='FedMGC, Algorithm 1 (lambda in (0, 1]) and Sec. V-B, Fig. 7: best of '
    '{0.1, 0.3, 0.5, 0.7, 0.9} at lambda = 0.5.')

DGC_WEIGHTS_ARE_LOSSES = Hparam(
    method='FedMGC', component='dominant gradient correction', keyword='weights_are_losses',
    flag=None, default=True, kind=BOOL,
    description='whether the aggregator\'s weight channel carries each client\'s mean training '
    'loss l_i (z_i = p_i / l_i); False treats every loss as equal (z_i = p_i), as needed when '
    'the weight is a number of examples (tff.learning.algorithms.build_weighted_fed_avg).',
    source='FedMGC, Algorithm 1 line 11 (z_i = p_i / l_i): True is the method as published.')

# ---- FedGA ---------------------------------------------------------------------------------------

CALIBRATION_COUNTS = Hparam(
    method='FedGA', component='calibrated-label loss', keyword='counts',
    flag='calibration_counts', default='batch', kind=CHOICE, choices=('batch', 'dataset'),
    grid=('batch', 'dataset'),
    description='class counts N of the calibrated labels: of each mini-batch, or of the '
    'client\'s whole local dataset (counted in one extra pass before training).',
    source='FedGA, Algorithm 1 line 5 ("batch calibrated label"), as in the authors\' code.')

CALIBRATION_FORM = Hparam(
    method='FedGA', component='calibrated-label loss', keyword='form',
    flag='calibration_form', default='soft_target', kind=CHOICE,
    choices=('soft_target', 'paper'),
    description='the loss the calibrated labels q enter: the soft-target cross-entropy '
    '-sum_i q_i log p_i, gradient (sum q) p - q, invariant to a common shift of the logits '
    '(soft_target, the authors\' code), or logsumexp(z) - q . z, gradient p - q (paper, eq. 8).',
    source='FedGA, Algorithm 1 line 6 (l = L(q, p)) and the authors\' public code (soft_target, '
    'which produced the published numbers); paper is eq. (8)\'s gradient p - q taken '
    'literally.')

CLIENT_CLIP_NORM = Hparam(
    method='every method', component='client training', keyword='clip_norm',
    flag='client_clip_norm', default=None, kind=OPTIONAL_POSITIVE,
    description='global L2 norm each local step\'s gradient is clipped to (None: no '
    'clipping); every builder and build_process take it, so a baseline can be clipped as the '
    'method is.',
    source='not in the papers (None); the FedGA authors\' public code clips every method\'s '
    'client steps, FedAvg included, at 5.0.')

# ---- FedLD ---------------------------------------------------------------------------------------

MARGIN_WEIGHT = Hparam(
    method='FedLD', component='margin-control loss', keyword='margin_weight',
    flag='margin_weight', default=0.01, kind=NONNEGATIVE, grid=(0.01, 0.1),
    description='weight lambda of the margin control lambda log(1 + |z|^2) on each example\'s '
    'logits z; 0 is cross-entropy.',
    source='FedLD, Sec. 3.1: 0.01 on COVID-FL, the paper\'s real-world federated dataset (its '
    'Dirichlet label-shift splits of Retina use 0.1 when IID, 0.03 and 0.03 when non-IID).')

MARGIN_FORM = Hparam(
    method='FedLD', component='margin-control loss', keyword='margin_form',
    flag='margin_form', default='logits', kind=CHOICE, choices=('logits', 'batch_probabilities'),
    description='what the margin term penalizes: each example\'s logits, mean over the batch '
    'of log(1 + |z|^2) (logits, eq. 3), or the softmax probabilities of the whole batch with '
    'one norm, log(1 + |P|_F^2) (batch_probabilities, the authors\' code).',
    source='FedLD, eq. (3) (logits); batch_probabilities is the authors\' public code '
    '(MarginalLogLoss, run there with lambda 0.03).')

PRINCIPAL_COMPONENT_RATIO = Hparam(
    method='FedLD', component='principal-gradient aggregation', keyword='component_ratio',
    flag='component_ratio', default=0.8, kind=RATIO, grid=(0.5, 0.8),
    description='fraction rho of principal directions kept (L = max(1, floor(rho K))).',
    source='FedLD, Sec. 3.1 ("L = 0.8m").')

PRINCIPAL_PRESERVE_NORMS = Hparam(
    method='FedLD', component='principal-gradient aggregation', keyword='preserve_norms',
    flag='principal_preserve_norms', default=False, kind=BOOL,
    description='rescale each revised update to the length of the original, |u_i| (True), '
    'instead of eq. (7)\'s |u_i| sqrt(sum_l (lambda_l / S)^2) (False).',
    source='FedLD, eq. (7) as the authors\' code computes it (False); True is the paper\'s '
    'stated purpose of the length correction (Sec. 2.4: the revised gradient keeps the '
    'magnitude of the original).')

PRINCIPAL_REVISION = Hparam(
    method='FedLD', component='principal-gradient aggregation', keyword='revision',
    flag='principal_revision', default='eigenvalue_share', kind=CHOICE,
    choices=('eigenvalue_share', 'projection'),
    description='how each update is revised in the kept principal directions v_l: eq. (7), '
    'each component g\'_il rescaled to |u_i| lambda_l / S (eigenvalue_share), or the plain '
    'orthogonal projection sum_l g\'_il (projection: no re-weighting, a diagnosis of eq. 7).',
    source='FedLD, eq. (7), in the paper and the authors\' code (eigenvalue_share); '
    'projection is not in either.')

PRINCIPAL_GRANULARITY = Hparam(
    method='FedLD', component='principal-gradient aggregation', keyword='granularity',
    flag='principal_granularity', default='tensor', kind=CHOICE, choices=('tensor', 'model'),
    description='what one principal aggregation runs on: each model tensor\'s slice of the '
    'updates separately (tensor) or the whole flattened model at once (model).',
    source='the FedLD authors\' public code (svd_tools.pcgrad_svd, one SVD per model tensor; it '
    'produced the published numbers) for tensor; model is the paper\'s text (Sec. 2.4, one '
    'matrix of the clients\' whole gradients).')

PRINCIPAL_FIRST_ROUND_PLAIN_MEAN = Hparam(
    method='FedLD', component='principal-gradient aggregation',
    keyword='first_round_plain_mean', flag='principal_first_round_plain_mean', default=False,
    kind=BOOL,
    description='aggregate the first round with the plain weighted mean instead of the '
    'principal aggregation (True), as the authors\' code does before it has a gradient '
    'history.',
    source='not in the paper (False); True is the authors\' public code (svd_tools.pcgrad_svd '
    'averages while the history is empty).')

# ---- Corrective gradient weights -----------------------------------------------------------------

CORRECTIVE_ALPHA = Hparam(
    method='corrective', component='corrective gradient weights', keyword='alpha',
    flag='corrective_alpha', default=0.1, kind=UNIT_INTERVAL, grid=(0.1, 0.3, 0.5),
    description='alpha of c = min_i alpha L_i / |D_i|: the predicted change of each client\'s '
    'loss is bounded by the fraction alpha of that loss; 0 is FedAvg.',
    source='corrective, eqs. (12)-(13): alpha in [0, 1]; Table 1 (non-IID) tries 0-0.4 and '
    'Table 2 (IID) 0-0.1; 0.1 lies in both.')

HPARAMS: tuple[Hparam, ...] = (
    PROXIMAL_STRENGTH, FEDDECORR_BETA, FEDDECORR_FORM, FEDGH_ORDER, FEDGH_SEED, FOCAL_GAMMA,
    FOCAL_BETA, DGC_SELECTION_RATIO, DGC_WEIGHTS_ARE_LOSSES, CALIBRATION_COUNTS, CALIBRATION_FORM,
    CLIENT_CLIP_NORM, MARGIN_WEIGHT, MARGIN_FORM, PRINCIPAL_COMPONENT_RATIO,
    PRINCIPAL_PRESERVE_NORMS, PRINCIPAL_GRANULARITY, PRINCIPAL_FIRST_ROUND_PLAIN_MEAN,
    PRINCIPAL_REVISION, CORRECTIVE_ALPHA)

# The keyword arguments of each entry of `tff_conflict.learning.LOSSES`, which builds its class
# with these defaults.
LOSS_HPARAMS: dict[str, tuple[Hparam, ...]] = {
    'ce': (),
    'focal': (FOCAL_GAMMA, FOCAL_BETA),
    'margin': (MARGIN_WEIGHT, MARGIN_FORM),
    'calibrated': (CALIBRATION_COUNTS, CALIBRATION_FORM),
}

# The hyperparameter keyword arguments of each entry of `tff_conflict.learning.AGGREGATORS`, which
# builds its factory with these defaults.
AGGREGATOR_HPARAMS: dict[str, tuple[Hparam, ...]] = {
    'mean': (),
    'measured_mean': (),
    'fedgh': (FEDGH_ORDER, FEDGH_SEED),
    'dgc': (DGC_SELECTION_RATIO, DGC_WEIGHTS_ARE_LOSSES),
    'principal': (PRINCIPAL_COMPONENT_RATIO, PRINCIPAL_PRESERVE_NORMS, PRINCIPAL_GRANULARITY,
                  PRINCIPAL_FIRST_ROUND_PLAIN_MEAN, PRINCIPAL_REVISION),
    'corrective': (CORRECTIVE_ALPHA,),
}


@dataclasses.dataclass(frozen=True)
class Variant:
  """A diagnosis variant of a method: the method (or another variant) with one cause changed,
  run beside it to test why the method gains or loses; its question is in docs/experiments.md.

  Attributes:
    name: its name in the benchmark's `--methods` and the report.
    fixed: (keyword, value) pairs it fixes: builder keyword arguments (hyperparameters, or
      arguments such as `clip_norm` and `client_weighting`).
    loss: for an ablation of one half of a method, the `tff_conflict.learning.build_process`
      loss it runs instead of the parent (with `aggregator`); None runs the parent's builder.
    aggregator: the `build_process` aggregator of such an ablation.
    client_lr: a client learning rate it fixes (None: the parent's, tuned or searched).
    server_lr: a server learning rate it fixes.
    parent: the method (a `METHODS` name) or variant it changes; None: the method whose spec
      lists it.
    baseline: the method or variant its gap is measured against; None: the report's baseline.
  """
  name: str
  fixed: tuple[tuple[str, Any], ...] = ()
  loss: Optional[str] = None
  aggregator: Optional[str] = None
  client_lr: Optional[float] = None
  server_lr: Optional[float] = None
  parent: Optional[str] = None
  baseline: Optional[str] = None

  @property
  def ablation(self) -> bool:
    """Whether it runs `build_process` with its own `loss` and `aggregator`, not the parent."""
    return self.loss is not None or self.aggregator is not None

  @property
  def changes(self) -> tuple[tuple[str, Any], ...]:
    """Everything it sets, in the benchmark's method syntax (`custom`'s loss and aggregator,
    then `fixed`, then the learning rates)."""
    process = (('loss', self.loss), ('aggregator', self.aggregator))
    rates = (('client_lr', self.client_lr), ('server_lr', self.server_lr))
    return (tuple((k, v) for k, v in process if v is not None) + self.fixed
            + tuple((k, v) for k, v in rates if v is not None))


@dataclasses.dataclass(frozen=True)
class MethodSpec:
  """One builder of `tff_conflict.learning.ALGORITHMS`: the registry loss and aggregator it
  composes and the hyperparameters it reads itself; its options are theirs, in that order.

  Attributes:
    loss: the `LOSS_HPARAMS` entry its clients train on, or None (cross-entropy or the model's
      own loss, or a loss of the builder's own).
    aggregator: the `AGGREGATOR_HPARAMS` entry its server runs, or None (the builder's
      `aggregator` argument, or an aggregation of its own).
    fixed: (keyword, value) of the aggregator's hyperparameters the method fixes.
    own: the hyperparameters the builder reads itself.
    variants: its diagnosis variants (`VARIANTS`).
  """
  loss: Optional[str] = None
  aggregator: Optional[str] = None
  fixed: tuple[tuple[str, Any], ...] = ()
  own: tuple[Hparam, ...] = (CLIENT_CLIP_NORM,)
  variants: tuple[Variant, ...] = ()

  @property
  def hparams(self) -> tuple[Hparam, ...]:
    """Every hyperparameter the builder takes: the loss's, the aggregator's not fixed, `own`."""
    fixed = dict(self.fixed)
    return (LOSS_HPARAMS.get(self.loss, ())
            + tuple(h for h in AGGREGATOR_HPARAMS.get(self.aggregator, ())
                    if h.keyword not in fixed) + self.own)

  def split(self, where: str, options: Mapping[str, Any]
            ) -> tuple[dict[str, Any], dict[str, Any]]:
    """`options` (keyword -> value) as `(loss_kwargs, aggregator_kwargs)`, the aggregator's with
    `fixed`; `TypeError` naming `where`, any keyword neither takes and the accepted ones."""
    loss = [h.keyword for h in LOSS_HPARAMS.get(self.loss, ())]
    aggregator = [h.keyword for h in AGGREGATOR_HPARAMS.get(self.aggregator, ())
                  if h.keyword not in dict(self.fixed)]
    check_keywords(where, options, loss + aggregator)
    return ({k: v for k, v in options.items() if k in loss},
            dict({k: v for k, v in options.items() if k in aggregator}, **dict(self.fixed)))


# Every builder of `tff_conflict.learning.ALGORITHMS`, by name.
METHODS: dict[str, MethodSpec] = {
    'fedavg': MethodSpec(variants=(
        Variant('fedavg_clip', fixed=(('clip_norm', 5.0),)),
        Variant('fedavg_measured', loss='ce', aggregator='measured_mean'))),
    'fedprox': MethodSpec(own=(PROXIMAL_STRENGTH, CLIENT_CLIP_NORM), variants=(
        Variant('fedprox_mu1', fixed=(('proximal_strength', 1.0),)),)),
    'fednova': MethodSpec(),
    'feddecorr': MethodSpec(own=(FEDDECORR_BETA, FEDDECORR_FORM, CLIENT_CLIP_NORM)),
    'fedgh': MethodSpec(aggregator='fedgh'),
    'fedmgc': MethodSpec(loss='focal', aggregator='dgc', fixed=(('weights_are_losses', True),),
                         variants=(
        Variant('fedmgc_focal_only', loss='focal', aggregator='measured_mean'),
        Variant('fedmgc_dgc_only', loss='ce', aggregator='dgc'),
        Variant('fedavg_uniform', parent='fedavg', fixed=(('client_weighting', 'uniform'),)))),
    'fedga': MethodSpec(loss='calibrated', aggregator='mean', variants=(
        Variant('fedga_paper', fixed=(('form', 'paper'),)),
        Variant('fedga_paper_clip', parent='fedga_clip', fixed=(('form', 'paper'),),
                baseline='fedavg_clip'),
        Variant('fedga_clip', fixed=(('clip_norm', 5.0),), baseline='fedavg_clip'),
        Variant('fedga_dataset', fixed=(('counts', 'dataset'),)))),
    'fedld': MethodSpec(loss='margin', aggregator='principal', variants=(
        Variant('fedld_server_lr', server_lr=4.0),
        Variant('fedld_preserve_norms', fixed=(('preserve_norms', True),)),
        Variant('fedld_projection', fixed=(('revision', 'projection'),)),
        Variant('fedld_model', fixed=(('granularity', 'model'),)),
        Variant('fedld_authors', fixed=(('first_round_plain_mean', True),
                                        ('margin_form', 'batch_probabilities'),
                                        ('client_weighting', 'uniform'))),
        Variant('fedld_margin_only', loss='margin', aggregator='measured_mean'),
        Variant('fedld_principal_only', loss='ce', aggregator='principal'))),
    'fed_corrective': MethodSpec(aggregator='corrective', variants=(
        Variant('fed_corrective_alpha1', fixed=(('alpha', 1.0),)),)),
    'scaffold': MethodSpec(),
}

# Every diagnosis variant by name: (the method whose spec lists it, the variant).
VARIANTS: dict[str, tuple[str, Variant]] = {
    v.name: (name, v) for name, method in METHODS.items() for v in method.variants}

# The method hyperparameters of each builder of `tff_conflict.learning.ALGORITHMS`.
ALGORITHM_HPARAMS: dict[str, tuple[Hparam, ...]] = {
    name: method.hparams for name, method in METHODS.items()}

# The hyperparameters `tff_conflict.learning.build_process` takes itself, with any loss and
# aggregator (`proximal_strength`, `clip_norm`).
PROCESS_HPARAMS: tuple[Hparam, ...] = (PROXIMAL_STRENGTH, CLIENT_CLIP_NORM)


def check_keywords(where: str, given: Iterable[str], accepted: Sequence[str]) -> None:
  """`TypeError` (as Python's for a call) naming `where`, the keywords of `given` not in
  `accepted`, and the accepted ones."""
  unknown = [k for k in given if k not in accepted]
  if unknown:
    raise TypeError(f'{where} got unexpected keyword arguments {unknown}; it takes '
                    f'{list(accepted) or "none"}')


def flag_table(hparams: Sequence[Hparam]) -> dict[str, str]:
  """keyword -> flag name for the hparams that a flag sets."""
  return {h.keyword: h.flag for h in hparams if h.flag is not None}


def markdown_table(hparams: Sequence[Hparam] = HPARAMS) -> str:
  """A Markdown table of `hparams`: method, component, keyword, flag, default, range, source."""
  rows = ['| method | component | keyword | flag | default | range | source |',
          '|---|---|---|---|---|---|---|']
  for h in hparams:
    flag = f'`--{h.flag}`' if h.flag else ''
    rows.append(f'| {h.method} | {h.component} | `{h.keyword}` | {flag} | `{h.default!r}` | '
                f'{h.valid_range} | {h.source} |')
  return '\n'.join(rows)
