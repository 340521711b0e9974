"""Model loading and the forward pass that feeds the scoring math."""
