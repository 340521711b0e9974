"""GPU kernels for the scoring hot path (Triton); pipeline.scoring's torch code is the fallback."""
