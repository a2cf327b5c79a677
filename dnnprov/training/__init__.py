"""The reference trainer: real asynchronous parameter-server training on local processes (docs/training.md).

- :mod:`dnnprov.training.job`: the job (a seeded synthetic classification set, a small MLP)
  and the worker types (per-worker batch, emulated GPU compute time per iteration);
- :mod:`dnnprov.training.ps` and :mod:`dnnprov.training.worker`: the PS and worker processes,
  speaking a small protocol over loopback TCP (``multiprocessing.connection``);
- :mod:`dnnprov.training.cluster`: starting and stopping them, and static profiling runs
  whose logs ``dnnprov profile`` reads;
- :mod:`dnnprov.training.local_cloud`: the control loop's cloud interface with worker
  processes as instances, capacity from traces at accelerated time (``dnnprov run --cloud local``).

torch is an optional extra (``pip install 'dnnprov[train]'``); nothing here is imported by
the rest of the package except the ``run`` command's ``--cloud local`` dispatch.
"""
