"""Atelier's networks and their maths: VGG encoder, AdaIN net, DiT, diffusion, text encoder."""
