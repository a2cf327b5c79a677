"""The work of each request kind: its body checked as the CLI checks it, then run in a worker
(``tasks.py``: the kinds and ``prepare``; ``replay.py``: ``simulate`` and ``choose-plan``;
``run_jobs.py``: ``run`` jobs; ``requests.py``: the checked request and shared helpers)."""
