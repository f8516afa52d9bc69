"""Thin HTTP handlers: parse and validate into work, hand it to the request's executor
(``service.execution``: now, as a job, or waited for), encode the answer.

- ``deps``: the shared dependencies (``Annotated`` aliases), the request's executor
  among them;
- one module per group of routes: ``generate``, ``stylize`` (``stylize_video``: a clip
  as content), ``openai_images``, ``jobs``, ``models``, ``health``, ``page``, ...

Only ``service.app`` imports the routes; nothing below them reads the request or the
application's state.
"""
