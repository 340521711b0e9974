"""Evaluation: detection metrics, paper-style benchmark tables and online (chunk) scoring."""
