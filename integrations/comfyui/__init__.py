"""Atelier for ComfyUI: copy this folder into ``ComfyUI/custom_nodes/`` (or
``comfy node install`` it from a local path) with ``atelier-client`` installed in
ComfyUI's Python; set ``ATELIER_SERVER`` (and ``ATELIER_API_KEY``) or use the Atelier
Settings node. The nodes are in :mod:`.nodes`."""

from .nodes import NODE_CLASS_MAPPINGS, NODE_DISPLAY_NAME_MAPPINGS

__all__ = ["NODE_CLASS_MAPPINGS", "NODE_DISPLAY_NAME_MAPPINGS"]
