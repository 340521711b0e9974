"""minkscan: pre-training data detection (Min-K%++ and baselines) at corpus scale.

Layout: `config` (the one typed config), `scoring` (pure torch math), `models` (loading
and the forward pass), `text` (tokenisation), `scorer` (the model stage), and the
layers built on them (Ray pipeline, evaluation, calibration, reports, CLI).
"""

from pipeline.config import ScanConfig, load_config
from pipeline.scorer import DocumentScorer, score_texts

__all__ = ["DocumentScorer", "ScanConfig", "load_config", "score_texts"]
