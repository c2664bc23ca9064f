"""Build a rollout's exact token record turn by turn (pure logic over a tokenizer).

The policy's generated ids are appended as they came from the server, never re-tokenized. Only the
template glue between turns (the end of the assistant turn, tool results, user messages, the next
generation prompt) is tokenized, as the text the chat template adds after the previous turn. That
makes every turn's context an exact prefix of the next, by construction; a template that rewrites
earlier turns (and so cannot be extended this way) is refused loudly instead of guessed around.
"""

from __future__ import annotations

import copy
from typing import Any

from hermes_opd.contract.constants import MASKED
from hermes_opd.contract.errors import HermesOPDError
from hermes_opd.record.trajectory import PROMPT_LOGPROB, Trajectory, TurnSpan

_SENTINEL = "\x00HERMES_OPD_SENTINEL\x00"


class TemplateNotAppendOnlyError(HermesOPDError, ValueError):
    """The chat template re-renders earlier turns differently once more messages follow."""


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
        self._awaiting_generation = False
        self._last_generation: list[int] = []

    # -- rendering -----------------------------------------------------------------------------
    def _render(self, messages: list[dict[str, Any]], generation_prompt: bool) -> str:
        return self.tokenizer.apply_chat_template(
            messages, tools=self.tools, tokenize=False, add_generation_prompt=generation_prompt
        )

    def _append_glue(self, text: str, new_messages: list[dict[str, Any]], first_index: int) -> None:
        """Tokenize template glue, append it masked, and record where each new message's content ends."""
        encoded = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        ids = list(encoded["input_ids"])
        starts = [start for start, _ in encoded["offset_mapping"]]
        base = len(self.tokens)
        cursor = 0
        for offset, message in enumerate(new_messages):
            content = message.get("content")
            if not isinstance(content, str):
                continue
            found = text.find(content, cursor)
            if found < 0:
                continue  # template transformed the content; no hint anchor for this message
            char_end = found + len(content)
            cursor = char_end
            self.content_ends[first_index + offset] = base + sum(1 for s in starts if s < char_end)
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
        text = self._render(self._render_messages, generation_prompt=True)
        self._append_glue(text, self._render_messages, 0)
        self._awaiting_generation = True
        return list(self.tokens)

    def record_generation(
        self, token_ids: list[int], logprobs: list[float], assistant_message: dict[str, Any], raw_text: str
    ) -> TurnSpan:
        """Append one assistant turn's generated ids exactly as sampled.

        `assistant_message` is the structured message (content outside tool calls, parsed tool
        calls) kept for judges and reports; `raw_text` is the decoded generation without the EOS,
        which is what the template renders when later turns are appended."""
        if not self._awaiting_generation:
            raise RuntimeError("record_generation() needs a context from start() or extend() first")
        if len(token_ids) != len(logprobs):
            raise ValueError(f"{len(token_ids)} generated ids but {len(logprobs)} logprobs")
        start = len(self.tokens)
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
            raise TemplateNotAppendOnlyError(
                "the chat template renders the conversation differently once new messages follow the last "
                "assistant turn (it rewrites earlier turns, e.g. strips <think> blocks), so a turn's context "
                "would not be a prefix of the next one. Use an append-only template for rollouts."
            )
        glue = self._closing_after_generation() + full[len(previous) :]
        first_index = len(self.messages)
        self.messages.extend(copy.deepcopy(new_messages))
        self._render_messages = combined
        self._append_glue(glue, new_messages, first_index)
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

    def trajectory(self, **extra: Any) -> Trajectory:
        return Trajectory(
            tokens=list(self.tokens),
            masks=list(self.masks),
            inference_logprobs=list(self.logprobs),
            messages=copy.deepcopy(self.messages),
            turns=list(self.turns),
            content_ends=dict(self.content_ends),
            tools=self.tools,
            **extra,
        )

    def split_generation(self, token_ids: list[int]) -> tuple[list[int], bool]:
        """(ids without a trailing EOS, whether the model stopped with its EOS)."""
        if token_ids and token_ids[-1] == self.eos_id:
            return token_ids[:-1], True
        return token_ids, False
