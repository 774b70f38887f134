"""The router's /metrics: its own counters, then every replica's metrics with a
``replica="URL"`` label on each sample, one family per metric name (Prometheus' text format
wants a family's samples together under one HELP / TYPE header).
"""

from __future__ import annotations

import re
from typing import Iterable

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})?(\s.*)$")


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def relabel(line: str, replica: str) -> str:
    """A sample line with ``replica="..."`` added to its labels."""
    m = _SAMPLE.match(line)
    if m is None:
        return line
    name, labels, rest = m.groups()
    label = f'replica="{_escape(replica)}"'
    inner = labels[1:-1] if labels else ""
    return f"{name}{{{label}{',' + inner if inner else ''}}}{rest}"


def merge(texts: Iterable[tuple[str, str]]) -> str:
    """Merge ``(replica url, its /metrics text)`` pairs into one exposition: each family's
    header once (the first replica's), then its samples from every replica."""
    families: dict[str, list[str]] = {}
    headers: dict[str, list[str]] = {}
    for replica, text in texts:
        family = None
        for line in text.splitlines():
            if line.startswith("# HELP ") or line.startswith("# TYPE "):
                family = line.split()[2]
                seen = headers.setdefault(family, [])
                if len(seen) < 2 and not any(h.split()[1] == line.split()[1] for h in seen):
                    seen.append(line)
                families.setdefault(family, [])
            elif line.strip() and not line.startswith("#"):
                families.setdefault(family or line.split("{")[0].split()[0], []).append(relabel(line, replica))
    out = []
    for family, samples in families.items():
        out.extend(headers.get(family, []))
        out.extend(samples)
    return "\n".join(out) + "\n" if out else ""


def router_metrics(replicas: list[dict]) -> str:
    """The router's own families, from `Replica.describe()` dicts."""
    rows = [("furca_router_replica_healthy", "gauge", "1 while the replica gets new requests", "healthy"),
            ("furca_router_replica_load", "gauge", "Requests the router has in flight at the replica", "load"),
            ("furca_router_requests_total", "counter", "Requests the router sent to the replica", "routed"),
            ("furca_router_failed_requests_total", "counter",
             "Requests that ended in a router error (the replica unreachable or down)", "failed"),
            ("furca_router_tree_chars", "gauge", "Characters of prompt text in the replica's prefix tree",
             "tree_chars")]
    out = []
    for name, kind, help_text, key in rows:
        out += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
        out += [f'{name}{{replica="{_escape(r["url"])}"}} {int(r[key])}' for r in replicas]
    return "\n".join(out) + "\n"
