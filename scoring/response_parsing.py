"""Pure parsing of vLLM prompt-logprob response bodies into rank-ordered rows (no I/O).

vLLM 0.32 prompt logprobs are a list as long as the prompt: entry 0 is null, every other entry maps a
token id (as a string) to `{"logprob", "rank", "decoded_token"}`. It holds the top-K plus the actual
prompt token when that token ranks below K (K or K+1 keys), the actual token first. Two routes carry
them:
- `/v1/completions` (route `"completions"`): at `choices[0].prompt_logprobs`;
- `/inference/v1/generate` (route `"generate"`, `--enable-scale-out`): at the top level
  `prompt_logprobs`, with `decoded_token: null` when `sampling_params.detokenize` is false. Rows are
  keyed and parsed by token id only, so the missing strings change nothing.
"""

from __future__ import annotations

import contextlib
import json
import re
from bisect import bisect_right
from dataclasses import dataclass
from typing import Any

from hermes_opd.vllm_api.errors import UnexpectedResponseError
from hermes_opd.vllm_api.wire_format import _snippet

ROUTES = ("completions", "generate")


@dataclass(frozen=True)
class PromptTopK:
    """Top-K prompt logprobs per position, rank order, plus the actual token when it ranked below K.

    `token_ids[pos]` / `logprobs[pos]` describe the distribution over the token AT `pos` given
    everything before it; position 0 has no entry (empty lists)."""

    prompt_ids: list[int]
    token_ids: list[list[int]]
    logprobs: list[list[float]]


def _entries_of(body: Any, route: str) -> Any:
    if route not in ROUTES:
        raise ValueError(f"unknown route {route!r}; expected one of {ROUTES}")
    if route == "generate":
        try:
            return body["prompt_logprobs"]
        except (KeyError, TypeError) as exc:
            raise UnexpectedResponseError(f"response has no prompt_logprobs: {_snippet(body)}") from exc
    return body["choices"][0]["prompt_logprobs"]


def parse_prompt_topk(
    body: dict[str, Any], prompt_ids: list[int], k: int, *, from_pos: int = 0, route: str = "completions"
) -> PromptTopK:
    """Normalise `prompt_logprobs` into rank-ordered rows; validate length and values.

    `from_pos`: rows before it are left empty and are not inspected (only the number of rows is
    checked). The teacher needs only the turn's own positions, which come last, so passing the turn's
    first position skips most of the work. 0 (the default) parses and checks every position."""
    try:
        entries = _entries_of(body, route)
    except (KeyError, IndexError, TypeError) as exc:
        raise UnexpectedResponseError(
            f"response has no choices[0].prompt_logprobs: {_snippet(body)}"
        ) from exc
    if not isinstance(entries, list):
        if entries is None and route == "generate":
            raise UnexpectedResponseError("the generate route answered without prompt_logprobs")
        raise UnexpectedResponseError(f"prompt_logprobs is {type(entries).__name__}, expected a list")
    if len(entries) != len(prompt_ids):
        raise UnexpectedResponseError(
            f"prompt_logprobs has {len(entries)} positions for a prompt of {len(prompt_ids)} tokens"
        )
    skip = max(0, min(from_pos, len(entries)))
    ids_rows: list[list[int]] = [[] for _ in range(skip)]
    lp_rows: list[list[float]] = [[] for _ in range(skip)]
    for pos in range(skip, len(entries)):
        entry = entries[pos]
        if entry is None:
            if pos != 0:
                raise UnexpectedResponseError(f"prompt_logprobs entry {pos} is null; only entry 0 may be")
            ids_rows.append([])
            lp_rows.append([])
            continue
        if not isinstance(entry, dict):
            raise UnexpectedResponseError(
                f"prompt_logprobs entry {pos} is {type(entry).__name__}, expected an object"
            )
        try:
            toks = [int(tok) for tok in entry]
            values = list(entry.values())
            lps = [float(v["logprob"]) for v in values]
            ranks = [int(v.get("rank") or 10**9) for v in values]
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise UnexpectedResponseError(
                f"prompt_logprobs entry {pos} is malformed: {_snippet(entry)}"
            ) from exc
        row_ids, row_lps = _rank_row(pos, toks, lps, ranks, prompt_ids[pos], k)
        ids_rows.append(row_ids)
        lp_rows.append(row_lps)
    return PromptTopK(prompt_ids=list(prompt_ids), token_ids=ids_rows, logprobs=lp_rows)


def _rank_row(
    pos: int, toks: list[int], lps: list[float], ranks: list[int], actual: int, k: int
) -> tuple[list[int], list[float]]:
    """One position's candidates (in the server's order) -> (ids, logprobs) in rank order: the entries
    ranked <= k (at most k), then the actual token when it is not among them. Ties in rank go to the
    higher logprob, then to the server's order."""
    total = sum(lps)
    if not max(lps) <= 1e-4 or total != total:  # a positive value, or a NaN somewhere
        tok, lp = next((t, x) for t, x in zip(toks, lps, strict=True) if not x <= 1e-4)
        raise UnexpectedResponseError(f"prompt_logprobs entry {pos} token {tok} has invalid logprob {lp}")
    n = len(toks)
    by_rank = sorted(ranks)
    if len(set(ranks)) == n and by_rank == ranks:
        pass  # already in rank order
    elif len(set(ranks)) == n and ranks[0] == by_rank[-1] and ranks[1:] == by_rank[:-1]:
        # vLLM's order: the actual token first, ranked below all the others
        toks, lps, ranks = toks[1:] + toks[:1], lps[1:] + lps[:1], by_rank
    else:
        order = sorted(range(n), key=lambda i: (ranks[i], -lps[i]))
        toks, lps, ranks = [toks[i] for i in order], [lps[i] for i in order], [ranks[i] for i in order]
    m = min(bisect_right(ranks, k), k)
    if m < min(k, n) and n >= k:
        raise UnexpectedResponseError(f"prompt_logprobs entry {pos} has fewer than k={k} ranked entries")
    row_ids = toks[:m]
    row_lps = lps[:m]
    if actual not in row_ids:
        try:
            at = toks.index(actual)
        except ValueError:
            raise UnexpectedResponseError(
                f"prompt_logprobs entry {pos} lacks the actual token {actual}"
            ) from None
        row_ids.append(actual)
        row_lps.append(lps[at])
    return row_ids, row_lps


# -- fast path: the raw response body ---------------------------------------------------------------
try:  # msgspec ships with vLLM; without it the stdlib path below is used, with identical results
    import msgspec

    class _Entry(msgspec.Struct, gc=False):
        logprob: float
        rank: int | None = None

    class _Choice(msgspec.Struct):
        prompt_logprobs: list[msgspec.Raw]

    class _Body(msgspec.Struct):
        choices: list[_Choice]

    class _FullChoice(msgspec.Struct):
        prompt_logprobs: list[dict[int, _Entry] | None]

    class _FullBody(msgspec.Struct):
        choices: list[_FullChoice]

    class _GenerateBody(msgspec.Struct):
        prompt_logprobs: list[msgspec.Raw]

    class _FullGenerateBody(msgspec.Struct):
        prompt_logprobs: list[dict[int, _Entry] | None]

    _BODY_DECODER: Any = msgspec.json.Decoder(_Body)
    _FULL_BODY_DECODER: Any = msgspec.json.Decoder(_FullBody)
    _ENTRY_DECODER: Any = msgspec.json.Decoder(dict[int, _Entry])
    _TAIL_DECODER: Any = msgspec.json.Decoder(list[dict[int, _Entry]])
    _DECODERS: Any = {
        ("completions", False): _BODY_DECODER,
        ("completions", True): _FULL_BODY_DECODER,
        ("generate", False): msgspec.json.Decoder(_GenerateBody),
        ("generate", True): msgspec.json.Decoder(_FullGenerateBody),
    }
except ImportError:  # pragma: no cover - exercised only where msgspec is missing
    msgspec = None  # type: ignore[assignment]


class _SlowPath(Exception):
    """The fast decoder met something unusual; the stdlib path decides (and words any error)."""


def _decoded_entries(raw: bytes, route: str, full: bool, n: int) -> list[Any]:
    try:
        body = _DECODERS[(route, full)].decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise _SlowPath from exc
    if route == "generate":
        entries = body.prompt_logprobs
    elif not body.choices:
        raise _SlowPath
    else:
        entries = body.choices[0].prompt_logprobs
    if len(entries) != n:
        raise _SlowPath
    return entries


_ARRAY_KEY = b'"prompt_logprobs":['
_ENTRY_BOUNDARY = b'}},{"'
_PROMPT_TOKENS = re.compile(rb'"prompt_tokens":(\d+)')
_DIGIT_OR_MINUS = frozenset(b"-0123456789")


def _tail_prompt_topk(raw: bytes, prompt_ids: list[int], k: int, from_pos: int, route: str) -> PromptTopK:
    """The turn's rows without scanning the rest of the body: its entries are the array's last
    `len(prompt_ids) - from_pos`, found from the end of vLLM's compact JSON. Anything unexpected raises
    `_SlowPath` (the whole-body decoders then decide), so the result is exactly theirs.

    Why the byte patterns are safe: a JSON string cannot hold an unescaped `"`, so `"prompt_logprobs":[`
    is the key itself, and `}},{"` followed by a digit or `-` opens a key (a closing quote is followed
    by `,`, `:`, `}` or `]`, never a digit): the start of an entry, whose first key is a token id.
    The entry count is `usage.prompt_tokens`, which must equal the prompt's length, and every decoded
    entry must hold its position's actual token (checked by `_rank_row`)."""
    n = len(prompt_ids)
    wanted = n - from_pos
    if from_pos < 2 or wanted < 1:  # entry 1 follows the null of entry 0, not another entry
        raise _SlowPath
    start = raw.find(_ARRAY_KEY)
    if start < 0:
        raise _SlowPath
    start += len(_ARRAY_KEY)
    end = raw.rfind(b"}}]")
    if end < start or raw[end + 3 : end + 4] not in (b",", b"}"):
        raise _SlowPath
    end += 2  # the array's closing bracket
    usage = (
        _PROMPT_TOKENS.search(raw, end) if route == "completions" else _PROMPT_TOKENS.search(raw, 0, start)
    )
    if usage is None or int(usage.group(1)) != n:
        raise _SlowPath
    first = end  # walks back one entry per step, to the start of entry `from_pos`
    for _ in range(wanted):
        at = raw.rfind(_ENTRY_BOUNDARY, start, first)
        while at >= 0 and raw[at + 5] not in _DIGIT_OR_MINUS:
            at = raw.rfind(_ENTRY_BOUNDARY, start, at + 4)
        if at < 0:
            raise _SlowPath
        first = at + 3
    try:
        entries = _TAIL_DECODER.decode(b"[" + raw[first:end] + b"]")
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise _SlowPath from exc
    if len(entries) != wanted:
        raise _SlowPath
    ids_rows: list[list[int]] = [[] for _ in range(from_pos)]
    lp_rows: list[list[float]] = [[] for _ in range(from_pos)]
    for pos, entry in enumerate(entries, start=from_pos):
        toks = list(entry)
        if prompt_ids[pos] not in entry:
            raise _SlowPath  # misaligned (or a malformed row): the full path words the error
        values = list(entry.values())
        try:
            row_ids, row_lps = _rank_row(
                pos, toks, [v.logprob for v in values], [v.rank or 10**9 for v in values], prompt_ids[pos], k
            )
        except UnexpectedResponseError as exc:
            raise _SlowPath from exc
        ids_rows.append(row_ids)
        lp_rows.append(row_lps)
    return PromptTopK(prompt_ids=list(prompt_ids), token_ids=ids_rows, logprobs=lp_rows)


def _fast_prompt_topk(raw: bytes, prompt_ids: list[int], k: int, from_pos: int, route: str) -> PromptTopK:
    if from_pos <= 1:
        return _fast_full_prompt_topk(raw, prompt_ids, k, route)
    with contextlib.suppress(_SlowPath):
        return _tail_prompt_topk(raw, prompt_ids, k, from_pos, route)
    entries = _decoded_entries(raw, route, False, len(prompt_ids))
    skip = min(from_pos, len(entries))  # rows the caller does not need: not even looked at
    ids_rows: list[list[int]] = [[] for _ in range(skip)]
    lp_rows: list[list[float]] = [[] for _ in range(skip)]
    for pos in range(skip, len(entries)):
        entry = entries[pos]
        if bytes(memoryview(entry)[:1]) != b"{":  # null (fine at 0 only) or not an object
            if pos == 0 and bytes(entry) == b"null":
                ids_rows.append([])
                lp_rows.append([])
                continue
            raise _SlowPath
        try:
            decoded = _ENTRY_DECODER.decode(entry)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise _SlowPath from exc
        toks = list(decoded)
        values = list(decoded.values())
        lps = [v.logprob for v in values]
        ranks = [v.rank or 10**9 for v in values]
        row_ids, row_lps = _rank_row(pos, toks, lps, ranks, prompt_ids[pos], k)
        ids_rows.append(row_ids)
        lp_rows.append(row_lps)
    return PromptTopK(prompt_ids=list(prompt_ids), token_ids=ids_rows, logprobs=lp_rows)


def _fast_full_prompt_topk(raw: bytes, prompt_ids: list[int], k: int, route: str) -> PromptTopK:
    """Every row: one typed decode of the whole body (no per-row decoder calls)."""
    entries = _decoded_entries(raw, route, True, len(prompt_ids))
    ids_rows: list[list[int]] = []
    lp_rows: list[list[float]] = []
    for pos, entry in enumerate(entries):
        if entry is None:
            if pos != 0:
                raise _SlowPath
            ids_rows.append([])
            lp_rows.append([])
            continue
        toks = list(entry)  # keys decoded as ints by msgspec
        values = list(entry.values())
        row_ids, row_lps = _rank_row(
            pos, toks, [v.logprob for v in values], [v.rank or 10**9 for v in values], prompt_ids[pos], k
        )
        ids_rows.append(row_ids)
        lp_rows.append(row_lps)
    return PromptTopK(prompt_ids=list(prompt_ids), token_ids=ids_rows, logprobs=lp_rows)


def parse_turn_rows_from_tail(
    raw: bytes, prompt_ids: list[int], k: int, *, from_pos: int, route: str = "completions"
) -> PromptTopK | None:
    """The rows from `from_pos` on read from the end of the body (`_tail_prompt_topk`: about a
    millisecond for megabytes, cheap enough for the event loop), or None when only a whole-body
    decode can say (then `parse_prompt_topk_json`, which gives the same rows, or words the error)."""
    if msgspec is None:
        return None
    try:
        return _tail_prompt_topk(raw, prompt_ids, k, from_pos, route)
    except _SlowPath:
        return None


def parse_prompt_topk_json(
    raw: bytes | str, prompt_ids: list[int], k: int, *, from_pos: int = 0, route: str = "completions"
) -> PromptTopK:
    """`parse_prompt_topk` straight from the response body: same result, same errors, faster.

    With msgspec, the body is scanned once without building Python objects for the rows, and only
    the rows from `from_pos` on are decoded. Anything unusual (or no msgspec) goes through
    `json.loads` + `parse_prompt_topk`, so results and error messages are those of the plain path.
    `route`: which body it is, `"completions"` or `"generate"` (see the module docstring).
    Raises `UnexpectedResponseError`, or `json.JSONDecodeError`/`UnicodeDecodeError` for a body that
    is not JSON (the client words that one itself)."""
    if isinstance(raw, str):
        raw = raw.encode()
    if msgspec is not None:
        try:
            return _fast_prompt_topk(raw, prompt_ids, k, from_pos, route)
        except _SlowPath:
            pass
    return parse_prompt_topk(json.loads(raw), prompt_ids, k, from_pos=from_pos, route=route)
