"""ml_collections configs; pass one to the launcher with --config=path/to/file.py."""
