"""Deterministic, offline judge: hints from the plain failure signals in the next state.

It looks for, in order of how much they tell the assistant:
0. what the verifier says it could not find: a solution file the checker looks for and that does not
   exist (`Missing solution file(s) ...: helpers.py`), or a name the tests could not import from the
   solution (`could not load the solution: ImportError: cannot import name 'f' from 'm'`),
1. failing tests (pytest `FAILED a.py::test_x`, unittest `FAIL: test_x (...)`, `failed tests: ...`),
2. a failed assertion (pytest `E   assert ...`, or `AssertionError: ...`),
3. a Python traceback (exception type and message, and the last frame's file, line and code),
4. `command not found`,
5. `No such file or directory`,
6. a tool call the env refused (`Error: ...` from the tool layer: not valid JSON, an unknown tool,
   invalid arguments),
7. a non-zero exit code (pattern `JudgeConfig.rules_exit_code_pattern`, default `exit code N`),
8. with `JudgeConfig.rules_quote_user_feedback` (live sessions behind the proxy, where a `role: user`
   message is a person's reply): a user reply read as a redo request or a correction
   (judge/user_feedback.py), quoted; an acceptance or a reply it cannot read is not (the backend
   counts each reading in `feedback_tally`, judge/user_feedback_tally.py). It is read in user
   messages only, never in tool output, and comes after every failure finding. Off by default: in
   the env the user messages are the verifier's, read by 0-7.

The hint states the first two findings and one piece of advice for the top one (at most three
sentences). The exit code is only mentioned when nothing more specific was found. With no finding
it abstains (-1): a clean success teaches nothing. Votes are m identical copies, written in the
judge's own answer format and read back with `parse_vote`, so they go through the same parser and
the same vote policy as an LLM's.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from hermes_opd.record.turn_pairs import TurnPair
from judge.config import JudgeConfig
from judge.parsing import HINT_END, HINT_START, Vote, defuse_markers, parse_vote
from judge.prm_prompt import next_state_parts
from judge.user_feedback import Reading, read_reply
from judge.user_feedback_tally import FeedbackTally

MAX_QUOTE_CHARS = 100
"""Hints quote text the agent wrote (test names, error lines) only as short excerpts in backticks, so a
policy cannot write the context it is trained under."""
MAX_TEST_NAMES = 5
MAX_USER_QUOTE_CHARS = 400
"""A user's reply is not the policy's text, so it is quoted at more length (still one line)."""

_PYTEST_FAILED = re.compile(r"^(?:FAILED|ERROR)\s+(\S+::\S+)", re.MULTILINE)
_UNITTEST_FAILED = re.compile(r"^(?:FAIL|ERROR):\s+(\w+)\s+\(([\w.]+)\)", re.MULTILINE)
_LISTED_FAILED = re.compile(r"(?im)^\s*fail(?:ed|ing)\s+tests?\s*:\s*(.+)$")
"""A plain `failed tests: a, b` line (verifier style); only names that contain `test` are kept."""
_PYTEST_ASSERT = re.compile(r"^E\s+(assert\s.+)$", re.MULTILINE)
_ASSERTION_ERROR = re.compile(r"^(?:E\s+)?AssertionError(?::\s*(.*))?$", re.MULTILINE)
_TRACEBACK = re.compile(r"^Traceback \(most recent call last\):", re.MULTILINE)
_FRAME = re.compile(r'^\s*File "([^"]+)", line (\d+)(?:, in (\S+))?\s*\n(?:[ \t]+(\S.*)\n)?', re.MULTILINE)
_EXCEPTION_LINE = re.compile(
    r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Iteration|Warning|Failure))(?::\s*(.*))?\s*$",
    re.MULTILINE,
)
_COMMAND_NOT_FOUND = [
    re.compile(r"^(?:[\w./-]+:\s*)?(?:line \d+:\s*)?([\w.+-]+): command not found\s*$", re.MULTILINE),  # bash
    re.compile(r"^[\w./-]*sh: \d+: ([\w.+-]+): not found\s*$", re.MULTILINE),  # dash / sh
    re.compile(r"command not found: ([\w.+-]+)\s*$", re.MULTILINE),  # zsh
]
_MISSING_PATH = re.compile(r"^(.*No such file or directory.*)$", re.MULTILINE)
_MISSING_SOLUTION_FILES = re.compile(r"^Missing solution file\(s\)[^:\n]*:\s*(.+)$", re.MULTILINE)
"""How environments/rollout/verifier.py lists the solution files it looked for and did not find."""
_LOAD_ERROR = re.compile(
    r"could not load the solution: ([A-Za-z_][\w.]*(?:Error|Exception))(?::\s*(.*))?$", re.MULTILINE
)
_CANNOT_IMPORT = re.compile(r"cannot import name '([\w.]+)' from '([\w.]+)'")
_TOOL_ERROR = re.compile(r"^Error: (.+)$", re.MULTILINE)
"""How `environments/rollout/tools.py` words a call it refused or a tool that failed."""
_TOOL_ERROR_ADVICE = (
    ("not valid JSON", 'Write each call as one valid JSON object with a "name" and an "arguments" object.'),
    ("unknown tool", "Call one of the tools the error lists, by its exact name."),
    ("invalid arguments", "Pass exactly the arguments of the signature the error gives."),
)


@dataclass(frozen=True)
class Finding:
    """One failure signal: what it is, a sentence stating it, and advice for it."""

    kind: str
    statement: str
    advice: str


def _quote(text: str, limit: int = MAX_QUOTE_CHARS) -> str:
    """Tool output as a one-line quote, shortened, with answer markers defused."""
    text = defuse_markers(" ".join(text.split()))
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return text.replace("`", "'")


def _unittest_name(method: str, where: str) -> str:
    """`FAIL: test_x (mod.Case)` (Python < 3.11) or `FAIL: test_x (mod.Case.test_x)` (3.11+)."""
    return where if where.endswith("." + method) else f"{where}.{method}"


def find_missing_solution_files(text: str) -> Finding | None:
    match = _MISSING_SOLUTION_FILES.search(text)
    if not match:
        return None
    names = _quote(match.group(1).strip())
    return Finding(
        kind="missing_solution_file",
        statement=f"The checker looks for `{names}`, and that file does not exist.",
        advice=f"Write the solution to `{names}`.",
    )


def find_load_error(text: str) -> Finding | None:
    match = _LOAD_ERROR.search(text)
    if not match:
        return None
    message = match.group(2) or ""
    cannot_import = _CANNOT_IMPORT.search(message)
    if cannot_import:
        name, module = _quote(cannot_import.group(1)), _quote(cannot_import.group(2))
        return Finding(
            kind="load_error",
            statement=f"The tests could not import the name `{name}` from the module `{module}`.",
            advice=f"Define `{name}` in `{module}.py`, with exactly that name.",
        )
    raised = f"{match.group(1)}: {message}" if message else match.group(1)
    return Finding(
        kind="load_error",
        statement=f"The tests could not load the solution: `{_quote(raised)}`.",
        advice="Fix what keeps the solution from loading before anything else.",
    )


def find_failing_tests(text: str) -> Finding | None:
    names = [m.group(1) for m in _PYTEST_FAILED.finditer(text)]
    names += [_unittest_name(m.group(1), m.group(2)) for m in _UNITTEST_FAILED.finditer(text)]
    for listed in _LISTED_FAILED.finditer(text):
        names += [n.strip(":") for n in re.split(r"[,;\s]+", listed.group(1)) if "test" in n.lower()]
    names = list(dict.fromkeys(names))
    if not names:
        return None
    shown = ", ".join(f"`{_quote(n)}`" for n in names[:MAX_TEST_NAMES])
    more = f" and {len(names) - MAX_TEST_NAMES} more" if len(names) > MAX_TEST_NAMES else ""
    return Finding(
        kind="failing_tests",
        statement=f"These tests fail: {shown}{more}.",
        advice="Read what those tests expect and fix the code they exercise before calling the task done.",
    )


def find_failed_assertion(text: str) -> Finding | None:
    pytest_assert = _PYTEST_ASSERT.search(text)
    if pytest_assert:
        detail = pytest_assert.group(1)
    else:
        assertion = _ASSERTION_ERROR.search(text)
        if not assertion:
            return None
        detail = f"AssertionError: {assertion.group(1)}" if assertion.group(1) else "AssertionError"
    return Finding(
        kind="assertion",
        statement=f"An assertion fails: `{_quote(detail)}`.",
        advice="Compare the expected and the actual value in that assertion and correct the logic that "
        "produces the actual one.",
    )


def find_python_exception(text: str) -> Finding | None:
    tracebacks = list(_TRACEBACK.finditer(text))
    if not tracebacks:
        return None
    last = text[tracebacks[-1].start() :]
    frames = list(_FRAME.finditer(last))
    after_frames = last[frames[-1].end() :] if frames else last
    exception = _EXCEPTION_LINE.search(after_frames)
    if exception:
        name, message = exception.group(1), exception.group(2)
        raised = f"{name}: {message}" if message else name
    else:
        raised = "an exception"
    where = ""
    if frames:
        frame = frames[-1]
        where = f" in `{_quote(frame.group(1))}` line {frame.group(2)}"
        if frame.group(3):
            where += f" (`{_quote(frame.group(3))}`)"
        if frame.group(4):
            where += f", at `{_quote(frame.group(4))}`"
    quoted = f"`{_quote(raised)}`" if exception else raised
    return Finding(
        kind="exception",
        statement=f"Running it raised {quoted}{where}.",
        advice="Fix the cause of that exception at that line before running it again.",
    )


def find_command_not_found(text: str) -> Finding | None:
    match = next((m for pattern in _COMMAND_NOT_FOUND if (m := pattern.search(text))), None)
    if not match:
        return None
    command = _quote(match.group(1))
    return Finding(
        kind="command_not_found",
        statement=f"The command `{command}` does not exist in this environment.",
        advice=f"Use a tool that is installed instead of `{command}` (check with `command -v` first).",
    )


def find_missing_path(text: str) -> Finding | None:
    match = _MISSING_PATH.search(text)
    if not match:
        return None
    return Finding(
        kind="missing_path",
        statement=f"A path does not exist: `{_quote(match.group(1))}`.",
        advice="List the directory to find the real path before using it.",
    )


def find_tool_error(text: str) -> Finding | None:
    match = _TOOL_ERROR.search(text)
    if not match:
        return None
    reason = match.group(1).split("; expected ", 1)[0]  # the env's own format reminder is left out
    advice = next(
        (advice for marker, advice in _TOOL_ERROR_ADVICE if marker in reason),
        "Fix what the error names before calling the tool again.",
    )
    return Finding(kind="tool_error", statement=f"The tool call failed: `{_quote(reason)}`.", advice=advice)


def _last_output_line(text: str, exit_code_pattern: re.Pattern[str]) -> str | None:
    for line in reversed(text.splitlines()):
        stripped = line.strip()
        if stripped and not exit_code_pattern.search(stripped) and not re.fullmatch(r"\[[\w.-]+\]", stripped):
            return stripped
    return None


def find_nonzero_exit(text: str, exit_code_pattern: re.Pattern[str]) -> Finding | None:
    codes = [int(m.group(1)) for m in exit_code_pattern.finditer(text)]
    failing = [c for c in codes if c != 0]
    if not failing:
        return None
    statement = f"The command exited with code {failing[0]}"
    last_line = _last_output_line(text, exit_code_pattern)
    statement += f"; its last output line was `{_quote(last_line)}`." if last_line else "."
    return Finding(
        kind="exit_code",
        statement=statement,
        advice="Check the command and its arguments against that output before relying on its result.",
    )


_CODE_SPAN = re.compile(
    r"`[^`\n]*`"  # a span the user already marked
    r"|(?<![\w.`])(?:[A-Za-z_][\w]*_[\w]*|[A-Za-z_][\w-]+\.[A-Za-z]{1,5})(?:\(\w*\))?(?![\w`])"
)
"""What a chat client shows as code in a user's reply: marked spans, and words a person types as code
without marking them (`snake_case` names, file names with an extension, a call's `()`)."""


def mark_code(text: str) -> str:
    """`text` with every code-like word in backticks, as a markdown chat would render it; spans the
    user marked are kept as they are."""
    return _CODE_SPAN.sub(lambda m: m.group(0) if m.group(0).startswith("`") else f"`{m.group(0)}`", text)


def user_readings(pair: TurnPair) -> list[tuple[str, Reading]]:
    """(text, reading) of each user reply in the pair's next state (judge/user_feedback.py)."""
    return [(text, read_reply(text).kind) for role, _, text in next_state_parts(pair) if role == "user"]


def find_user_feedback(pair: TurnPair) -> Finding | None:
    """The first user reply in the pair's next state read as a redo request or a correction: the
    user's own words, on one line, with their code marked (`mark_code`). An acceptance, and a reply
    the reader cannot read, give none.

    The words are not framed ("The user replied to this step: ..."): the teacher reads the hint in
    the user's message before the turn, after `[user's hint / instruction]`, so the user's words are
    already the instruction. A frame that speaks of a reply to a step the teacher has not taken yet
    made the shipped student's teacher answer "Done" in place of the tool call (KL 14 nats at the
    first token in 1 of 8 train attempts) and put the stated file first at the path in 2 of 8,
    against 0 nats and 5 of 8 for the words alone (`python -m
    hermes_opd.learning_study.divergence_probe`; docs/recipes/learning-bench.md, "Through the proxy")."""
    for text, reading in user_readings(pair):
        if reading in ("redo", "correction"):
            return Finding(kind="user_feedback", statement=mark_code(_quote_user(text)), advice="")
    return None


def _quote_user(text: str) -> str:
    """A user's reply on one line, shortened, answer markers defused (backticks kept)."""
    text = defuse_markers(" ".join(text.split()))
    return text if len(text) <= MAX_USER_QUOTE_CHARS else text[: MAX_USER_QUOTE_CHARS - 3] + "..."


@dataclass(frozen=True)
class RulePatterns:
    """The configurable part of the rules: how an exit code is written, and whether user replies
    are quoted (`rules_quote_user_feedback`)."""

    exit_code: re.Pattern[str]
    quote_user_feedback: bool = False

    @classmethod
    def from_config(cls, config: JudgeConfig) -> RulePatterns:
        return cls(
            exit_code=re.compile(config.rules_exit_code_pattern),
            quote_user_feedback=config.rules_quote_user_feedback,
        )


def find_failures(text: str, patterns: RulePatterns) -> list[Finding]:
    """All findings in `text`, most informative first (see the module docstring)."""
    detectors: list[Callable[[str], Finding | None]] = [
        find_missing_solution_files,
        find_load_error,
        find_failing_tests,
        find_failed_assertion,
        find_python_exception,
        find_command_not_found,
        find_missing_path,
        find_tool_error,
    ]
    findings = [f for f in (detect(text) for detect in detectors) if f is not None]
    if not findings:
        exit_finding = find_nonzero_exit(text, patterns.exit_code)
        if exit_finding:
            findings.append(exit_finding)
    return findings


def hint_from(findings: list[Finding]) -> str | None:
    """At most three sentences: the first two findings, and the advice of the first (a user's reply
    has none: its words are the advice); None for none."""
    if not findings:
        return None
    return " ".join(part for part in [f.statement for f in findings[:2]] + [findings[0].advice] if part)


def rule_hint(next_state_text: str, patterns: RulePatterns) -> str | None:
    """A hint of at most three sentences, or None when the next state shows no failure."""
    return hint_from(find_failures(next_state_text, patterns))


def pair_hint(pair: TurnPair, patterns: RulePatterns) -> str | None:
    """`rule_hint` of the pair's next state; with `quote_user_feedback`, a user reply that is not a
    plain acceptance is one more finding, after every failure finding."""
    if not pair.has_next_state:
        return None
    findings = find_failures(pair.next_state_text, patterns)
    if patterns.quote_user_feedback and (reply := find_user_feedback(pair)) is not None:
        findings.append(reply)
    return hint_from(findings)


def rule_answer(pair: TurnPair, patterns: RulePatterns) -> str:
    """The rules' verdict written as a judge answer."""
    hint = pair_hint(pair, patterns)
    if hint is None:
        return "rules: no failure signal in the next state.\n\\boxed{-1}"
    return f"rules: failure signal in the next state.\n\\boxed{{1}}\n{HINT_START}{hint}{HINT_END}"


class RulesJudgeBackend:
    """m identical, deterministic votes from `rule_answer`."""

    name = "rules"

    def __init__(self, config: JudgeConfig) -> None:
        self.config = config
        self.patterns = RulePatterns.from_config(config)
        self.feedback_tally = FeedbackTally()
        """Readings of the user replies it read (only with `rules_quote_user_feedback`)."""

    async def collect_votes(self, pair: TurnPair) -> list[Vote]:
        if self.patterns.quote_user_feedback:
            self.feedback_tally.record(reading for _, reading in user_readings(pair))
        vote = parse_vote(rule_answer(pair, self.patterns), self.config.min_hint_chars)
        return [vote] * self.config.m

    async def aclose(self) -> None:
        return None
