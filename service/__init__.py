"""Atelier's application layer: settings, HTTP app, batching workers, image I/O, CLI."""
