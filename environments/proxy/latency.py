"""The proxy's own time per request, apart from the policy's, and its time to first token (pure
logic).

For each answered request the handler's wall time, the time spent waiting on vLLM's stream and
the time until the first answer text was ready are kept for the last `size` requests; `/metrics`
reports the percentiles of each and of the proxy's own time (wall minus vLLM: parsing, rendering,
relaying, tool-call parsing; not the writes to the client, which run while vLLM samples)."""

from __future__ import annotations

from collections import deque


def percentile(values: list[float], q: float) -> float:
    """The nearest-rank q-quantile of `values` (0 <= q <= 1), 0.0 for none."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


class LatencyWindow:
    """The last `size` requests' (handler seconds, upstream seconds, first-text seconds or None)."""

    def __init__(self, size: int = 4096) -> None:
        self._rows: deque[tuple[float, float, float | None]] = deque(maxlen=size)

    def add(self, handler_s: float, upstream_s: float, first_text_s: float | None = None) -> None:
        self._rows.append((handler_s, upstream_s, first_text_s))

    def summary(self) -> dict[str, float | int]:
        own = [max(0.0, h - u) for h, u, _ in self._rows]
        upstream = [u for _, u, _ in self._rows]
        first = [f for _, _, f in self._rows if f is not None]
        return {
            "requests": len(self._rows),
            "own_ms_p50": round(1e3 * percentile(own, 0.5), 3),
            "own_ms_p95": round(1e3 * percentile(own, 0.95), 3),
            "own_ms_max": round(1e3 * max(own, default=0.0), 3),
            "upstream_ms_p50": round(1e3 * percentile(upstream, 0.5), 3),
            "upstream_ms_p95": round(1e3 * percentile(upstream, 0.95), 3),
            "first_text_ms_p50": round(1e3 * percentile(first, 0.5), 3),
            "first_text_ms_p95": round(1e3 * percentile(first, 0.95), 3),
        }
