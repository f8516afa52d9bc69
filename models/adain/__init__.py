"""AdaIN arbitrary style transfer on the normalised VGG-19 (Huang & Belongie, ICCV 2017)."""

from models.adain.pipeline import DEFAULT_LEVELS, StyleTransfer
from models.adain.stats import FeatureStats, StyleStatsCache

__all__ = ["DEFAULT_LEVELS", "FeatureStats", "StyleStatsCache", "StyleTransfer"]
