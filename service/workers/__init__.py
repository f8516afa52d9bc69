"""Model workers: one batcher per model and device, requests routed to the least loaded.

A model joins the service with three things: a ``load(search_path, device)`` function,
a ``run(model, jobs, control) -> results`` function that does one batched forward, and
a job type whose ``batch_key()`` says which jobs may share that forward and whose
``cost()`` (pixels) counts against the per-batch memory budget.

* :mod:`~service.workers.style_transfer` and :mod:`~service.workers.text_to_image`: the
  job type, loader and batched forward of each model kind;
* :mod:`~service.workers.registry`: ``ModelEntry`` and ``MODELS``, the models by name;
* :mod:`~service.workers.pool`: ``WorkerPool``, a model's batchers on every device;
* :mod:`~service.workers.loading`: loading the requested models, their status and
  weight hashes, and building their pools.

The service sees the models only through the protocols of ``service.model_types``.
"""
