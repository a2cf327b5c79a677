"""Which replay engine `simulate` uses, and the option pairs it refuses (CLI and service share
:func:`pooled_replay`; each face names its own fields)."""

from __future__ import annotations

import pytest

from dnnprov.errors import InvalidInputError
from dnnprov.revocation.simulate import pooled_replay

CLI = lambda name: "--" + name.replace("_", "-")          # noqa: E731
PLAIN = dict(zones=False, hindsight=False, period=False, model=False, fit_period=False, replan_method="exact")


@pytest.mark.parametrize(("policy", "changes", "pooled"), [
    ("none", {}, False), ("fallback", {}, False), ("replan", {}, False), ("replan", {"replan_method": "heuristic"}, False),
    ("none", {"zones": True}, True), ("fallback", {"hindsight": True}, True), ("none", {"period": True}, True),
    ("mpc", {}, True), ("uniform-progress", {}, True), ("mpc", {"model": True}, True), ("mpc", {"fit_period": True}, True),
])
def test_the_engine_follows_the_options(policy, changes, pooled):
    assert pooled_replay(policy, **{**PLAIN, **changes}) is pooled


@pytest.mark.parametrize(("policy", "changes", "field", "text"), [
    ("mpc", {"model": True, "fit_period": True}, "model", "give model or fit_period, not both"),
    ("failover", {"model": True}, "model", "goes with policy mpc"),
    ("none", {"fit_period": True}, "fit_period", "goes with policy mpc"),
    ("replan", {"zones": True}, "policy", "replays without zones, period and hindsight"),
    ("mpc", {"replan_method": "heuristic"}, "policy", "replays without"),
])
def test_options_that_do_not_go_together_are_refused_naming_the_field(policy, changes, field, text):
    with pytest.raises(InvalidInputError) as plain:
        pooled_replay(policy, **{**PLAIN, **changes})
    assert plain.value.field == field and text in plain.value.problem
    with pytest.raises(InvalidInputError) as cli:
        pooled_replay(policy, **{**PLAIN, **changes}, option=CLI)
    assert cli.value.field == CLI(field) and "--" in cli.value.problem
