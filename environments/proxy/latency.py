"""The proxy's own time per request, apart from the policy's (pure logic).

For each answered request the handler's wall time and its vLLM call's are kept for the last
`size` requests; `/metrics` reports the percentiles of both and of their difference, the proxy's
own time (parsing, rendering, relaying, tool-call parsing; not the response's write, which aiohttp
does after the handler returns)."""

from __future__ import annotations

from collections import deque


def percentile(values: list[float], q: float) -> float:
    """The nearest-rank q-quantile of `values` (0 <= q <= 1), 0.0 for none."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


class LatencyWindow:
    """The last `size` requests' (handler seconds, upstream seconds)."""

    def __init__(self, size: int = 4096) -> None:
        self._pairs: deque[tuple[float, float]] = deque(maxlen=size)

    def add(self, handler_s: float, upstream_s: float) -> None:
        self._pairs.append((handler_s, upstream_s))

    def summary(self) -> dict[str, float | int]:
        own = [max(0.0, h - u) for h, u in self._pairs]
        upstream = [u for _, u in self._pairs]
        return {
            "requests": len(self._pairs),
            "own_ms_p50": round(1e3 * percentile(own, 0.5), 3),
            "own_ms_p95": round(1e3 * percentile(own, 0.95), 3),
            "upstream_ms_p50": round(1e3 * percentile(upstream, 0.5), 3),
            "upstream_ms_p95": round(1e3 * percentile(upstream, 0.95), 3),
        }
