"""Parquet inputs and outputs on local disk or S3: path resolution, shard checks, resume state."""
