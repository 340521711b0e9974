"""Inputs and outputs on local disk or S3: `paths` (the filesystem), `sources` (input files,
pieces and reading them), `scores` (the score output: the one reader and writer)."""
