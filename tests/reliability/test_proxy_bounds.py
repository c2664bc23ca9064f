"""The proxy's bounds against hostile requests (issue #41 items 1, 6, 8), on a real proxy whose
policy server is never reached (every request here is refused before it): a few 3.9 MB bodies
rendered and refused while `/health` keeps answering in under 100 ms, megabytes of tool schemas
that never hold up a small request, JSON nested 100,000 deep,
a lone surrogate, a body trickled a byte at a time, more large bodies at once than the proxy
holds, and unknown routes: each one clear 4xx or 503 in the wire's error shape, never a 500."""

from __future__ import annotations

import asyncio
import contextlib
import json
import statistics
import time

import aiohttp
import pytest

from tests.support.proxy_factory import proxy_config, running_proxy
from tests.support.waiting import wait_for

pytestmark = pytest.mark.reliability


class NoServer:
    base_url = "http://127.0.0.1:9/v1"  # nothing listens: a request that reached it would be a 502
    model_name = "dev-model"

    def __init__(self, model_dir) -> None:
        self.model_dir = model_dir


def body(text: str) -> bytes:
    return json.dumps({"model": "dev-model", "messages": [{"role": "user", "content": text}]}).encode()


async def post(http, url, data: bytes, **kwargs):
    async with http.post(
        f"{url}/chat/completions", data=data, headers={"Content-Type": "application/json"}, **kwargs
    ) as response:
        return response.status, await response.json()


async def test_health_answers_fast_while_large_bodies_are_rendered_and_refused(
    dev_model_dir, dev_tokenizer, tmp_path
):
    words = ("lorem ipsum dolor sit amet " * 160_000)[:3_900_000]  # 3.9 MB of ordinary text
    near = words[:100_000]
    bound = len(dev_tokenizer.encode(near, add_special_tokens=False)) + 2  # the template adds more than 2
    config = proxy_config(NoServer(dev_model_dir), tmp_path, train=False, max_prompt_tokens=bound)
    async with running_proxy(config, dev_tokenizer) as (url, _server), aiohttp.ClientSession() as http:
        health: list[float] = []
        done = asyncio.Event()

        async def watch() -> None:  # through the whole burst, and at least 20 probes
            while not done.is_set() or len(health) < 20:
                started = time.perf_counter()
                async with http.get(url[: -len("/v1")] + "/health") as response:
                    assert response.status == 200
                health.append(time.perf_counter() - started)
                await asyncio.sleep(0.01)

        bodies = [body(words), body(words), body(words[:500_000]), body(words[:500_000])]  # built first
        watcher = asyncio.create_task(watch())
        # refused on their characters before anything is tokenized, and on their tokens counted
        # (by the Rust tokenizer, which lets the event loop run) before the template renders them
        answers = await asyncio.gather(*(post(http, url, data) for data in bodies))
        done.set()
        await watcher
        # under 100 ms, but for the rare probe a machine shared by other jobs descheduled (seen: one
        # probe in hundreds at 0.1-0.5 s); a stall in the proxy would hold every probe in flight
        assert len(health) >= 20 and statistics.quantiles(health, n=100)[98] < 0.100, sorted(health)[-5:]
        assert max(health) < 0.5, sorted(health)[-5:]
        # within both counts, over the bound once the template has rendered it (the template and
        # the record's tokenization hold the interpreter for this one: no /health claim here)
        answers.append(await post(http, url, body(near)))
    for status, error in answers:
        assert status == 413 and error["error"]["code"] == "context_length_exceeded", error
    assert [e["error"]["message"].split(" ")[1] for _, e in answers] == ["request's"] * 4 + ["rendered"]


async def test_large_tool_schemas_never_hold_up_a_small_request(dev_model_dir, dev_tokenizer, tmp_path):
    """Tool schemas are in the body, not in the messages' text: requests with megabytes of them are
    rendered in the large-request threads, so a small request sent while they render is planned
    at once (it reaches the absent policy server, a 502, before any of them is refused)."""
    tools = [
        {
            "type": "function",
            "function": {"name": f"t{i}", "description": "d" * 40, "parameters": {"type": "object"}},
        }
        for i in range(20_000)
    ]
    big = json.dumps(
        {"model": "dev-model", "messages": [{"role": "user", "content": "hi"}], "tools": tools}
    ).encode()
    config = proxy_config(NoServer(dev_model_dir), tmp_path, train=False, max_prompt_tokens=4096)
    finished: list[tuple[str, int]] = []
    async with running_proxy(config, dev_tokenizer) as (url, server), aiohttp.ClientSession() as http:

        async def send(label: str, data: bytes) -> None:
            status, _ = await post(http, url, data)
            finished.append((label, status))

        bigs = [asyncio.create_task(send("big", big)) for _ in range(4)]
        await wait_for(lambda: server.service._planning >= 4, 60, "the large requests never reached planning")
        await send("small", body("hi"))
        await asyncio.gather(*bigs)
    assert finished[0] == ("small", 502), finished  # planned at once, then the absent server
    assert [status for label, status in finished if label == "big"] == [413] * 4


async def test_a_long_history_is_parsed_and_digested_off_the_event_loop(
    dev_model_dir, dev_tokenizer, tmp_path, monkeypatch
):
    """Thousands of short messages: every step that walks them (the wire's parse, the digests the
    session lookup compares, the render) runs in a worker thread, so /health never waits on them."""
    import threading

    from environments.proxy import turn_service
    from environments.proxy.chat_completions import routes

    threads: dict[str, str] = {}

    def watched(name, function):
        def wrapper(*args, **kwargs):
            threads[name] = threading.current_thread().name
            return function(*args, **kwargs)

        return wrapper

    monkeypatch.setattr(routes, "parse_request", watched("parse", routes.parse_request))
    monkeypatch.setattr(turn_service, "history_keys", watched("digests", turn_service.history_keys))
    messages = [{"role": ("user", "assistant")[i % 2], "content": f"m{i}"} for i in range(2000)]
    data = json.dumps(
        {"model": "dev-model", "messages": [*messages, {"role": "user", "content": "go"}]}
    ).encode()
    assert len(data) > 64 * 1024  # a large body
    no_teacher = {
        "enabled": False,
        "prm": {"enabled": True, "judge": {"backend": "rules"}},
    }  # a training path
    config = proxy_config(NoServer(dev_model_dir), tmp_path, opd=no_teacher)
    async with running_proxy(config, dev_tokenizer) as (url, _server), aiohttp.ClientSession() as http:
        status, _ = await post(http, url, data)
    assert status == 502  # planned and recorded, then the absent policy server
    assert set(threads) == {"parse", "digests"}, threads
    assert threading.main_thread().name not in threads.values(), threads


async def test_deep_json_and_a_lone_surrogate_are_400(dev_model_dir, dev_tokenizer, tmp_path):
    config = proxy_config(NoServer(dev_model_dir), tmp_path, train=False)
    deep = b'{"model": "dev-model", "messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    surrogate = b'{"model": "dev-model", "messages": [{"role": "user", "content": "a\\ud800b"}]}'
    async with running_proxy(config, dev_tokenizer) as (url, _server), aiohttp.ClientSession() as http:
        status, error = await post(http, url, deep)
        assert status == 400 and "nested more than 64" in error["error"]["message"]
        status, error = await post(http, url, surrogate)
        assert status == 400 and "surrogate" in error["error"]["message"]
        paired = '{"model": "dev-model", "messages": [{"role": "user", "content": "\\ud83c\\udf89"}], "n": 2}'
        status, error = await post(http, url, paired.encode())  # a proper pair passes the check
        assert (status, error["error"]["param"]) == (400, "n")


async def trickle(port: int, declared: int, every_s: float, stop: asyncio.Event) -> bytes:
    """POST with a body declared `declared` bytes long, sent one byte per `every_s`; the raw reply."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {declared}\r\n\r\n".encode()
    )
    try:
        while not stop.is_set() and not reader.at_eof():
            writer.write(b" ")
            await writer.drain()
            try:
                return await asyncio.wait_for(reader.read(4096), every_s)
            except TimeoutError:
                continue
        return b""
    except ConnectionError:
        return b""
    finally:
        writer.close()


async def test_a_body_sent_a_byte_at_a_time_is_cut_off(dev_model_dir, dev_tokenizer, tmp_path):
    config = proxy_config(NoServer(dev_model_dir), tmp_path, train=False, body_read_timeout_s=1.0)
    async with running_proxy(config, dev_tokenizer) as (url, _server):
        port = int(url.split(":")[2].split("/")[0])
        started = time.perf_counter()
        reply = await asyncio.wait_for(trickle(port, 10_000, 0.2, asyncio.Event()), 10)
        assert time.perf_counter() - started < 3
    assert reply.startswith(b"HTTP/1.1 408") and b"did not arrive within 1 s" in reply


async def test_more_large_bodies_at_once_than_the_proxy_holds_are_told_to_retry(
    dev_model_dir, dev_tokenizer, tmp_path
):
    config = proxy_config(
        NoServer(dev_model_dir), tmp_path, train=False, max_bytes_in_flight=300_000, body_read_timeout_s=20.0
    )
    async with running_proxy(config, dev_tokenizer) as (url, _server), aiohttp.ClientSession() as http:
        port = int(url.split(":")[2].split("/")[0])
        stop = asyncio.Event()
        slow = asyncio.create_task(trickle(port, 200_000, 0.1, stop))  # holds 200 KB of the budget
        await asyncio.sleep(0.3)
        status, error = await post(http, url, body("x" * 150_000))
        assert status == 503 and error["error"]["type"] == "server_error", error
        stop.set()
        await slow
        status, _ = await post(http, url, b"{not json")  # the budget is back
        assert status == 400


async def test_unknown_routes_and_methods_answer_in_their_wires_shape(dev_model_dir, dev_tokenizer, tmp_path):
    config = proxy_config(NoServer(dev_model_dir), tmp_path, train=False)
    async with running_proxy(config, dev_tokenizer) as (url, _server), aiohttp.ClientSession() as http:
        root = url[: -len("/v1")]
        async with http.get(f"{url}/chat/completions") as response:
            assert (
                response.status == 405 and (await response.json())["error"]["type"] == "invalid_request_error"
            )
        async with http.get(f"{url}/nope") as response:
            assert response.status == 404 and (await response.json())["error"]["code"] == "unknown_url"
        async with http.post(f"{root}/v1/messages/nope", json={}) as response:
            answer = await response.json()
            assert (
                response.status == 404
                and answer["type"] == "error"
                and answer["error"]["type"] == "not_found_error"
            )
        async with http.delete(f"{url}/sessions/none") as response:
            assert response.status == 404 and (await response.json())["error"]["code"] == "session_not_found"


async def test_headers_sent_a_byte_at_a_time_are_cut_off(dev_model_dir, dev_tokenizer, tmp_path):
    config = proxy_config(NoServer(dev_model_dir), tmp_path, train=False, header_read_timeout_s=1.0)
    async with running_proxy(config, dev_tokenizer) as (url, _server):
        port = int(url.split(":")[2].split("/")[0])
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        started = time.perf_counter()
        writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
        try:
            while not reader.at_eof() and time.perf_counter() - started < 10:
                writer.write(b"X")  # one more byte of a header line that never ends
                await writer.drain()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(reader.read(4096), 0.2)
        except ConnectionError:
            pass
        finally:
            writer.close()
        assert time.perf_counter() - started < 3
