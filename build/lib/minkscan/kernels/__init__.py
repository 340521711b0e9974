"""GPU kernels for the scoring hot path (Triton); minkscan.scoring's torch code is the fallback."""
