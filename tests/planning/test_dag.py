"""pwe/planning/dag.py answers as networkx did (it replaced networkx for start-up time, issue 13):
the same cycle, the same orders, the same critical path, on many random graphs. networkx
is a test dependency only, for this check."""

import random

import networkx as nx
import pytest

from pwe.planning.dag import Graph


def _pair(rng, n, p, acyclic):
    ours, theirs = Graph(), nx.DiGraph()
    names = [f"n{i}" for i in range(n)]
    rng.shuffle(names)
    ours.add_nodes_from(names)
    theirs.add_nodes_from(names)
    for i in range(n):
        for j in range(n):
            if i != j and (not acyclic or i < j) and rng.random() < p:
                w = rng.choice([0.5, 1, 2, 5])
                ours.add_edge(names[i], names[j], w)
                theirs.add_edge(names[i], names[j], weight=w)
    return ours, theirs


@pytest.mark.parametrize("seed", range(40))
def test_same_answers_as_networkx(seed):
    rng = random.Random(seed)
    for _ in range(25):
        n = rng.randint(1, 14)
        ours, theirs = _pair(rng, n, rng.choice([0.05, 0.2, 0.5]), acyclic=rng.random() < 0.7)
        assert ours.nodes == list(theirs.nodes)
        assert ours.edges == list(theirs.edges)
        assert ours.number_of_edges() == theirs.number_of_edges()
        try:
            want = nx.find_cycle(theirs)
        except nx.NetworkXNoCycle:
            want = None
        assert ours.find_cycle() == want
        if want is None:
            assert ours.topological_sort() == list(nx.topological_sort(theirs))
            assert ours.lexicographical_topological_sort(key=str) == \
                list(nx.lexicographical_topological_sort(theirs, key=str))
            assert ours.longest_path() == nx.dag_longest_path(theirs)
