"""Extra-pass baselines (Lowercase, Ref, Neighbor): more forward passes per document, built on
the scorer; the distributed pipeline runs them as stages and benchmarks tabulate them."""
