"""The authors' PyTorch parameters in this library's raw (unfolded) parameter tree.

The mapping (their `encoder_decoder.<name>` -> ours), found by reading both codes:
  * torch Linear/GRU weights [out, in] are our kernels [in, out] (transposed);
    GRU gates are (r, z, n) in both, and our decoder GRU's input kernel is
    [embedding rows; context rows] as their `cat([input, c])`;
  * embedding rows and the output bias are permuted between the vocabularies
    (theirs: task tokens then <sos> <unk> <eos> <pad>; ours: <pad> <sos> <eos>
    <unk> then the task tokens): `vocab_perm`;
  * Wsigma [1, d, 1], Wrho [1, d, K] are our sigma_kernel [d, 1], rho_kernel [d, K];
  * MonoAttn: their step = s relu + (1 - s) sigmoid(5 rho) with s = sigmoid(step_bias),
    ours g sigmoid(5 rho) + (1 - g) relu with g = sigmoid(gate_logit): gate_logit
    = -step_bias (Adam is odd in the gradient, so the step maps the same way);
  * arrays of theirs that their forward never reads (no gradient, not updated) have
    no counterpart: the decoder's `h0` always, `step_bias` of the OneStep and RMono
    attention (pass them as `skip`).

Used by tests/authors_step_test.py (one step) and trajectory.py (many steps). Needs
only numpy.
"""

from typing import Any, Dict, Iterable, Sequence, Tuple

import numpy as np

T = lambda x: x.T                       # torch [out, in] -> our kernel [in, out]
SAME = lambda x: x
# their name (after 'encoder_decoder.') -> (our path, their array -> ours | 'vocab').
MAPPING = {
    'START': (('start',), SAME),
    'END': (('end',), SAME),
    'embed_layer.weight': (('embedding',), 'vocab'),
    'output_map.bias': (('vocab_bias',), 'vocab'),
    'out_linear1.weight': (('out_kernel',), T),
    'out_linear1.bias': (('out_bias',), SAME),
    'decodercell.weight_ih': (('decoder_0', 'w_i'), T),
    'decodercell.weight_hh': (('decoder_0', 'w_h'), T),
    'decodercell.bias_ih': (('decoder_0', 'b_i'), SAME),
    'decodercell.bias_hh': (('decoder_0', 'b_h'), SAME),
    'value_transform.weight': (('cross_attention', 'inter_value', 'kernel'), T),
    'value_transform.bias': (('cross_attention', 'inter_value', 'bias'), SAME),
    'dir_gater.weight': (('cross_attention', 'direction', 'kernel'), T),
    'dir_gater.bias': (('cross_attention', 'direction', 'bias'), SAME),
    'attention_layer.value_linear.weight': (('cross_attention', 'value', 'kernel'), T),
    'attention_layer.head_compose_linear.weight': (('cross_attention', 'out'), T),
    'attention_layer.query_linear.weight': (('cross_attention', 'query'), T),
    'attention_layer.key_linear.weight': (('cross_attention', 'key'), T),
    'attention_layer.position_state_linear.weight': (('cross_attention', 'loc_kernel'), T),
    'attention_layer.position_state_linear.bias': (('cross_attention', 'loc_bias'), SAME),
    'attention_layer.Wsigma': (('cross_attention', 'sigma_kernel'), lambda x: x[0]),
    'attention_layer.Wrho': (('cross_attention', 'rho_kernel'), lambda x: x[0]),
    'attention_layer.step_bias': (('cross_attention', 'gate_logit'), lambda x: -x[0]),
    'attention_layer.mix_scorer.weight': (('cross_attention', 'mix_kernel'), T),
    'attention_layer.mix_scorer.bias': (('cross_attention', 'mix_bias'), lambda x: x[0]),
}
for _suffix, _ours in (('', 'fwd_0'), ('_reverse', 'bwd_0')):
  MAPPING.update({
      f'encoder.weight_ih_l0{_suffix}': (('encoder', _ours, 'w_i'), T),
      f'encoder.weight_hh_l0{_suffix}': (('encoder', _ours, 'w_h'), T),
      f'encoder.bias_ih_l0{_suffix}': (('encoder', _ours, 'b_i'), SAME),
      f'encoder.bias_hh_l0{_suffix}': (('encoder', _ours, 'b_h'), SAME),
  })


def vocab_perm(their_vocab: Sequence[str], our_tokens: Sequence[str]) -> np.ndarray:
  """perm[i]: their id of our token i (both vocabularies hold the same tokens)."""
  if sorted(their_vocab) != sorted(our_tokens):
    raise ValueError(f'the vocabularies differ: {sorted(set(their_vocab) ^ set(our_tokens))}')
  return np.array([list(their_vocab).index(t) for t in our_tokens])


def unflatten(flat: np.ndarray, names: Iterable[str], shapes: Iterable[str]
              ) -> Dict[str, np.ndarray]:
  """A flat float vector + their names and shapes ('d0,d1,..'; '' = scalar), as the
  fixtures store a state_dict -> {their name without 'encoder_decoder.': array}."""
  out, i = {}, 0
  for name, shape in zip(names, shapes):
    shape = tuple(int(s) for s in str(shape).split(',')) if str(shape) else ()
    n = int(np.prod(shape))
    out[str(name).removeprefix('encoder_decoder.')] = flat[i:i + n].reshape(shape)
    i += n
  assert i == flat.size, (i, flat.size)
  return out


def to_ours(theirs: Dict[str, Any], perm: np.ndarray, skip: Iterable[str] = ()
            ) -> Dict[str, Any]:
  """Their arrays -> our nested parameter dict (float32). perm: `vocab_perm`."""
  skip = set(skip)
  out = {}
  for name, x in theirs.items():
    if name in skip:
      continue
    path, fn = MAPPING[name]
    x = np.asarray(x)[perm] if fn == 'vocab' else fn(np.asarray(x))
    node = out
    for key in path[:-1]:
      node = node.setdefault(key, {})
    assert path[-1] not in node, path
    node[path[-1]] = np.asarray(x, np.float32)
  return out


def from_trace(path, our_tokens: Sequence[str]) -> Tuple[Dict[str, Any], int]:
  """The initial weights a `trajectory.py authors` trace records, as our parameter dict
  (their unused parameters and buffers skipped), and their run `time`."""
  d = dict(np.load(path))
  theirs = unflatten(d['before'], d['names'], d['shapes'])
  perm = vocab_perm([str(t) for t in d['vocab']], our_tokens)
  return to_ours(theirs, perm, skip=[str(n) for n in d['unused']]), int(d['time'])
