"""Thin HTTP handlers: parse and validate, answer now or as a job, encode the answer.

- ``deps``: the shared dependencies (``Annotated`` aliases);
- ``answer``: how validated work is answered (here, or through the job queue);
- ``disconnect``: work cancelled when its client goes away;
- one module per group of routes: ``generate``, ``stylize``, ``openai_images``,
  ``jobs``, ``models``, ``health``, ``page``.
"""
