"""Extra-pass methods (Lowercase, Ref, Neighbor, ReCaLL, Con-ReCall, GradNorm, PAC, WBC,
SaMIA): more forward passes, backward passes or generations per document, built on the
scorer; the distributed pipeline runs them as stages and benchmarks tabulate them."""
