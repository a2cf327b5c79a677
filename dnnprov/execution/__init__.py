"""Supervised execution: jobs run in worker processes under a time budget, locally or on Dask.

One room for the batch runner (``dnnprov batch``) and the HTTP service (``dnnprov serve``):

- :mod:`~dnnprov.execution.process`: :class:`WorkerProcess`, a fresh interpreter that runs one
  job at a time (a function named ``"module:function"``) and is killed on its budget or a cancel;
- :mod:`~dnnprov.execution.pool`: :class:`WorkerPool`, N such processes fed from FIFO lanes with
  admission counts, that always converges back to its configured workers;
- :mod:`~dnnprov.execution.dask`: :class:`DaskPool`, the same pool whose slots run on a Dask
  cluster (scheduler loss, worker deaths counted as attempts, a budget per attempt).

What the pool answers for a :class:`~dnnprov.execution.pool.Work` is an :data:`Outcome`: the
job function's own tuple when it answered, else ``("killed", message)`` (over budget),
``("crashed", message)`` (its process died), ``("cancelled",)`` or ``("shutdown",)``.
"""
