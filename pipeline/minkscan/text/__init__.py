"""Tokenisation with per-document status, and batch plans (packed rows or length buckets)."""
