"""Build a rollout's exact token record turn by turn (pure logic over a tokenizer).

The policy's generated ids are appended as they came from the server, never re-tokenized. Only the
template glue between turns (the end of the assistant turn, tool results, user messages, the next
generation prompt) is tokenized, as the text the chat template adds after the previous turn. That
makes every turn's context an exact prefix of the next, by construction.

Where the template rewrites earlier turns once messages follow (a Qwen3-style template drops past
reasoning when a new user message arrives), the stream cannot be extended:
- after a `user` message, the recorder ends the current sequence (the user message is its last
  turn's next state, in messages only) and starts a new sequence from the re-rendered context, in
  which the earlier turns are masked context; `trajectories()` returns every sequence;
- after `tool` messages, it raises `TemplateNotAppendOnlyError` (such a template cannot record a tool
  loop exactly).

Hint anchors (where a message's content ends) are found inside that message's own rendered region,
by rendering the message once more with sentinels around its content, never by searching the
whole text (a task text can also occur in the tool schemas or in another message). Only the
messages a hint can anchor on get one (each batch's last user message and its last message), so a
long history costs a few renders, not one per message.
"""

from __future__ import annotations

import copy
import hashlib
import json
import threading
import weakref
from typing import Any

from hermes_opd.contract.constants import MASKED
from hermes_opd.contract.errors import HermesOPDError
from hermes_opd.record.student_topk_rows import TopRow, generation_rows
from hermes_opd.record.template_history import Render, TemplateHistory, probe_template_history
from hermes_opd.record.trajectory import PROMPT_LOGPROB, Trajectory, TurnSpan

_SENTINEL = "\x00HERMES_OPD_SENTINEL\x00"
_BEGIN = "\x00HERMES_OPD_CONTENT_BEGIN\x00"
_END = "\x00HERMES_OPD_CONTENT_END\x00"


class TemplateNotAppendOnlyError(HermesOPDError, ValueError):
    """The chat template re-renders earlier turns differently once more messages follow."""


def render_chat(
    tokenizer: Any,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    generation_prompt: bool,
) -> str:
    """The chat template's text for `messages` (and `tools`), as every recorder renders it."""
    return tokenizer.apply_chat_template(
        messages, tools=tools, tokenize=False, add_generation_prompt=generation_prompt
    )


_PROBES: weakref.WeakKeyDictionary[Any, dict[bytes, TemplateHistory]] = weakref.WeakKeyDictionary()
_PROBES_LOCK = threading.Lock()
_PROBES_PER_TOKENIZER = 64


def _template_history(tokenizer: Any, tools: list[dict[str, Any]] | None, render: Render) -> TemplateHistory:
    """`probe_template_history(render)`, remembered per tokenizer, chat template and tool list (the
    only inputs of the render): every new session would otherwise render the probe's three
    conversations again, with a coding agent's tool schemas each time. Keyed by a digest of the
    template and the tools as given (key order included, as the template sees it), so a client's
    megabytes of schemas are not kept as keys."""
    identity = json.dumps([str(getattr(tokenizer, "chat_template", None)), tools], default=str)
    key = hashlib.sha256(identity.encode("utf-8", "surrogatepass")).digest()
    try:
        with _PROBES_LOCK:
            found = _PROBES.setdefault(tokenizer, {}).get(key)
    except TypeError:  # a tokenizer that cannot be weakly referenced: probe every time
        return probe_template_history(render)
    if found is None:
        found = probe_template_history(render)
        with _PROBES_LOCK:
            known = _PROBES.setdefault(tokenizer, {})
            if len(known) >= _PROBES_PER_TOKENIZER:
                known.pop(next(iter(known)))
            known[key] = found
    return found


def _anchor_candidates(messages: list[dict[str, Any]], first_index: int) -> list[int]:
    """The new messages (from `first_index` on) a later turn's hint can anchor on
    (`Trajectory.hint_anchor`): the last user message among them, which stays every later turn's
    last user message until another comes, and the last message, the anchor when a turn's context
    holds no user message at all. Each candidate costs one render of the whole conversation, so
    finding only these keeps recording a conversation of n messages at a few renders, not n."""
    users = [i for i in range(first_index, len(messages)) if messages[i].get("role") == "user"]
    last = len(messages) - 1
    return sorted({*users[-1:], *([last] if last >= first_index else [])})


def first_context(
    tokenizer: Any, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
) -> list[int]:
    """The ids `TranscriptRecorder(tokenizer, tools).start(messages)` returns, without recording
    anything (no hint anchors, no template probe): the prompt of a request that is never trained."""
    text = render_chat(tokenizer, messages, tools or None, True)
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


class TranscriptRecorder:
    """Records tokens, masks, logprobs, turn spans and hint anchors for one rollout."""

    def __init__(self, tokenizer: Any, tools: list[dict[str, Any]] | None = None) -> None:
        self.tokenizer = tokenizer
        self.tools = tools or None
        self.eos_id = tokenizer.eos_token_id
        self.messages: list[dict[str, Any]] = []
        self._render_messages: list[dict[str, Any]] = []
        self.tokens: list[int] = []
        self.masks: list[int] = []
        self.logprobs: list[float] = []
        self.turns: list[TurnSpan] = []
        self.content_ends: dict[int, int] = {}
        self.student_topk: dict[int, TopRow] = {}
        """The sampler's top-K rows at generated positions, when the sampler returned them."""
        self.history: TemplateHistory | None = None
        self.finished: list[Trajectory] = []
        """Earlier sequences of this rollout, ended by a history rewrite (see the module doc)."""
        self._awaiting_generation = False
        self._last_generation: list[int] = []

    # -- rendering -----------------------------------------------------------------------------
    def _render(self, messages: list[dict[str, Any]], generation_prompt: bool) -> str:
        return render_chat(self.tokenizer, messages, self.tools, generation_prompt)

    def _content_end(
        self, messages: list[dict[str, Any]], index: int, generation_prompt: bool, full: str
    ) -> int | None:
        """Character offset in `full` (the rendering of `messages`) just after message `index`'s content,
        found inside that message's own region; None when the template does not render it verbatim."""
        content = messages[index].get("content")
        if not isinstance(content, str) or messages[index].get("role") == "assistant":
            return None
        marked = [dict(m) for m in messages]
        marked[index]["content"] = _BEGIN + content + _END
        text = self._render(marked, generation_prompt)
        if text.count(_BEGIN) != 1 or text.count(_END) != 1:
            return None
        if text.replace(_BEGIN, "", 1).replace(_END, "", 1) != full:
            return None  # the template transforms this content (trim, escape, ...)
        begin = text.index(_BEGIN)
        end = text.index(_END) - len(_BEGIN)
        if full[begin:end] != content:
            return None
        return end

    def _append_glue(
        self,
        glue: str,
        full: str,
        shift: int,
        first_index: int,
        generation_prompt: bool,
    ) -> None:
        """Tokenize template glue, append it masked, and record where the new messages' content
        ends, for those a hint can anchor on (`_anchor_candidates`).

        `glue[i]` is `full[i + shift]` for every position past the closing text of the last turn."""
        encoded = self.tokenizer(glue, add_special_tokens=False, return_offsets_mapping=True)
        ids = list(encoded["input_ids"])
        offsets = [(int(a), int(b)) for a, b in encoded["offset_mapping"]]
        base = len(self.tokens)
        for index in _anchor_candidates(self._render_messages, first_index):
            char_end = self._content_end(self._render_messages, index, generation_prompt, full)
            if char_end is None or not 0 <= char_end - shift <= len(glue):
                continue  # no hint anchor for this message
            at = char_end - shift
            if any(a < at < b for a, b in offsets):
                continue  # a token spans the content's end: no exact token boundary to anchor on
            self.content_ends[index] = base + sum(1 for _, b in offsets if b <= at)
        self.tokens.extend(ids)
        self.masks.extend([MASKED] * len(ids))
        self.logprobs.extend([PROMPT_LOGPROB] * len(ids))

    # -- public --------------------------------------------------------------------------------
    def start(self, messages: list[dict[str, Any]]) -> list[int]:
        """Record the opening messages; return the first generation context."""
        if self.messages:
            raise RuntimeError("start() called twice")
        self.messages = copy.deepcopy(messages)
        self._render_messages = copy.deepcopy(messages)
        self.history = _template_history(self.tokenizer, self.tools, self._render)
        text = self._render(self._render_messages, generation_prompt=True)
        self._append_glue(text, text, 0, 0, True)
        self._awaiting_generation = True
        return list(self.tokens)

    def record_generation(
        self,
        token_ids: list[int],
        logprobs: list[float],
        assistant_message: dict[str, Any],
        raw_text: str,
        top_ids: list[list[int]] | None = None,
        top_logprobs: list[list[float]] | None = None,
    ) -> TurnSpan:
        """Append one assistant turn's generated ids exactly as sampled.

        `assistant_message` is the structured message (content outside tool calls, parsed tool
        calls) kept for judges and reports; `raw_text` is the decoded generation without the EOS,
        which is what the template renders when later turns are appended. `top_ids`/`top_logprobs`
        are the sampler's top-K rows of these tokens, when it was asked for them."""
        if not self._awaiting_generation:
            raise RuntimeError("record_generation() needs a context from start() or extend() first")
        if len(token_ids) != len(logprobs):
            raise ValueError(f"{len(token_ids)} generated ids but {len(logprobs)} logprobs")
        start = len(self.tokens)
        if top_ids is not None or top_logprobs is not None:
            self.student_topk.update(
                generation_rows(start, token_ids, logprobs, top_ids or [], top_logprobs or [])
            )
        self.tokens.extend(int(t) for t in token_ids)
        self.masks.extend(int(t) for t in token_ids)
        self.logprobs.extend(float(x) for x in logprobs)
        message_index = len(self.messages)
        span = TurnSpan(start=start, end=len(self.tokens), message_index=message_index)
        self.turns.append(span)
        self.messages.append(copy.deepcopy(assistant_message))
        self._render_messages.append({"role": "assistant", "content": raw_text})
        self._last_generation = list(token_ids)
        self._awaiting_generation = False
        return span

    def extend(self, new_messages: list[dict[str, Any]], generation_prompt: bool = True) -> list[int]:
        """Append tool results / user messages after the last assistant turn; return the next context."""
        if self._awaiting_generation or not self.turns:
            raise RuntimeError("extend() follows record_generation()")
        previous = self._render(self._render_messages, generation_prompt=False)
        combined = self._render_messages + copy.deepcopy(new_messages)
        full = self._render(combined, generation_prompt=generation_prompt)
        if not full.startswith(previous):
            if any(m.get("role") == "user" for m in new_messages):
                return self._start_new_sequence(new_messages, combined, full, generation_prompt)
            raise TemplateNotAppendOnlyError(
                "the chat template renders the conversation differently once new messages follow the last "
                "assistant turn (it rewrites earlier turns, e.g. strips <think> blocks), so a turn's context "
                "would not be a prefix of the next one. Use an append-only template for rollouts."
            )
        closing = self._closing_after_generation()
        glue = closing + full[len(previous) :]
        first_index = len(self.messages)
        self.messages.extend(copy.deepcopy(new_messages))
        self._render_messages = combined
        self._append_glue(glue, full, len(previous) - len(closing), first_index, generation_prompt)
        self._awaiting_generation = generation_prompt
        return list(self.tokens)

    def _start_new_sequence(
        self,
        new_messages: list[dict[str, Any]],
        combined: list[dict[str, Any]],
        full: str,
        generation_prompt: bool,
    ) -> list[int]:
        """A user message re-rendered the history (past reasoning dropped): end this sequence with the
        new messages as its last turn's next state (messages only, no tokens), and start a new one
        whose context is the template's rendering of everything so far, all of it masked."""
        self.messages.extend(copy.deepcopy(new_messages))
        self.finished.append(self._snapshot())
        self._render_messages = combined
        self.tokens, self.masks, self.logprobs = [], [], []
        self.turns, self.content_ends = [], {}
        self.student_topk = {}  # earlier turns are masked context in the new sequence
        self._last_generation = []
        self._append_glue(full, full, 0, 0, generation_prompt)
        self._awaiting_generation = generation_prompt
        return list(self.tokens)

    def _closing_after_generation(self) -> str:
        """Template text that closes the last assistant turn, minus what the model already generated
        (its EOS when it stopped by itself)."""
        history = self._render_messages[:-1] + [{"role": "assistant", "content": _SENTINEL}]
        rendered = self._render(history, generation_prompt=False)
        at = rendered.rfind(_SENTINEL)
        if at < 0:
            raise TemplateNotAppendOnlyError("the chat template does not render assistant content verbatim")
        closing = rendered[at + len(_SENTINEL) :]
        if self._last_generation and self._last_generation[-1] == self.eos_id:
            eos_text = self.tokenizer.convert_ids_to_tokens(self.eos_id)
            if not closing.startswith(eos_text):
                raise TemplateNotAppendOnlyError(
                    f"the chat template closes assistant turns with {closing[:20]!r}, not the EOS {eos_text!r} "
                    "the model generated"
                )
            closing = closing[len(eos_text) :]
        return closing

    def _snapshot(self, **extra: Any) -> Trajectory:
        return Trajectory(
            tokens=list(self.tokens),
            masks=list(self.masks),
            inference_logprobs=list(self.logprobs),
            messages=copy.deepcopy(self.messages),
            turns=list(self.turns),
            content_ends=dict(self.content_ends),
            student_topk={p: (list(ids), list(lps)) for p, (ids, lps) in self.student_topk.items()},
            tools=self.tools,
            template_history=self.history.as_dict() if self.history else None,
            sequence_index=len(self.finished),
            **extra,
        )

    def trajectory(self, **extra: Any) -> Trajectory:
        """The rollout's record as one sequence. Raises ValueError when a history rewrite split it
        into several (use `trajectories()` then): returning only one would lose turns silently."""
        if self.finished:
            raise ValueError(
                f"this rollout was split into {len(self.finished) + 1} sequences (a user message made the "
                "template re-render earlier turns); use trajectories()"
            )
        return self._snapshot(**extra)

    def trajectories(self, **extra: Any) -> list[Trajectory]:
        """Every sequence of the rollout, in order (one unless the history was re-rendered)."""
        earlier = [copy.deepcopy(t) for t in self.finished]
        for t in earlier:
            for key, value in extra.items():
                setattr(t, key, value)
        return [*earlier, self._snapshot(**extra)]

    def split_generation(self, token_ids: list[int]) -> tuple[list[int], bool]:
        """(ids without a trailing EOS, whether the model stopped with its EOS)."""
        return split_eos(token_ids, self.eos_id)


def split_eos(token_ids: list[int], eos_id: int | None) -> tuple[list[int], bool]:
    """(ids without a trailing EOS, whether the model stopped with its EOS): the one rule for the
    env's recorder and the proxy's answers."""
    if token_ids and token_ids[-1] == eos_id:
        return token_ids[:-1], True
    return token_ids, False
