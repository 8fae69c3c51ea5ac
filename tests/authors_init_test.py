"""The model side of "train as the authors' code trains" (BUILD_NOTES §2).

* config.init_scheme='authors_code': every parameter of every variant is drawn
  from the distribution the authors' PyTorch code gives its counterpart
  (`AUTHORS_CODE_INIT`, read from their models/layers/GRUEncoderDecoder*.py and
  models/attentions/*.py); 'library' (default) stays bit-identical to before.
* config.sigma_bias=False: no sigma read-out bias (their sigma).
* config.location_normaliser='authors_code': Eq. 9 as their `sum_normalize`
  computes it, sum(lambda + 1e-20) over the padded width S.

No torch here: the distributions are written down from reading their code; the
torch measurement lives outside the tests.
"""

import dataclasses
import functools
import hashlib
import math
import re
from typing import Dict, NamedTuple, Optional

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

import compile_options
from monoloc_jax import attention
from monoloc_jax import backbones
from monoloc_jax import config_paths
from monoloc_jax import errors
from monoloc_jax import param_count
from monoloc_jax import variants
from monoloc_jax.backbones import gru
from monoloc_jax.configs import default

FAST = compile_options.fast()
VOCAB = 14
SMALL = dict(embed_dim=64, hidden_dim=128, value_dim=128, num_layers=1)
CFQ = dict(embed_dim=128, hidden_dim=256, value_dim=512, num_layers=2, qk_dim=128,
           decoder_init='backward_states')
SIZES = {'small': SMALL, 'cfq': CFQ}
SMALL_KEYS, CFQ_KEYS = 128, 16


# ---------------------------------------------------------------------------
# The authors' initialisation, per parameter, as data.
# ---------------------------------------------------------------------------
class Sizes(NamedTuple):
  """V vocabulary, E embedding, D decoder width (= encoder output width), H encoder
  GRU units per direction (D/2), A value_dim (their inter_value_size), Q query/key
  width (their qk_head_dim; heads = 1 in all their configs), K rho outputs."""
  V: int
  E: int
  D: int
  H: int
  A: int
  Q: int
  K: int


@dataclasses.dataclass(frozen=True)
class Uniform:
  bound: float


@dataclasses.dataclass(frozen=True)
class Normal:
  std: float


@dataclasses.dataclass(frozen=True)
class Const:
  value: float


def xavier(fan_in, fan_out):
  """torch.nn.init.xavier_uniform_: U(+-sqrt(6 / (fan_in + fan_out)))."""
  return Uniform(math.sqrt(6.0 / (fan_in + fan_out)))


def torch_default(fan_in):
  """nn.Linear's default weight (kaiming_uniform_(a=sqrt(5))) and bias init, and
  nn.GRU / nn.GRUCell's (fan_in = hidden_size): U(+-1/sqrt(fan_in))."""
  return Uniform(1.0 / math.sqrt(fan_in))


# (our parameter path, regex; their tensor and its init; fn(Sizes) -> distribution).
# Their tensors are [out, in] (nn.Linear) where ours are [in, out]; the fans are theirs.
AUTHORS_CODE_INIT = (
    ('embedding', 'embed_layer.weight [V, E]: init_weights() kaiming_normal_(mode="fan_out"):'
     ' fan_out = size(0) = V, gain sqrt(2)', lambda s: Normal(math.sqrt(2.0 / s.V))),
    ('start|end', 'START, END = nn.Parameter(T.zeros(E))', lambda s: Const(0.0)),
    (r'encoder/(fwd|bwd)_\d/(w_i|b_i|w_h|b_h)', 'encoder = nn.GRU(hidden_size=H, '
     'bidirectional): weight_ih/hh_l*, bias_ih/hh_l* (and _reverse) torch default',
     lambda s: torch_default(s.H)),
    (r'decoder_\d/(w_i|b_i|w_h|b_h)', 'decodercell (1-layer) / decodercell1, decodercell2 '
     '(GRUEncoderDecoder2) = nn.GRUCell(hidden_size=D): torch default',
     lambda s: torch_default(s.D)),
    ('out_kernel', 'out_linear1.weight [E, D]: xavier_uniform_', lambda s: xavier(s.D, s.E)),
    ('out_bias', 'out_linear1.bias: nn.Linear(D, E) default', lambda s: torch_default(s.D)),
    ('vocab_bias', 'output_map.bias = T.zeros(V) (TiedEmbedding)', lambda s: Const(0.0)),
    ('cross_attention/direction/kernel', 'dir_gater.weight [1, D]: nn.Linear(D, 1) default',
     lambda s: torch_default(s.D)),
    ('cross_attention/direction/bias', 'dir_gater.bias: nn.Linear(D, 1) default',
     lambda s: torch_default(s.D)),
    ('cross_attention/inter_value/kernel', 'value_transform.weight [A, D]: xavier_uniform_',
     lambda s: xavier(s.D, s.A)),
    ('cross_attention/inter_value/bias', 'value_transform.bias: nn.Linear(D, A) default',
     lambda s: torch_default(s.D)),
    ('cross_attention/value/kernel', 'attention_layer.value_linear.weight [D, A] '
     '(heads * v_head_dim = D): xavier_uniform_', lambda s: xavier(s.A, s.D)),
    ('cross_attention/out', 'head_compose_linear.weight [D, D]: xavier_uniform_',
     lambda s: xavier(s.D, s.D)),
    ('cross_attention/key', 'key_linear.weight [Q, D]: xavier_uniform_',
     lambda s: xavier(s.D, s.Q)),
    ('cross_attention/query', 'query_linear.weight [Q, D]: xavier_uniform_',
     lambda s: xavier(s.D, s.Q)),
    ('cross_attention/rel_kernel', 'forward_position_linear.weight [Q, D] (it projects '
     'sinusoids of width qD = D): xavier_uniform_', lambda s: xavier(s.D, s.Q)),
    ('cross_attention/(content_bias|position_bias)', 'content_bias, forward_position_bias '
     '= T.zeros(1, Q)', lambda s: Const(0.0)),
    ('cross_attention/loc_kernel', 'position_state_linear.weight [Q, D]: xavier_uniform_',
     lambda s: xavier(s.D, s.Q)),
    ('cross_attention/loc_bias', 'position_state_linear.bias: nn.Linear(D, Q) default',
     lambda s: torch_default(s.D)),
    ('cross_attention/sigma_kernel', 'Wsigma = T.randn(1, Q, 1), then xavier_uniform_: '
     'fan_in = Q * 1, fan_out = 1 * 1', lambda s: xavier(s.Q, 1)),
    ('cross_attention/rho_kernel', 'Wrho = T.randn(1, Q, K), then xavier_uniform_: '
     'fan_in = Q * K, fan_out = 1 * K', lambda s: xavier(s.Q * s.K, s.K)),
    ('cross_attention/gate_logit', 'step_bias = T.ones(1) * 20 weighting ReLU(rho); ours '
     'p = -20 weights the sigmoid branch: the same gate', lambda s: Const(-20.0)),
    ('cross_attention/mix_kernel', 'mix_scorer.weight [1, D]: xavier_uniform_',
     lambda s: xavier(s.D, 1)),
    ('cross_attention/mix_bias', 'mix_scorer.bias: nn.Linear(D, 1) default',
     lambda s: torch_default(s.D)),
)
# Not in their model: the sigma bias (ours, sigma_bias=True: zeros under either scheme).
# Theirs without a counterpart here: h0 (zeros, never read), the frozen sinusoid tables
# (relative_position_embed, embed_positions: requires_grad=False) and, outside
# MonoAttn, step_bias (unused by other step activations).


def expected_init(path: str, sizes: Sizes):
  """The authors' distribution of our parameter `path`, or None (no counterpart)."""
  for pattern, _, dist in AUTHORS_CODE_INIT:
    if re.fullmatch(pattern, path):
      return dist(sizes)
  return None


# A few bounds written out by hand (no formula involved), each derived in its comment,
# and the extremes torch measured for the same tensor (100 seeds; 10 for CFQ).
KNOWN_BOUNDS = (
    # small LocAttn, Wrho [1, 128, 3]: fan_in 128*3 = 384, fan_out 1*3 = 3:
    # sqrt(6/387) = 0.124515 (ours 'library': glorot [128, 3], sqrt(6/131) = 0.214).
    ('small', 'locattn', 'cross_attention/rho_kernel', 0.12451456),
    # small LocAttn S, Wrho [1, 128, 2]: sqrt(6/(256 + 2)) = 0.152499.
    ('small', 'locattn_s', 'cross_attention/rho_kernel', 0.15249857),
    # dir_gater = nn.Linear(128, 1): 1/sqrt(128) = 0.088388 (torch max 0.08839).
    ('small', 'onestep', 'cross_attention/direction/kernel', 0.08838835),
    # CFQ Wsigma [1, 128, 1]: sqrt(6/(128 + 1)) = 0.215666 (torch max 0.21564).
    ('cfq', 'mix_onestep', 'cross_attention/sigma_kernel', 0.21566555),
    # CFQ position_state_linear [128, 256]: sqrt(6/384) = 1/8; bias 1/sqrt(256) = 1/16.
    ('cfq', 'mix_onestep', 'cross_attention/loc_kernel', 0.125),
    ('cfq', 'mix_onestep', 'cross_attention/loc_bias', 0.0625),
    # CFQ value_transform.bias = nn.Linear(256, 512) default: 1/16 (torch max 0.06249).
    ('cfq', 'mix_onestep', 'cross_attention/inter_value/bias', 0.0625),
)


# ---------------------------------------------------------------------------
# Drawing many initialisations, and checking them.
# ---------------------------------------------------------------------------
class Vocab:
  """What `backbones.from_config` reads of a vocabulary."""
  pad_id, sos_id, eos_id = 0, 1, 2

  def __len__(self):
    return VOCAB


SRC = jnp.ones((1, 2), jnp.int32)
LENGTHS = jnp.array([2], jnp.int32)


def flat(tree) -> Dict[str, np.ndarray]:
  return {'/'.join(str(k.key) for k in path[1:]): np.asarray(leaf)
          for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]}


def model_of(name: str, size: str, scheme: str, sigma_bias: bool = False,
             normaliser: str = 'padding_free') -> gru.Seq2Seq:
  variant = dataclasses.replace(variants.get(name), sigma_bias=sigma_bias,
                                location_normaliser=attention.LOCATION_NORMALISERS[normaliser])
  return gru.Seq2Seq(VOCAB, variant=variant, init_scheme=scheme, **SIZES[size])


@functools.lru_cache(maxsize=None)
def draws(name: str, size: str, scheme: str, sigma_bias: bool, n_keys: int):
  """{path: [n_keys, *shape]} from n_keys independent initialisations (eager vmap:
  compiling the init of every variant would cost more than running it)."""
  model = model_of(name, size, scheme, sigma_bias)
  keys = jax.random.split(jax.random.PRNGKey(2023), n_keys)
  params = jax.vmap(lambda k: model.init(k, SRC, LENGTHS, method='build'))(keys)
  return flat(params)


def sizes_of(name: str, size: str) -> Sizes:
  kw = SIZES[size]
  rule = variants.get(name).location
  d = kw['hidden_dim']
  return Sizes(V=VOCAB, E=kw['embed_dim'], D=d, H=d // 2, A=kw['value_dim'],
               Q=kw.get('qk_dim') or d, K=rule.num_rho if rule else 0)


def check_leaf(x: np.ndarray, dist) -> Optional[str]:
  """None if the samples x (any shape) fit `dist`, else why not.

  Uniform(b): every sample in [-b, b]; both extremes reach past (1 - 20/n) b (the
  chance that n uniform samples miss is about exp(-10) = 5e-5 per side; at n >= 667
  that is past 0.97 b); mean within 6 standard errors of 0; sample std within 6
  standard errors of b/sqrt(3) (the std of a uniform's sample std is about
  0.45 std/sqrt(n)).
  Normal(s): mean and std likewise (0.71 std/sqrt(n)) and tails no uniform of that
  std has (max |x| > 3 s).  Const(c): every sample equals c.
  A wrong fan_in, Glorot for torch's default, or zeros for a uniform fails these.
  """
  x = np.asarray(x, np.float64).ravel()
  n = x.size
  if isinstance(dist, Const):
    return None if np.all(x == dist.value) else f'not all {dist.value}: [{x.min()}, {x.max()}]'
  mean, std = x.mean(), x.std()
  if isinstance(dist, Uniform):
    b = dist.bound
    sigma = b / math.sqrt(3.0)
    reach = 1.0 - 20.0 / n
    if x.max() > b * (1 + 1e-6) or x.min() < -b * (1 + 1e-6):
      return f'outside +-{b:.6f}: [{x.min():.6f}, {x.max():.6f}]'
    if x.max() < reach * b or x.min() > -reach * b:
      return f'does not reach +-{reach:.3f} * {b:.6f}: [{x.min():.6f}, {x.max():.6f}]'
    rel_std_tol = 6 * 0.45 / math.sqrt(n) + 0.002
  else:
    sigma = dist.std
    rel_std_tol = 6 * 0.71 / math.sqrt(n) + 0.002
    if n >= 1000 and np.abs(x).max() < 3 * sigma:
      return f'no normal tails: max |x| = {np.abs(x).max():.4f} < 3 * {sigma:.4f}'
  if abs(mean) > 6 * sigma / math.sqrt(n):
    return f'mean {mean:.6f} (std {sigma:.6f}, n {n})'
  if abs(std / sigma - 1) > rel_std_tol:
    return f'std {std:.6f}, expected {sigma:.6f} (n {n})'
  return None


def violations(samples: Dict[str, np.ndarray], sizes: Sizes) -> Dict[str, str]:
  out = {}
  for path, x in samples.items():
    dist = expected_init(path, sizes)
    problem = 'no counterpart in their model' if dist is None else check_leaf(x, dist)
    if problem:
      out[path] = problem
  return out


# ---------------------------------------------------------------------------
# 1. init_scheme='authors_code': every parameter of every variant.
# ---------------------------------------------------------------------------
def test_the_init_table_covers_every_parameter_of_every_variant():
  for size in SIZES:
    for name in variants.NAMES:
      model = model_of(name, size, 'authors_code')
      full = jax.eval_shape(model.init, jax.random.PRNGKey(0), SRC, LENGTHS, SRC)
      only = jax.eval_shape(functools.partial(model.init, method='build'),
                            jax.random.PRNGKey(0), SRC, LENGTHS)
      assert jax.tree_util.tree_structure(full) == jax.tree_util.tree_structure(only)
      missing = [p for p in flat(jax.tree_util.tree_map(lambda s: np.zeros(()), full))
                 if expected_init(p, sizes_of(name, size)) is None]
      assert not missing, (size, name, missing)


@pytest.mark.parametrize('name', variants.NAMES)
def test_authors_code_init_matches_their_distributions(name):
  samples = draws(name, 'small', 'authors_code', False, SMALL_KEYS)
  assert violations(samples, sizes_of(name, 'small')) == {}


@pytest.mark.parametrize('name', ['mix_onestep', 'bi_relative'])
def test_authors_code_init_matches_their_distributions_at_cfq_size(name):
  samples = draws(name, 'cfq', 'authors_code', False, CFQ_KEYS)
  assert violations(samples, sizes_of(name, 'cfq')) == {}


def test_known_bounds_by_hand():
  for size, name, path, bound in KNOWN_BOUNDS:
    dist = expected_init(path, sizes_of(name, size))
    assert isinstance(dist, Uniform) and dist.bound == pytest.approx(bound, rel=1e-7)
  # ... and the model's draws reach them (the CFQ rows are drawn by the test above).
  for size, name, path, bound in KNOWN_BOUNDS:
    x = draws(name, size, 'authors_code', False, SMALL_KEYS if size == 'small' else CFQ_KEYS)
    x = x[path]
    assert np.abs(x).max() <= bound * (1 + 1e-6)
    assert np.abs(x).max() >= 0.97 * bound


def test_sigma_bias_under_authors_code_is_zero():
  """With sigma_bias=True the bias (ours only) starts at 0 under either scheme."""
  samples = dict(draws('onestep', 'small', 'authors_code', True, SMALL_KEYS))
  assert np.all(samples['cross_attention/sigma_bias'] == 0.0)
  del samples['cross_attention/sigma_bias']
  assert violations(samples, sizes_of('onestep', 'small')) == {}


@pytest.mark.parametrize('name, size, expected', [
    ('mix_locattn', 'small', {'out_bias', 'cross_attention/inter_value/bias',
                              'cross_attention/loc_bias', 'cross_attention/sigma_bias',
                              'cross_attention/rho_kernel', 'cross_attention/mix_bias'}),
    ('bi_relative', 'small', {'out_bias', 'cross_attention/inter_value/bias',
                              'cross_attention/direction/kernel',
                              'cross_attention/direction/bias'}),
    # At the CFQ size (Q = 128 < D = 256) W_l [D, Q], w_sigma [Q, 1] and W_rho [Q, 1]
    # have their shapes, so Glorot is their xavier: only the biases differ.
    ('mix_onestep', 'cfq', {'out_bias', 'cross_attention/inter_value/bias',
                            'cross_attention/direction/kernel', 'cross_attention/direction/bias',
                            'cross_attention/loc_bias', 'cross_attention/sigma_bias',
                            'cross_attention/mix_bias'}),
])
def test_the_check_fails_on_the_library_init_exactly_where_it_differs(name, size, expected):
  """The check can fail: the library's init violates it for exactly the arrays whose
  init differs (zeros for torch's default bias, Glorot for torch's default weight,
  Glorot [Q, K] for xavier over [1, Q, K] when K > 1)."""
  samples = draws(name, size, 'library', True, SMALL_KEYS if size == 'small' else CFQ_KEYS)
  assert set(violations(samples, sizes_of(name, size))) == expected


def test_the_check_fails_for_a_wrong_fan_in():
  rng = np.random.default_rng(0)
  good = rng.uniform(-1, 1, 20000) / math.sqrt(128)
  assert check_leaf(good, torch_default(128)) is None
  assert check_leaf(good, torch_default(124)) is not None      # bound 1.6% too large
  assert check_leaf(good, torch_default(132)) is not None      # bound 1.5% too small
  assert check_leaf(good, xavier(128, 1)) is not None           # Glorot instead
  assert check_leaf(np.zeros(128), torch_default(128)) is not None
  assert check_leaf(rng.normal(0, 0.3, 20000), Normal(0.3)) is None
  assert check_leaf(rng.normal(0, 0.3, 20000), Normal(0.33)) is not None
  assert check_leaf(rng.uniform(-1, 1, 20000) * 0.3 * math.sqrt(3), Normal(0.3)) is not None


# ---------------------------------------------------------------------------
# 2. init_scheme='library' is today's init, bit for bit.
# ---------------------------------------------------------------------------
# Recorded before init_scheme existed (Seq2Seq(vocab_size=14, ...).init(PRNGKey(key),
# src [2, 5], lengths [5, 3], tgt [2, 4]) at commit 238f70e): sha256 over the sorted
# leaves (path, dtype, shape, bytes), and float64 sums of a few leaves. The CFQ-size
# entry was re-recorded when W_l became [D, Q] (was [D, D]; "Library users II", found by reading):
# loc_kernel [256, 128], loc_bias [128], sigma_kernel [128, 1], rho_kernel [128, 1]
# changed, every other leaf (and every small-size digest) is the same.
LIBRARY_INIT = {
    ('onestep', 0, 'small'): (
        '5a9839980c49a3f0ff7315236d43904e6cc1f664f09f2e31e04873721616a055',
        {'embedding': 9.99314244731795, 'encoder/fwd_0/w_i': 16.379871517419815,
         'decoder_0/w_h': 34.758509551141174, 'cross_attention/loc_kernel': -23.68002144827875,
         'cross_attention/rho_kernel': 0.8039666500408202}),
    ('mix_locattn', 1, 'small'): (
        '1eaee17ca9ce711108a56ab7d9c22945a636f4ba648078a72f0a993583f7e9b7',
        {'embedding': -10.710381514858454, 'out_kernel': 5.39381599180706,
         'cross_attention/rho_kernel': 2.775614099635277,
         'cross_attention/key': 5.578775490057069}),
    ('relative', 2, 'small'): (
        '5b6e19e3386bfcfc46340e11393b6d3b9572f8a1dec35315135f41b00d17ef15',
        {'embedding': 18.33294119645143, 'cross_attention/out': 12.976366225726451,
         'cross_attention/rel_kernel': -11.344153497073876}),
    ('mix_onestep', 3, 'cfq'): (
        'a6de83dc6e1b6c3cf2a7d111d5ef3f54aca2c0382103936ef55947a87b346092',
        {'embedding': 12.100358816038352, 'decoder_0/w_h': -10.336000874638557,
         'cross_attention/loc_kernel': -17.140369802713394,
         'cross_attention/key': 14.727475017309189}),
}


def digest(params) -> str:
  h = hashlib.sha256()
  leaves = jax.tree_util.tree_flatten_with_path(params)[0]
  for path, leaf in sorted(leaves, key=lambda x: jax.tree_util.keystr(x[0])):
    a = np.asarray(leaf)
    for part in (jax.tree_util.keystr(path), str(a.dtype), str(a.shape)):
      h.update(part.encode())
    h.update(a.tobytes())
  return h.hexdigest()


@pytest.mark.parametrize('name, key, size', list(LIBRARY_INIT))
def test_library_init_is_unchanged(name, key, size):
  cfg = default.get_config()
  config_paths.overridden(cfg, SIZES[size])   # Seq2Seq's field names: LEGACY_FIELDS maps them
  cfg.update(variant=name, init_scheme='library', sigma_bias=True,
             location_normaliser='padding_free')
  model = backbones.from_config(cfg, Vocab())
  assert model.init_scheme == 'library'
  params = model.init(jax.random.PRNGKey(key), SRC, LENGTHS, method='build')
  expected_digest, sums = LIBRARY_INIT[(name, key, size)]
  got = flat(params)
  for path, total in sums.items():
    assert float(got[path].astype(np.float64).sum()) == pytest.approx(total, rel=1e-6, abs=1e-6)
  if jax.default_backend() == 'cpu':
    assert digest(params) == expected_digest


# ---------------------------------------------------------------------------
# 3. sigma_bias=False.
# ---------------------------------------------------------------------------
def _batch():
  rng = np.random.default_rng(0)
  lengths = np.array([3, 6, 5], np.int32)
  src = rng.integers(4, VOCAB, (3, 6)).astype(np.int32)
  src[np.arange(6)[None, :] >= lengths[:, None]] = 0
  tgt = rng.integers(4, VOCAB, (3, 5)).astype(np.int32)
  return src, lengths, tgt


def test_sigma_bias_false_has_no_parameter_and_one_fewer():
  src, lengths, tgt = _batch()
  for name in variants.NAMES:
    with_bias = flat(jax.eval_shape(model_of(name, 'small', 'library', True).init,
                                    jax.random.PRNGKey(0), src, lengths, tgt))
    without = flat(jax.eval_shape(model_of(name, 'small', 'library', False).init,
                                  jax.random.PRNGKey(0), src, lengths, tgt))
    location = variants.get(name).location is not None
    assert ('cross_attention/sigma_bias' in with_bias) == location
    assert 'cross_attention/sigma_bias' not in without
    assert set(with_bias) - set(without) == ({'cross_attention/sigma_bias'} if location else set())
  counts = param_count.parameter_counts(VOCAB, 'small')
  counts_without = param_count.parameter_counts(VOCAB, 'small', sigma_bias=False)
  for name in variants.NAMES:
    drop = 1 if variants.get(name).location is not None else 0
    assert counts_without[name] == counts[name] - drop


@pytest.mark.parametrize('name', ['mix_locattn_s', 'onestep'])
def test_sigma_bias_false_is_the_model_with_a_zero_bias(name):
  src, lengths, tgt = _batch()
  with_bias = model_of(name, 'small', 'library', True)
  without = model_of(name, 'small', 'library', False)

  def run():
    params = with_bias.init(jax.random.PRNGKey(5), src, lengths, tgt)
    cross = dict(params['params']['cross_attention'])
    cross['sigma_bias'] = jnp.float32(0.7)
    shifted = with_bias.apply({'params': {**params['params'], 'cross_attention': cross}},
                              src, lengths, tgt)
    cross['sigma_bias'] = jnp.float32(0.0)
    zero = with_bias.apply({'params': {**params['params'], 'cross_attention': cross}},
                           src, lengths, tgt)
    del cross['sigma_bias']
    none = without.apply({'params': {**params['params'], 'cross_attention': cross}},
                         src, lengths, tgt)
    return shifted, zero, none
  shifted, zero, none = jax.jit(run, compiler_options=FAST)()
  np.testing.assert_array_equal(none.logits, zero.logits)
  np.testing.assert_array_equal(none.aux['sigma'], zero.aux['sigma'])
  assert not np.allclose(shifted.aux['sigma'], zero.aux['sigma'])   # the bias is read


def test_sigma_without_bias_is_the_authors_form():
  """sigma = (ReLU(w_sigma . (W_l h + b_l)) + 0.27) / s, their score_positions."""
  rng = np.random.default_rng(1)
  d, s = 8, 6
  variant = dataclasses.replace(variants.get('onestep'), sigma_bias=False)
  raw = {p.name: rng.normal(size=p.shape(attention.Dims(d, d, d))).astype(np.float32) * 0.5
         for p in variant.param_defs()}
  assert 'sigma_bias' not in raw
  encoded = rng.normal(size=(2, s, d)).astype(np.float32)
  lengths = np.array([s, 4], np.int32)
  h = rng.normal(size=(2, d)).astype(np.float32)
  params = attention.fold_params(variant, raw)
  memory = attention.make_memory(variant, params, encoded, encoded, lengths)
  _, _, _, aux = attention.attention_step(variant, params, memory, h, attention.initial_carry(2))
  loc = h.astype(np.float64) @ raw['loc_kernel'] + raw['loc_bias']
  expected = (np.maximum(loc @ raw['sigma_kernel'][:, 0], 0) + 0.27) / lengths
  np.testing.assert_allclose(aux['sigma'], expected, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------
# 4. location_normaliser='authors_code'.
# ---------------------------------------------------------------------------
def sum_normalize_float64(mu, sigma, lengths, width, padding_free=False):
  """Their score_positions + sum_normalize, transcribed in float64 NumPy:
  positions i / max(1, len - 1) for i < width (the padded batch width), gauss =
  exp(-(pos - mu)^2 / (2 sigma^2)) * mask, out = gauss / sum(gauss + 1e-20).
  padding_free: gauss / (sum(gauss) + 1e-20) instead (Eq. 9 with one eps)."""
  step = 1.0 / np.maximum(1.0, lengths - 1.0)
  pos = np.arange(width)[None, :] * step[:, None]
  mask = (np.arange(width)[None, :] < lengths[:, None]).astype(np.float64)
  numer = -(pos - mu[:, None]) * (pos - mu[:, None])
  gauss = np.exp(numer / (2 * sigma[:, None] * sigma[:, None])) * mask
  if padding_free:
    return gauss / (np.sum(gauss, axis=-1, keepdims=True) + 1e-20)
  return gauss / np.sum(gauss + 1e-20, axis=-1, keepdims=True)


def _ours(mu, sigma, lengths, width, normaliser):
  positions = attention.normalized_positions(jnp.asarray(lengths), width)
  mask = jnp.arange(width)[None, :] < jnp.asarray(lengths)[:, None]
  return np.asarray(attention.gaussian_location_attention(
      jnp.asarray(mu, jnp.float32), jnp.asarray(sigma, jnp.float32), positions, mask,
      normaliser=attention.LOCATION_NORMALISERS[normaliser]), np.float64)


@pytest.mark.parametrize('past_end', [None, 6.0, 8.0, 9.0, 10.0])
def test_authors_normaliser_matches_their_sum_normalize_with_padding(past_end):
  lengths = np.array([30, 12, 5, 30], np.int32)
  width = 40                                      # padded: 10, 28 and 35 positions of padding
  sigma = np.float32(0.27) / lengths.astype(np.float32)
  if past_end is None:                            # inside the input
    mu = np.array([0.3, 0.55, 1.0, 0.0], np.float32)
  else:                                           # past_end sigma past the last position
    mu = (1.0 + past_end * sigma).astype(np.float32)
  expected = sum_normalize_float64(mu.astype(np.float64), sigma.astype(np.float64),
                                   lengths.astype(np.float64), width)
  got = _ours(mu, sigma, lengths, width, 'authors_code')
  np.testing.assert_allclose(got, expected, rtol=2e-4, atol=1e-7)
  assert np.all(got[np.arange(width)[None, :] >= lengths[:, None]] == 0.0)
  free = _ours(mu, sigma, lengths, width, 'padding_free')
  if past_end is None or past_end <= 6.0:         # the two agree until far past the end
    np.testing.assert_allclose(got, free, rtol=1e-4, atol=1e-6)
  if past_end is not None and past_end >= 9.0:    # ... and not there (BUILD_NOTES §2 item 19):
    assert np.all(got.sum(-1) < 0.95 * free.sum(-1))   # S = 40 eps terms take mass away
  # The padding-free form: the same Gaussian over sum + one eps.
  free_expected = sum_normalize_float64(mu.astype(np.float64), sigma.astype(np.float64),
                                        lengths.astype(np.float64), width, padding_free=True)
  np.testing.assert_allclose(free, free_expected, rtol=2e-4, atol=1e-7)


def test_authors_normaliser_depends_on_the_padding():
  lengths = np.array([30], np.int32)
  sigma = np.array([0.27 / 30], np.float32)
  mu = (1.0 + 9.5 * sigma).astype(np.float32)
  narrow = _ours(mu, sigma, lengths, 30, 'authors_code')
  wide = _ours(mu, sigma, lengths, 230, 'authors_code')[:, :30]
  assert wide.sum() < 0.9 * narrow.sum()
  np.testing.assert_array_equal(_ours(mu, sigma, lengths, 30, 'padding_free'),
                                _ours(mu, sigma, lengths, 230, 'padding_free')[:, :30])


def test_authors_normaliser_gradient_stays_finite_past_the_end():
  lengths = jnp.array([3, 4], jnp.int32)
  positions = attention.normalized_positions(lengths, 5)
  mask = jnp.arange(5)[None, :] < lengths[:, None]

  def loss(mu, sigma):
    lam = attention.gaussian_location_attention(
        mu, sigma, positions, mask, normaliser=attention.AUTHORS_CODE_NORMALISER)
    return jnp.sum(lam * positions)
  for far in (5.0, 30.0, 300.0):
    mu = jnp.array([1.0 + far * 0.09, 1.0 + far * 0.07])
    grads = jax.grad(loss, argnums=(0, 1))(mu, jnp.array([0.09, 0.07]))
    assert all(np.all(np.isfinite(g)) for g in grads)


def test_model_with_authors_normaliser_attends_with_their_weights():
  """Through from_config: LocAttn's weights are their sum_normalize of (mu, sigma)
  over the padded width S = N + 2."""
  src, lengths, tgt = _batch()
  src = np.pad(src, ((0, 0), (0, 7)))                    # more padding: S = 15
  cfg = default.get_config()
  cfg.update(variant='locattn', location_normaliser='authors_code', sigma_bias=False,
             init_scheme='authors_code')
  model = backbones.from_config(cfg, Vocab())
  assert model.variant.location_normaliser is attention.AUTHORS_CODE_NORMALISER
  assert not model.variant.sigma_bias and model.init_scheme == 'authors_code'

  def run():
    params = model.init(jax.random.PRNGKey(0), src, lengths, tgt)
    return model.apply(params, src, lengths, tgt)
  out = jax.jit(run, compiler_options=FAST)()
  width = src.shape[1] + 2
  s = (lengths + 2).astype(np.float64)
  for t in range(tgt.shape[1]):
    expected = sum_normalize_float64(np.asarray(out.aux['mu'][:, t], np.float64),
                                     np.asarray(out.aux['sigma'][:, t], np.float64), s, width)
    np.testing.assert_allclose(out.attention[:, t], expected, rtol=1e-4, atol=1e-6)


# ---------------------------------------------------------------------------
# 5. The config fields.
# ---------------------------------------------------------------------------
def test_config_defaults_are_the_library():
  cfg = default.get_config()
  cfg.variant = 'onestep'
  variant = variants.from_config(cfg)
  assert variant is variants.get('onestep')       # no option: the registry's object
  assert variant.sigma_bias and variant.location_normaliser is attention.PADDING_FREE
  d = default.get_config()
  assert (d.init_scheme, d.sigma_bias, d.location_normaliser) == ('library', True,
                                                                  'padding_free')


def test_explicit_variant_takes_the_options_too():
  cfg = default.get_config()
  cfg.sigma_bias, cfg.location_normaliser = False, 'authors_code'
  variant = variants.with_config_options(variants.get('mono'), cfg)
  assert not variant.sigma_bias
  assert variant.location_normaliser is attention.AUTHORS_CODE_NORMALISER
  assert variant.location is variants.get('mono').location


@pytest.mark.parametrize('field, value, message', [
    ('init_scheme', 'torch', "unknown init_scheme 'torch'; valid init_schemes: authors_code, "
     'library'),
    ('location_normaliser', 'sum', "unknown location_normaliser 'sum'; valid "
     'location_normalisers: authors_code, padding_free'),
    ('sigma_bias', 'no', "bad value for config.sigma_bias: 'no'"),
])
def test_bad_values_are_one_line_errors(field, value, message):
  cfg = ml_collections.ConfigDict({**default.get_config().to_dict(), field: value})
  with pytest.raises(errors.MonolocError, match=re.escape(message)):
    backbones.from_config(cfg, Vocab())
