"""Tokenisation with per-document status, and length-bucketed batching."""
