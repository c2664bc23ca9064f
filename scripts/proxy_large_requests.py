"""Issue #41's large-request check, as a user would run it: a real `hermes-opd proxy` process in
front of a real dev vLLM, seven 3.9 MB chat requests (each in its own session), and meanwhile
`/health` every 20 ms and a small real chat request every 200 ms. Prints the longest stall of each
(for the small requests also the proxy's own time from its /metrics.json, apart from vLLM's), what
the large requests got, and the proxy's RSS before, during and after the sessions are deleted.

    .venv/bin/python scripts/proxy_large_requests.py --model-dir .cache/dev-model

Prints one JSON object. Everything it starts is stopped by PID."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

from hermes_opd.devkit.dev_server import DevServer
from hermes_opd.runtime.server_process import free_port, start_process_group, stop_process_group, wait_healthy


def rss_mib(pid: int) -> float:
    """Resident memory of a process and its children (the proxy runs as one process)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def measure(proxy: str, pid: int, count: int, size: int) -> dict:
    big_text = ("lorem ipsum dolor sit amet " * (size // 27 + 1))[:size]
    small = {"model": "dev-model", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}
    health_s: list[float] = []
    small_s: list[float] = []
    rss = {"before": rss_mib(pid), "during_max": 0.0}
    done = asyncio.Event()
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as http:

        async def probe_health() -> None:
            while not done.is_set():
                started = time.perf_counter()
                async with http.get(f"{proxy}/health") as response:
                    await response.read()
                health_s.append(time.perf_counter() - started)
                rss["during_max"] = max(rss["during_max"], rss_mib(pid))
                await asyncio.sleep(0.02)

        async def probe_small() -> None:
            while not done.is_set():
                started = time.perf_counter()
                async with http.post(f"{proxy}/v1/chat/completions", json=small,
                                     headers={"X-Hermes-Train": "false"}) as response:  # fmt: skip
                    await response.read()
                    assert response.status == 200, response.status
                small_s.append(time.perf_counter() - started)
                await asyncio.sleep(0.2)

        async def big(index: int) -> int:
            body = {
                "model": "dev-model",
                "max_tokens": 4,
                "messages": [{"role": "user", "content": big_text}],
            }
            async with http.post(f"{proxy}/v1/chat/completions", json=body,
                                 headers={"X-Session-Id": f"big-{index}"}) as response:  # fmt: skip
                await response.read()
                return response.status

        probes = [asyncio.create_task(probe_health()), asyncio.create_task(probe_small())]
        await asyncio.sleep(1.0)
        started = time.perf_counter()
        statuses = await asyncio.gather(*(big(i) for i in range(count)))
        took = time.perf_counter() - started
        await asyncio.sleep(1.0)
        done.set()
        await asyncio.gather(*probes)
        await asyncio.sleep(2.0)
        rss["after_requests"] = rss_mib(pid)
        deleted = []
        for index in range(count):
            async with http.delete(f"{proxy}/v1/sessions/big-{index}") as response:
                deleted.append(response.status)
        await asyncio.sleep(3.0)  # the proxy returns freed memory every 2 s at most
        rss["after_delete"] = rss_mib(pid)
        async with http.get(f"{proxy}/metrics.json") as response:
            latency = (await response.json())["latency"]  # only the small requests were answered
    return {
        "large_requests": count,
        "large_body_bytes": len(json.dumps({"content": big_text})),
        "large_statuses": statuses,
        "large_took_s": round(took, 2),
        "delete_statuses": deleted,
        "health_probes": len(health_s),
        "health_max_s": round(max(health_s), 3),
        "health_p99_s": round(sorted(health_s)[int(0.99 * (len(health_s) - 1))], 3),
        "small_requests": len(small_s),
        "small_max_s": round(max(small_s), 3),
        "small_p50_s": round(sorted(small_s)[len(small_s) // 2], 3),
        "small_proxy_own_ms": {k: latency[k] for k in ("own_ms_p50", "own_ms_p95", "own_ms_max")},
        "small_vllm_ms": {k: latency[k] for k in ("upstream_ms_p50", "upstream_ms_p95")},
        "rss_mib": {k: round(v, 1) for k, v in rss.items()},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-dir", default=".cache/dev-model")
    parser.add_argument("--count", type=int, default=7)
    parser.add_argument("--bytes", type=int, default=3_900_000)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="proxy-large-"))
    server = DevServer(args.model_dir, log_path=str(work / "vllm.log"))
    server.start()
    port = free_port()
    log = work / "proxy.log"
    argv = [sys.executable, "-m", "hermes_opd.commands.main", "proxy", "--policy-url", server.base_url,
            "--policy-model", server.model_name, "--tokenizer", args.model_dir, "--port", str(port),
            "--groups", str(work / "groups.jsonl"), "--judge", "rules"]  # fmt: skip
    process = start_process_group(argv, log)
    try:
        wait_healthy(
            process, f"http://127.0.0.1:{port}/health", what="the proxy", timeout_s=300, log_path=log
        )
        result = asyncio.run(measure(f"http://127.0.0.1:{port}", process.pid, args.count, args.bytes))
        print(json.dumps(result))
    finally:
        stop_process_group(process)
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
