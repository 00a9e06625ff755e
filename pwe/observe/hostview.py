"""The host registry as documents: what ``pwe hosts list --json`` and ``pwe hosts check NAME
--json`` print, and the dashboard shows (one builder for both)."""

from __future__ import annotations


def host_rows(reg) -> list[dict]:
    """What ``pwe hosts list --json`` prints (and the dashboard shows): one row per host."""
    return [{"name": n, "protocol": h.protocol, "contact": h.contact, "cores_per_node": h.cores_per_node,
             "nodes": len(h.nodes) or None, "source": reg.sources[n]} for n, h in sorted(reg.hosts.items())]


def check_document(name: str, checks: list) -> dict:
    """What ``pwe hosts check NAME --json`` prints (and the dashboard shows)."""
    return {"host": name, "ok": all(c[1] for c in checks),
            "checks": [{"check": w, "ok": g, "detail": d} for w, g, d in checks]}
