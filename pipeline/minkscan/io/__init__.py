"""Inputs and outputs on local disk or S3: `paths` (the filesystem), `inputs` (which files an
input spec names, pieces), `planning` (the pieces of a run), `reading` (a piece into rows),
`scores` (the score output: the one reader and writer), `lease` (its one writer)."""
