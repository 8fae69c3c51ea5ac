"""Writes tests/data/authors_step_<variant>.npz: one training step of the authors' code.

For each variant below, this script builds the authors' PyTorch model (their
`seq2seq_framework` with `GRUEncoderDecoder` and the variant's attention class,
configured by their `configs/copy_configs.py` class through their own
`configs.configLoader.load_config`) at a tiny size, with dropout off, seeded
torch init (the output-side weights then scaled, see `VARIANTS`), in train
mode; collates a small ragged batch with their own `seq2seq_collater`; and runs
their `seq2seq_agent`'s training step exactly as their `trainers/trainer.py`
does: `agent.run(batch, train=True)` (their `loss_fn`: -log(softmax + 1e-9),
masked mean over target tokens), `agent.backward(loss)`, `agent.step()`
(`clip_grad_norm_(params, 5)`, then `AdamW(lr=1e-3, weight_decay=0)`).

Each fixture holds, all in THEIR layout and vocabulary ids:
  names, shapes: the entries of their state_dict (torch's names; shapes as
    'd0,d1,..', '' for a scalar); the arrays are stored flat, one after another in
    that order, to keep the files small:
  before, after [P] float32: their state_dict before and after the step;
  grad [P] float32: the gradients of the step, before clipping (NaN where torch
    has no gradient: arrays their forward pass never reads, e.g. the decoder's `h0`);
  exp_avg, exp_avg_sq [P] float32: AdamW's moment estimates after the step
    (0.1 g and 0.001 g^2 of the clipped gradient g; NaN where it has no state);
  vocab: their vocabulary, in id order (task tokens sorted, then <sos> <unk> <eos> <pad>);
  src, trg: the token strings of the batch rows (in the order of their collated
    batch), '\\x1f'-joined;
  src_vec, trg_vec, labels [B, *] int, src_mask, trg_mask [B, *] float: the
    collated batch as their model reads it;
  loss, grad_norm: their loss and the global norm of the gradients before clipping;
  min_target_prob: the smallest probability their model gives a target token;
  their_model, output_scale, dims (embed, encoder hidden per direction, decoder
  hidden, qk, value), torch_version.

`tests/authors_step_test.py` maps `before` into this library's parameters, runs
one step of `train.make_train_programs`'s train step and checks the loss, the
gradient norm, every gradient, every parameter after the step and Adam's moments
against these files.

Regenerate (from the repository root, with the authors' checkout at ../refcode,
JRC1995/MonotonicLocationAttention @234f5b5, and a Python that has torch, e.g.
their virtualenv; the files come out byte-identical with torch 2.13.0 on CPU):
  ../refcode/.venv/bin/python experiments/authors_code/model_step.py \
      [--refcode ../refcode] [--variants content,onestep,...]
"""

import argparse
import pathlib
import random
import sys
import types

import numpy as np

REPO = pathlib.Path(__file__).resolve().parents[2]
OUT_DIR = REPO / 'tests' / 'data'

# Our variant slug -> (their model name, torch seed, output scale). The names are
# those of experiments/authors_code/run.py's MODELS. Output scale: after their
# init, the embedding (tied with the output layer) and out_linear1's weight are
# multiplied by it, so that the logits are larger and the gradient's global norm
# exceeds the clip (5; at scale 1 it is 0.5-0.9 at this size). The scales keep
# every target token's probability above MIN_TARGET_PROB, where their loss's
# -log(p + 1e-9) and the exact -log p differ by < 1e-4 relative per token.
# locattn_s and mix_locattn keep scale 1: their clip is inactive.
VARIANTS = {
    'content': ('BiGRU', 1, 2.75),
    'onestep': ('BiGRU_OneStep', 2, 2.5),
    'mono': ('BiGRU_MonoAttn', 3, 2.75),
    'locattn': ('BiGRU_locattn', 4, 2.75),
    'locattn_s': ('BiGRU_locattn_simple', 5, 1.0),
    'mix_locattn': ('BiGRU_mixattn', 6, 1.0),
    'rmono': ('BiGRU_RMonoAttn', 7, 2.5),
}
MIN_TARGET_PROB = 1e-5
MAX_GRAD_NORM = 5.0

EMBED, ENC_HIDDEN, QK, VALUE = 8, 4, 8, 8   # encoder hidden is per direction (BiGRU)
DEC_HIDDEN = 2 * ENC_HIDDEN
TASK_TOKENS = tuple('abcdefghij')          # 10 task tokens + 4 specials = 14
SPECIALS = ('<sos>', '<unk>', '<eos>', '<pad>')
# A ragged batch: (source, target); the target gets <eos> appended, as the
# authors' preprocessing does.
EXAMPLES = (
    ('a c e g i', 'i g e'),
    ('b d', 'b d b d b d'),
    ('j h f d', 'c a'),
    ('c c a', 'a c c e'),
)


def full_config(dataset: str, model_name: str, vocab2idx):
  """Their config dict for `model_name` on `dataset`, as train.py + load_data build it."""
  from configs.configLoader import load_config
  args = types.SimpleNamespace(dataset=dataset, model=model_name, model_type='seq2seq')
  config = load_config(args)
  # What utils/data_utils.load_data adds.
  config.update(idx2vocab={i: t for t, i in vocab2idx.items()}, vocab2idx=vocab2idx,
                UNK_id=vocab2idx['<unk>'], SEP_id=None, PAD_id=vocab2idx['<pad>'],
                EOS_id=vocab2idx['<eos>'], vocab_len=len(vocab2idx),
                SOS_id=vocab2idx['<sos>'])
  config['generate'] = False          # train.py sets this before training
  return config


def their_config(model_name: str, vocab2idx):
  """`full_config` of their Copy config for `model_name`, at the tiny size."""
  config = full_config('copy', model_name, vocab2idx)
  config.update(embd_dim=EMBED, encoder_hidden_size=ENC_HIDDEN,
                decoder_hidden_size=DEC_HIDDEN, qk_head_dim=QK, inter_value_size=VALUE,
                v_head_dim=DEC_HIDDEN, dropout=0.0, attn_dropout=0.0,
                position_max_len=64, train_batch_size=len(EXAMPLES))
  return config


def samples(vocab2idx):
  out = []
  for src, trg in EXAMPLES:
    src, trg = src.split(), trg.split() + ['<eos>']
    src_vec = [vocab2idx[t] for t in src]
    trg_vec = [vocab2idx[t] for t in trg]
    out.append({'src': src, 'trg': trg, 'src_vec': src_vec, 'ptr_src_vec': list(src_vec),
                'oov_num': 0, 'trg_vec': trg_vec, 'label': list(trg_vec)})
  return out


def flat(arrays, names):
  return np.concatenate([np.asarray(arrays[k], np.float32).reshape(-1) for k in names])


def run_variant(slug: str, model_name: str, seed: int, output_scale: float):
  import torch
  from agents import seq2seq_agent
  from collaters import seq2seq_collater
  from models import seq2seq_framework

  vocab = list(TASK_TOKENS) + list(SPECIALS)
  vocab2idx = {t: i for i, t in enumerate(vocab)}
  config = their_config(model_name, vocab2idx)
  config['device'] = torch.device('cpu')
  torch.manual_seed(seed)
  random.seed(seed)
  np.random.seed(seed)
  model = seq2seq_framework(data=None, config=config)
  with torch.no_grad():
    model.encoder_decoder.embed_layer.weight.mul_(output_scale)
    model.encoder_decoder.out_linear1.weight.mul_(output_scale)
  assert config['max_grad_norm'] == MAX_GRAD_NORM and config['lr'] == 1e-3
  assert config['optimizer'] == 'AdamW' and config['weight_decay'] == 0.0
  agent = seq2seq_agent(model=model, config=config, device=torch.device('cpu'))
  collater = seq2seq_collater(PAD=vocab2idx['<pad>'], config=config, train=True)
  batches = collater.collate_fn(samples(vocab2idx))
  assert len(batches) == 1
  batch = batches[0]

  with torch.no_grad():                    # dropout is off: the same forward as agent.run's
    probs = model(batch)['logits']
  target_probs = probs.gather(-1, batch['labels'][..., None])[..., 0][batch['trg_mask'] > 0]
  min_target_prob = float(target_probs.min())
  assert min_target_prob > MIN_TARGET_PROB, (slug, min_target_prob)

  skip = lambda name: 'relative_position_embed' in name or 'embed_positions' in name
  before = {k: v.detach().numpy().copy() for k, v in model.state_dict().items() if not skip(k)}
  names = list(before)
  out = dict(names=np.array(names),
             shapes=np.array([','.join(map(str, before[k].shape)) for k in names]))
  out.update(src_vec=batch['src_vec'].numpy(), trg_vec=batch['trg_vec'].numpy(),
             labels=batch['labels'].numpy(), src_mask=batch['src_mask'].numpy(),
             trg_mask=batch['trg_mask'].numpy(),
             src=np.array(['\x1f'.join(s) for s in batch['src']]),
             trg=np.array(['\x1f'.join(t) for t in batch['trg']]))

  # Their trainer's step: agent.run -> agent.backward -> agent.step.
  item = agent.run(batch, train=True)
  loss = item['loss']
  agent.backward(loss)
  grads = {name: p.grad.detach().numpy().copy() for name, p in model.named_parameters()
           if p.grad is not None}
  norm = float(torch.linalg.vector_norm(
      torch.stack([torch.linalg.vector_norm(p.grad) for p in agent.parameters
                   if p.grad is not None])))
  agent.step()
  after = {k: v.detach().numpy().copy() for k, v in model.state_dict().items() if not skip(k)}
  moments = {'exp_avg': {}, 'exp_avg_sq': {}}
  for name, p in model.named_parameters():
    state = agent.optimizer.state.get(p, {})
    if state:
      assert int(state['step']) == 1
      for which, arrays in moments.items():
        arrays[name] = state[which].detach().numpy().copy()
  nan = {k: np.full(v.shape, np.nan, np.float32) for k, v in before.items()}
  out.update(before=flat(before, names), after=flat(after, names),
             grad=flat({**nan, **grads}, names),
             exp_avg=flat({**nan, **moments['exp_avg']}, names),
             exp_avg_sq=flat({**nan, **moments['exp_avg_sq']}, names),
             output_scale=np.float64(output_scale), min_target_prob=np.float64(min_target_prob))
  out.update(vocab=np.array(vocab), loss=np.float64(loss.item()), grad_norm=np.float64(norm),
             their_model=np.array(model_name),
             dims=np.array([EMBED, ENC_HIDDEN, DEC_HIDDEN, QK, VALUE], np.int32),
             torch_version=np.array(torch.__version__))
  path = OUT_DIR / f'authors_step_{slug}.npz'
  np.savez_compressed(path, **out)
  moved = max(float(np.abs(after[k] - before[k]).max()) for k in before)
  print(f'{slug:12s} ({model_name}): loss {loss.item():.6f}  grad norm {norm:.4f}  '
        f'min target p {min_target_prob:.1e}  max |param change| {moved:.2e}  '
        f'{path.stat().st_size} bytes', flush=True)


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--refcode', default=str(REPO.parent / 'refcode'),
                      help="the authors' checkout (JRC1995/MonotonicLocationAttention)")
  parser.add_argument('--variants', default=','.join(VARIANTS),
                      help='comma list of variant slugs')
  args = parser.parse_args()
  sys.path.insert(0, str(pathlib.Path(args.refcode).resolve()))
  import torch
  torch.set_num_threads(1)
  for slug in args.variants.split(','):
    run_variant(slug, *VARIANTS[slug])


if __name__ == '__main__':
  main()
