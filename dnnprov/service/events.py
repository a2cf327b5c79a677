"""The service's log: one JSON line per event (``{"ts", "level", "event", ...}``) on ``dnnprov.service``.

It imports nothing of the service: every module of it may log.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

LOG = logging.getLogger("dnnprov.service")


def log_event(level: int, event: str, **fields: Any) -> None:
    """One JSON line on the service log: ``{"ts", "level", "event", ...}``."""
    LOG.log(
        level,
        json.dumps(
            {"ts": round(time.time(), 3), "level": logging.getLevelName(level).lower(), "event": event, **fields}
        ),
    )
