"""Our client's CPU per turn, before and after the teacher-cost work, measured in the same run.

Part of `hermes-opd bench pipeline` (remote-like back-end): against the same fake endpoints and the
same teacher inputs, the process CPU time (`time.process_time`, all threads) of
- judge: one turn's m votes through the `openai` SDK (what the judge used before) and through the
  lean aiohttp client (`hermes_opd/vllm_api/chat_client.py`, what it uses now); all turns at once, CPU / turns;
- parse: one teacher body into rank-ordered rows, every row vs only the turn's (`from_pos`);
- rows: the turn's rows into contract rows, `normalize_row` per position (before) vs
  `normalize_turn_rows` (after); both are checked to give identical rows.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp

from judge.config import JudgeConfig
from judge.llm_backend import LLMJudgeBackend
from scoring.request_paths import completions_payload
from scoring.response_parsing import parse_prompt_topk_json
from scoring.teacher_rows import normalize_row, normalize_turn_rows


async def _judge_cpu_ms(judge: LLMJudgeBackend, pairs: list[Any]) -> float:
    await judge.collect_votes(pairs[0])  # connections, first-call costs
    cpu = time.process_time()
    await asyncio.gather(*(judge.collect_votes(p) for p in pairs))
    spent = time.process_time() - cpu
    await judge.aclose()
    return spent / len(pairs) * 1000


def _cpu_ms(fn, repeat: int) -> tuple[float, Any]:
    cpu = time.process_time()
    for _ in range(repeat):
        value = fn()
    return (time.process_time() - cpu) / repeat * 1000, value


async def client_cpu_per_turn(
    base_url: str, judge_config: JudgeConfig, pairs: list[Any], requests: list[Any], k: int
) -> dict[str, Any]:
    import openai

    sdk = openai.AsyncOpenAI(
        base_url=base_url, api_key="EMPTY", timeout=judge_config.timeout_s, max_retries=0
    )
    judge_sdk = await _judge_cpu_ms(
        LLMJudgeBackend(judge_config, base_url=base_url, model="fake-judge", client=sdk), pairs
    )
    judge_lean = await _judge_cpu_ms(
        LLMJudgeBackend(judge_config, base_url=base_url, model="fake-judge"), pairs
    )
    bodies = []
    async with aiohttp.ClientSession() as session:
        for r in requests:
            async with session.post(
                f"{base_url}/completions", json=completions_payload("fake-teacher", r.ids, k)
            ) as resp:
                bodies.append(await resp.read())
    parse_all = parse_turn = rows_before = rows_after = 0.0
    identical = True
    for r, raw in zip(requests, bodies, strict=True):
        p = r.prompt_len
        students = r.ids[p:]
        ms, _ = _cpu_ms(lambda raw=raw, r=r: parse_prompt_topk_json(raw, r.ids, k), 1)
        parse_all += ms
        ms, topk = _cpu_ms(lambda raw=raw, r=r, p=p: parse_prompt_topk_json(raw, r.ids, k, from_pos=p), 3)
        parse_turn += ms
        cand_ids, cand_lps = topk.token_ids[p:], topk.logprobs[p:]

        def per_row(cand_ids=cand_ids, cand_lps=cand_lps, students=students):
            out = [
                normalize_row(i, lp, s, None, k)
                for i, lp, s in zip(cand_ids, cand_lps, students, strict=True)
            ]
            return [o[0] for o in out], [o[1] for o in out]

        ms, before = _cpu_ms(per_row, 3)
        rows_before += ms
        ms, after = _cpu_ms(lambda c=cand_ids, lp=cand_lps, s=students: normalize_turn_rows(c, lp, s, k), 3)
        rows_after += ms
        identical &= before[0] == after[0] and before[1] == after[1]
    n = len(requests)
    return {
        "turns": n,
        "judge_votes_openai_sdk_ms": judge_sdk,
        "judge_votes_lean_client_ms": judge_lean,
        "parse_every_row_ms": parse_all / n,
        "parse_turn_rows_ms": parse_turn / n,
        "rows_normalize_row_ms": rows_before / n,
        "rows_vectorized_ms": rows_after / n,
        "rows_identical": identical,
        "before_ms": judge_sdk + parse_turn / n + rows_before / n,
        "after_ms": judge_lean + parse_turn / n + rows_after / n,
    }
