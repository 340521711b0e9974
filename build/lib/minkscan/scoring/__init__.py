"""Pure torch math: per-token distribution statistics and per-document scores."""
