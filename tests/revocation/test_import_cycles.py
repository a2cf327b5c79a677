"""The revocation room has no import cycle, function-level imports included (read from the
source as tests/test_architecture.py reads it)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from test_architecture import MODULES, imports


def find_cycle(graph: Mapping[str, Sequence[str]]) -> list[str]:
    """One cycle of ``graph`` (node -> the nodes it imports) as a path back to its start; empty: none."""
    done: set[str] = set()

    def visit(node: str, path: list[str]) -> list[str]:
        for nxt in graph.get(node, ()):
            if nxt in path:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in done:
                found = visit(nxt, path + [nxt])
                if found:
                    return found
        done.add(node)
        return []

    for node in sorted(graph):
        if node not in done:
            found = visit(node, [node])
            if found:
                return found
    return []


def room_graph(prefix: str) -> dict[str, list[str]]:
    """The imports among the modules under ``prefix``."""
    inside = {m for m in MODULES if m == prefix or m.startswith(prefix + ".")}
    return {m: sorted(n for n in imports(MODULES[m]) if n in inside and n != m) for m in inside}


def test_revocation_has_no_import_cycle() -> None:
    """policies, replan, replan_policy and simulate used to import each other (through lazy
    imports); the policies' shared interface is in policy_view, which imports none of them."""
    graph = room_graph("dnnprov.revocation")
    assert "dnnprov.revocation.replan_policy" in graph["dnnprov.revocation.policies"]  # lazy imports are read
    assert find_cycle(graph) == []


def test_find_cycle_finds_one() -> None:
    assert find_cycle({"a": ["b"], "b": ["c"], "c": ["a"], "d": ["a"]}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": ["b"], "b": [], "c": ["a", "b"]}) == []
