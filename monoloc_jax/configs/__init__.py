"""ml_collections configs, as data: `default` (every field with its default), `quick`,
`cfq`, `authors_code`; pass one to a console script with --config=NAME or a path.

`validation.validate(config)` checks a config; `launcher` resolves --config=NAME.
"""
