"""Common side constraints of the spot model as one-liners (issue 29).

Each function adds a named block of linear constraints (and, where needed, binaries of its
own) to a model built by :func:`dnnprov.formulations.spot.create_spot_model` and returns
that block; :func:`dnnprov.model_solve.solve_model` then honours it with the same proofs
as any user constraint (docs/formulations.md). They use the model's indicators
``m.performance.used[c]`` (1 exactly when column ``c`` has a worker). An instance *type*
covers its spot and on-demand columns (``p3.2xlarge`` and ``p3.2xlarge:on-demand``); a
*family* is the part of the type name before the dot (``p3``, ``g4dn``).

>>> m = create_spot_model(problem)
>>> side.at_most_types(m, 2)                      # at most 2 instance types
>>> side.min_share(m, ["g3.8xlarge"], 0.3)        # >= 30 % of the workers on g3.8xlarge
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import pyomo.environ as pyo
from dnnprov.formulations.spot import problem_of

from dnnprov.errors import InvalidInputError


def _columns_by_type(m: pyo.ConcreteModel) -> dict[str, list[str]]:
    """Column labels per instance type, in the model's order."""
    cols = problem_of(m).columns()
    by_type: dict[str, list[str]] = {}
    for label, name in zip(cols.labels, cols.type_names):
        by_type.setdefault(name, []).append(label)
    return by_type


def _types(m: pyo.ConcreteModel, types: Iterable[str], field: str) -> dict[str, list[str]]:
    by_type = _columns_by_type(m)
    chosen = list(types)
    unknown = [t for t in chosen if t not in by_type]
    if unknown or not chosen:
        raise InvalidInputError(
            field,
            f"names no instance type of the model ({', '.join(unknown) or 'none given'}); known: {', '.join(by_type)}",
        )
    return {t: by_type[t] for t in chosen}


def _add(m: pyo.ConcreteModel, name: str, block: pyo.Block) -> pyo.Block:
    if m.component(name) is not None:
        raise InvalidInputError("name", f"the model already has a component {name!r}; pass another name")
    m.add_component(name, block)
    return block


def _type_used(b: pyo.Block, m: pyo.ConcreteModel, by_type: dict[str, list[str]]) -> None:
    """``b.used[t]``: 1 exactly when some column of type t has a worker."""
    b.T = pyo.Set(initialize=list(by_type), ordered=True)
    b.used = pyo.Var(b.T, domain=pyo.Binary, doc="1 if the type has a worker")
    used = m.performance.used
    b.covers = pyo.Constraint(
        [(t, c) for t, cs in by_type.items() for c in cs], rule=lambda b, t, c: used[c] <= b.used[t]
    )
    b.needs = pyo.Constraint(b.T, rule=lambda b, t: b.used[t] <= sum(used[c] for c in by_type[t]))


def at_most_types(m: pyo.ConcreteModel, k: int, *, name: str = "at_most_types") -> pyo.Block:
    """At most ``k`` instance types have workers.

    With one column per type the row counts ``m.performance.used`` directly; a type with a
    spot and an on-demand column gets a binary ``m.<name>.used[type]`` of its own.
    """
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise InvalidInputError("k", f"must be an integer >= 1, got {k!r}")
    by_type = _columns_by_type(m)
    b = _add(m, name, pyo.Block())
    if all(len(cs) == 1 for cs in by_type.values()):
        b.limit = pyo.Constraint(expr=sum(m.performance.used[c] for c in m.C) <= k)
        return b
    _type_used(b, m, by_type)
    b.limit = pyo.Constraint(expr=sum(b.used[t] for t in b.T) <= k)
    return b


def fixed_charge(
    m: pyo.ConcreteModel, fees_usd: Mapping[str, float], limit_usd: float | None = None, *, name: str = "fixed_charge"
) -> pyo.Block:
    """A fixed charge per instance type used: ``m.<name>.total`` = sum of the fees of the types
    with workers (a continuous variable of the side model, loaded with the plan), at most
    ``limit_usd`` when given. The charge is a side quantity: the objective stays the cost
    (an objective adding it is refused by :func:`~dnnprov.model_solve.solve_model`)."""
    by_type = _types(m, fees_usd, "fees_usd")
    bad = {t: f for t, f in fees_usd.items() if not (isinstance(f, (int, float)) and f >= 0)}
    if bad:
        raise InvalidInputError("fees_usd", f"fees must be numbers >= 0; got {bad}")
    if limit_usd is not None and not limit_usd >= 0:
        raise InvalidInputError("limit_usd", f"must be >= 0, got {limit_usd!r}")
    b = _add(m, name, pyo.Block())
    _type_used(b, m, by_type)
    most = float(sum(fees_usd.values()))
    b.total = pyo.Var(bounds=(0.0, most), doc="fixed charges of the types used, $")
    b.sum = pyo.Constraint(expr=b.total == sum(float(fees_usd[t]) * b.used[t] for t in b.T))
    if limit_usd is not None:
        b.limit = pyo.Constraint(expr=b.total <= float(limit_usd))
    return b


def min_share(m: pyo.ConcreteModel, types: Iterable[str], share: float, *, name: str = "min_share") -> pyo.Block:
    """At least ``share`` (0..1) of the workers are of the given instance types."""
    if not 0 <= share <= 1:
        raise InvalidInputError("share", f"must be in [0, 1], got {share!r}")
    by_type = _types(m, types, "types")
    b = _add(m, name, pyo.Block())
    b.share = pyo.Constraint(expr=sum(m.n[c] for cs in by_type.values() for c in cs) >= share * m.workers)
    return b


def all_or_nothing(m: pyo.ConcreteModel, family: str, *, name: str | None = None) -> pyo.Block:
    """Either every instance type of ``family`` (``p3``: p3.2xlarge, p3.8xlarge, ...) has
    workers, or none has (``m.<name>.on`` says which)."""
    by_type = {t: cs for t, cs in _columns_by_type(m).items() if t.split(".")[0] == family}
    if not by_type:
        families = sorted({t.split(".")[0] for t in _columns_by_type(m)})
        raise InvalidInputError("family", f"{family!r} has no instance type in the model; known: {', '.join(families)}")
    b = _add(m, name or f"all_or_nothing_{family}", pyo.Block())
    _type_used(b, m, by_type)
    b.on = pyo.Var(domain=pyo.Binary, doc="1 if the family is used")
    b.same = pyo.Constraint(b.T, rule=lambda b, t: b.used[t] == b.on)
    return b


def at_least_if_any(m: pyo.ConcreteModel, type_name: str, k: int, *, name: str | None = None) -> pyo.Block:
    """Workers of ``type_name`` (all its columns): none, or at least ``k``."""
    by_type = _types(m, [type_name], "type_name")
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise InvalidInputError("k", f"must be an integer >= 1, got {k!r}")
    b = _add(m, name or f"at_least_if_any_{type_name.replace('.', '_')}", pyo.Block())
    _type_used(b, m, by_type)
    workers = sum(m.n[c] for c in by_type[type_name])
    b.floor = pyo.Constraint(expr=workers >= k * b.used[type_name])
    return b
