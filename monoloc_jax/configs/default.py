"""The paper's training protocol (App. E) for the small digit, Lookup and SCAN models."""

import ml_collections

from monoloc_jax import backbones
from monoloc_jax import recipes


def get_config() -> ml_collections.ConfigDict:
  """Every setting of a run, with the paper's defaults."""
  c = ml_collections.ConfigDict()
  # What to train.
  c.task = 'reverse_copy'    # task slug (the CLI flag is --task)
  c.variant = 'onestep'      # attention variant slug (the CLI flag is --model)
  c.data_dir = ''            # SCAN / CFQ / reference Lookup files; '' = generate in code
  c.data_seed = 0            # seed of generated data (Lookup: 123 reproduces the reference tables)
  c.seed = 0                 # first model seed
  c.seeds = 1                # number of seeds, trained together in one vmapped program
  c.train_size = 0           # use only the first N training samples (0 = all)
  c.eval_size = 0            # use only the first N samples of dev and test splits (0 = all)
  c.test_splits = 'paper'    # 'paper', 'all' or a comma list such as 'test_15,test_100' or 'test_iid,paper'

  # Model (the paper's §3 and App. E: the small size). Shared by both backbones;
  # each backbone's own fields are its group below.
  c.hidden_dim = 128         # model width (GRU: the BiGRU encoder has hidden_dim / 2 per direction)
  c.dropout = 0.5            # dropout rate during training
  c.qk_dim = 0               # query/key width (the paper's head dimension); 0 = hidden_dim
                             # (transformer: per head; 0 = hidden_dim / transformer.heads)
  c.mix_mode = 'paper'       # Mix variants mix (Eq. 15-16); 'authors_code': as the authors' code ran them
  c.mono_gate_init = -20.0   # MonoAttn gate logit p: g = sigmoid(p) = 1 - sigmoid(20), as the authors' code
  c.min_sigma = 0.27         # floor of the location attention's sigma, in positions (Eq. 10)
  # Backbone: 'gru' (the paper's BiGRU -> GRU) or 'transformer' (beyond the paper: a
  # pre-LN Transformer of width hidden_dim and rate dropout).
  c.backbone = 'gru'         # 'gru' or 'transformer' (backbones.BACKBONES)
  # Each backbone's group, --config.gru.embed_dim=..., --config.transformer.layers=...:
  # the fields, defaults and comments are in monoloc_jax/backbones/<name>.py `config_defaults`.
  for name, backbone in backbones.BACKBONES.items():
    c[name] = backbone.defaults()
  # Computation dtype: 'float32', 'bfloat16' (TPU; parameters, the location recurrence,
  # softmaxes and logits stay float32) or 'float64' (needs JAX_ENABLE_X64=1).
  c.dtype = 'float32'
  # float32 products: 'highest' (full float32 everywhere), 'high' or 'default' (the
  # backend's: TensorFloat-32 on NVIDIA GPUs, bfloat16 on TPU). precision.py.
  c.matmul_precision = 'highest'

  # The training procedure (App. E: batching, budget, stopping, AdamW, lr plateau, dev
  # metric, and the procedure's data and init choices): the `library` recipe, whose
  # values and help are written once, in monoloc_jax/recipes.py.
  c.update(recipes.LIBRARY)
  c.warmup_steps = 0         # scale update k (0-based) by min(1, (k + 1) / N); 0 = no warmup
  c.eval_batch_size = 256    # batch size of dev and test decoding
  # Range evaluation (--mode=range, range_eval.py): every length of a range.
  c.range_lengths = ''       # 'lo:hi' (inclusive); '' = 1:L, L = min(500, 10x longest train length)
                             # (a task with test_lengths, e.g. the Chomsky tasks: those, 41:500)
  c.range_samples = 200      # examples drawn per length (fixed seed, none from the training data)

  # Speed only (same model, same forward numbers; gradients agree to float rounding);
  # also gru.decoder_backward.
  c.seed_strategy = 'auto'     # 'vmap', 'map', 'threads' or 'auto' (multiseed.resolve)
  # Training shapes (input_pipeline.TRAIN_WIDTHS): 'bucket', a compiled train step per
  # bucket (or random batch) width; 'widest', every batch at the split's longest source and
  # target: one train step to compile (about 5 s on the 2-core CPU), more decoder steps.
  c.train_widths = 'bucket'    # 'bucket' (each batch its bucket's width) or 'widest' (one shape)

  c.progress = True          # tqdm bars when stderr is a terminal (epoch lines are always printed)
  return c
