"""Placeholder: filled in by the norms work (issue 2)."""

__all__: list[str] = []
