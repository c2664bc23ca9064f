"""hermes-opd: hindsight-guided on-policy distillation for tool-using agents."""

__version__ = "0.1.0"
