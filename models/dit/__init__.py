"""Text-to-image: a small text-conditioned DiT with adaLN-Zero blocks, its training and pipeline."""
