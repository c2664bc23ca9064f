"""What a user's reply says about the step before it, read lexically (plain English): a redo request,
a correction, an acceptance, or none of these that it can tell (`unread`).

Who reads it: the rules backends, only in `role: user` messages, never in tool output (which the
policy controls): the process judge (judge/prm_rules_backend.py) gives -1 for a redo or a
correction, +1 for an acceptance and 0 for an unread reply; the hint judge (judge/rules_backend.py,
`rules_quote_user_feedback`) quotes a redo or a correction as the hint, and nothing else. An unread
reply is neither a hint nor a reward; each backend counts its readings (`FeedbackTally`,
judge/user_feedback_tally.py) so a run can see how many replies it could not read. With the `llm`
backend (`JudgeConfig.backend`, judge/make_backend.py) none of this runs: the judge model reads the
reply itself, in the prompt of judge/prompt.py or judge/prm_prompt.py.

How it reads (`read_reply`), on the reply with curly quotes straightened and case folded:
1. a redo request (`REDO`) is a redo;
2. phrases that accept with a negative-looking word (`no complaints`, `not bad`, `no errors now`,
   `doesn't crash anymore`, `exactly what I needed`, `nothing wrong`) count as acceptance cues and
   are blanked, so their words do not count again;
3. correction cues: an opening refusal (`no`, `nope`, `not quite`, `hmm`, `almost`, ...), a failure
   word (`error`, `fails`, `wrong`, `missing`, `forgot`, `typo`, a `FooError` name, an HTTP error
   code), a negated verb (`doesn't`, `isn't`, `not`, ...), an obligation (`should`, `ought to`,
   `needs to`, `must`), a request (`could you`, `can you`, `I'd prefer`, `I asked`/`meant`/`wanted`
   unless after `what`), a contrast (`instead`, `rather than`, `X, not Y`), `still`, `same error`, a
   stated convention (`our team keeps ...`, `we always ...`, `in this repo`), a `why did you`
   question, or a clause that opens with an imperative verb that changes the work
   (`use`, `rename`, `move`, `remove`, `undo`, `don't`, ...; one after `now`/`next`/`then`/`also`
   is a follow-up request, not a correction);
4. acceptance cues: thanks (`thanks`, `cheers`, `ta`, `appreciate`), praise (`great`, `brilliant`,
   `spot on`, `nailed it`), approval (`approved`, `lgtm`, `ship it`, `merging`, `go ahead`, `all
   good`, `looks good`, `works for me`, `did the trick`, `fine by me`), a reply or sentence that
   opens with `yes`/`yep`/`ok`/`sure`/..., success of a run (`tests pass`, `all green`, `works`);
5. only correction cues: a correction; only acceptance cues: an acceptance; both: a correction
   (`Thanks, but rename it` still asks for a change); neither: unread.
It is a dev-rig stand-in for the LLM judge, measured on replies it was not written from
(judge/eval/user_feedback_heldout.jsonl, `python -m judge.eval.user_feedback_score`), not a model of
every user.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import Literal

Reading = Literal["redo", "correction", "acceptance", "unread"]
READINGS: tuple[Reading, ...] = ("redo", "correction", "acceptance", "unread")

MAX_READ_CHARS = 4000
"""Only the first this many characters of a reply are read (what it says of the step comes first,
and the reading stays a few milliseconds however long a reply is)."""

REDO = re.compile(r"(?i)\b(?:try again|do it again|redo|start over|one more time|again, please)\b")

_ACCEPTING_PHRASES = [
    r"\bno (?:more )?(?:problems?|issues?|complaints?|worries|notes|objections|concerns|further (?:changes|comments|notes))\b",
    r"\bno need to (?:change|touch|do) (?:anything|a thing|more)\b|\bno (?:further )?changes (?:needed|required)\b",
    r"\bnot (?:bad|too shabby)\b(?: at all)?",
    r"\bcan'?t (?:complain|fault it|thank you enough)\b|\bcouldn'?t (?:be (?:better|happier)|ask for more|fault it)\b",
    r"\b(?:exactly|just|precisely) (?:what|how) i (?:wanted|needed|meant|asked for|had in mind|was after|expected)\b",
    r"\bthat'?s (?:exactly |just |precisely )?(?:what|how) i (?:wanted|needed|meant|asked for|had in mind|was after)\b",
    r"\bi needed (?:that|this)\b",
    r"\b(?:no|zero|0) (?:more )?(?:errors?|failures?|warnings?|crash(?:es)?|bugs?|exceptions?|failing tests?)\b(?: (?:any ?more|now|left|this time))?",
    r"\b(?:doesn'?t|does not|don'?t|won'?t|isn'?t|aren'?t|no longer|not) (?:\w+ )?(?:crash|fail|error|break|hang|throw|complain|time out|warn)\w* (?:any ?more|now)\b",
    r"\bno longer (?:fails|crashes|errors|breaks|hangs|throws|times out|complains|broken|failing|warns)\b",
    r"\b(?:the )?(?:errors?|bugs?|warnings?|crash(?:es)?|problems?|issues?|failures?) (?:is |are |has |have )?(?:been )?(?:gone|fixed|resolved|solved|went away|disappeared)\b",
    r"\bnothing (?:else )?(?:to (?:add|change|fix)|(?:is )?(?:wrong|missing|broken|failing))\b|\bnothing fails\b",
    r"\bdon'?t change (?:a thing|anything)\b",
    r"\bkeep (?:it |that )?up\b|\bkeep up the good work\b|\bkeep going\b",
    r"\blet'?s move on\b|\bmoving on\b|\bmove on to\b|\bon to the next\b|\bcarry on\b",
    r"\b(?:that|this|it) should (?:do it|work|be (?:fine|good|ok|okay|enough))\b",
    r"\bwithout (?:any )?(?:errors?|problems?|issues?|warnings?|failures?)\b",
    r"\bas expected\b",
]
ACCEPTING_PHRASES = re.compile("|".join(f"(?:{p})" for p in _ACCEPTING_PHRASES), re.IGNORECASE)
"""Acceptances whose words would otherwise read as a correction; blanked after they count."""

_VERBS = (
    "use|change|rename|move|replace|swap|switch|remove|delete|drop|undo|revert|roll back|put|make|keep|"
    "sort|return|add|fix|handle|call|set|convert|restore|avoid|stop|rewrite|update|split|wrap|pass|"
    "raise|increase|decrease|reduce|bump|write|create|implement|define|name|go back|check|include|"
    "exclude|import|indent|format|escape|quote|close|catch|validate|log|print|strip|trim|lowercase|"
    "uppercase|capitali[sz]e|round|cast|reverse|extract|inline|rerun|re-run|move|pin|limit|cap|lower|"
    "raise|flip|invert|skip|ignore|don'?t|do not|never"
)
_CORRECTIONS: dict[str, str] = {
    "opening refusal": r"(?:^|[.!?;]\s+)(?:no|nope|nah|naw|nay|not quite|not really|not yet|not exactly|hmm+|hm+|um+|uh+|er+m*|"
    r"actually|wait|close|almost|nearly|careful|oops|ugh|meh|sorry,? but)\b",
    "failure": r"\b(?:errors?|exceptions?|traceback|crash(?:es|ed|ing)?|fail(?:s|ed|ing|ures?)?|broken|breaks|broke|"
    r"bugs?|buggy|typos?|wrong(?:ly)?|incorrect(?:ly)?|invalid|missing|forg[eo]t(?:ten|ting)?|misread|"
    r"misunderst(?:ood|and)|missp?el(?:t|led)|mistakes?|mistaken|regress(?:ed|ions?)?|undefined|segfault\w*|"
    r"hangs|hung|timed out|times out|timeouts?|off[ -]by[ -]one|warnings?|rejects?|rejected|refuses?|"
    r"garbage|nonsense|mangled|corrupt(?:ed)?|truncated|dropped|ignored|ignores|overwr(?:ote|itten)|"
    r"deleted|swapped|backwards|messed|screwed|unreadable|unusable|useless)\b|[\u274c\U0001f44e]",
    "negated verb": r"\b(?:doesn'?t|does not|didn'?t|did not|isn'?t|is not|wasn'?t|was not|aren'?t|are not|"
    r"weren'?t|won'?t|will not|can'?t|cannot|couldn'?t|shouldn'?t|wouldn'?t|haven'?t|hasn'?t|hadn'?t|"
    r"never|no longer|not)\b",
    "obligation": r"\b(?:should(?:n'?t)?|ought(?:n'?t)? to|needs? to|has to|have to|must(?:n'?t)?|supposed to|"
    r"meant to|expected\b.{0,40}\bgot)\b",
    "request": r"\b(?:could|can|would|will) you\b|\bi(?:'d| would) (?:like|prefer|rather)\b|"
    r"(?<!what )\bi (?:meant|said|asked|wanted|want|need|needed|told you|specified|expected)\b|"
    r"\bi was (?:asking|expecting|hoping)\b",
    "contrast": r"\b(?:instead|rather than|in place of|as opposed to)\b|,\s*not\b|\bnot\b[^.!?]{1,40}\bbut\b",
    "still": r"\bstill\b(?! (?:works?|working|pass(?:es|ing)?|good|fine|green|ok|okay))",
    "stated convention": r"\b(?:our|the) (?:team|team's|convention|conventions|style guide|rule|rules|standard|codebase|"
    r"repo|project)\b|\bwe (?:always|usually|never|normally|prefer|use|put|keep|name|want)\b|\bhouse style\b|"
    r"\bin this (?:repo|project|team|codebase|house)\b|\bby convention\b",
    "same problem": r"\bsame (?:error|problem|issue|result|output|thing|failure|bug|warning|message|exception)\b",
    "why question": r"(?:^|[.!?;]\s+)why\b|\bwhy (?:did|does|is|are|would|do|didn'?t|isn'?t|has|have) (?:you|it|this|that|the)\b",
    "doubting question": r"(?:^|[.!?;]\s+)(?:shouldn'?t|isn'?t|wasn'?t|doesn'?t|didn'?t|aren'?t|where'?s|where is|"
    r"what about|what happened|where did)\b",
    "imperative": r"(?:^|[.!?;:,(]\s*|\s[-\u2013\u2014]\s*|\b(?:but|however|though|although|except)\s+)(?:please\s+|pls\s+|kindly\s+|just\s+)?(?:"
    + _VERBS
    + r")\b",
}
_ACCEPTANCES: dict[str, str] = {
    "thanks": r"\b(?:thanks|thank you|thank u|thx|tx|ty|tysm|cheers|ta|appreciated?|appreciate it|"
    r"much obliged|grateful|kudos|bravo|props)\b|[\U0001f64f]",
    "praise": r"\b(?:perfect(?:ly)?|great|awesome|excellent|brilliant|brill|lovely|nice|cool|fantastic|superb|"
    r"wonderful|amazing|beautiful|splendid|marvell?ous|terrific|outstanding|sweet|neat|stellar|impressive|"
    r"flawless|fab|fabulous|magic|ace|smashing|cracking|champion|legend|spot on|bang on|on point|"
    r"top notch|nailed it|good (?:stuff|job|work|one|call)|well done|nice one|good as gold|sorted|"
    r"job done)\b|[\U0001f44d\u2705\U0001f389\U0001f680\U0001f64c\U0001f44c]",
    "approval": r"\b(?:approved?|approving|lgtm|sgtm|ship ?it|shipping it|merg(?:ed|ing)|merge (?:it|this|away)|"
    r"(?:ok|fine|ready|good) to merge|good to go|go ahead|go for it|all good|all set|we'?re good|"
    r"i'?m happy|happy with (?:it|that|this)|looks? (?:good|great|fine|right|correct|ok|okay|perfect|"
    r"solid|clean)|sounds? (?:good|great|fine|right|perfect)|fine by me|works for me|that works|"
    r"(?:that|this|it) (?:did|does) (?:it|the trick)|did the trick|fixed it|(?:is|are|all|now) fixed|"
    r"solved|resolved|that'?s it|that'?s the one|that'?s right|that'?s correct|exactly|correct|"
    r"confirmed|verified|accepted|agreed|makes sense|done|spot on|right on|bingo)\b",
    "yes": r"(?:^|[.!?;]\s+)(?:yes|yep|yup|yeah|yea|ya|sure|ok|okay|k|kk|alright|all right|right|good|"
    r"fine|cool|aye|indeed|absolutely|definitely|certainly|totally|true)\b",
    "success": r"\b(?:tests? (?:pass(?:es|ed)?|(?:are |is )?(?:passing|green|fine|ok))|all (?:green|passing)|"
    r"(?:is|are|all|now|everything|build|ci|pipeline) green|passes|passing|builds (?:fine|now|cleanly)|"
    r"compiles(?: fine| now| cleanly)?|runs (?:fine|now|great|cleanly|perfectly)|works|worked|working)\b",
}
CORRECTION_CUES = {name: re.compile(p) for name, p in _CORRECTIONS.items()}
ACCEPTANCE_CUES = {name: re.compile(p) for name, p in _ACCEPTANCES.items()}
_ERROR_NAME = re.compile(r"\b[A-Z][A-Za-z]*(?:Error|Exception)\b|\b(?:40[0-9]|42[29]|50[0-4])s?\b")
"""Case-sensitive cues read on the reply as written: an exception's name, an HTTP error status."""


@dataclass(frozen=True)
class ReplyReading:
    """What a reply was read as, and the cues that decided it (for tests and debugging)."""

    kind: Reading
    correction_cues: tuple[str, ...] = ()
    acceptance_cues: tuple[str, ...] = ()


def normalised(text: str) -> str:
    """NFKC, curly quotes straightened, whitespace collapsed (case kept)."""
    text = unicodedata.normalize("NFKC", text)
    text = text.translate({0x2018: "'", 0x2019: "'", 0x201C: '"', 0x201D: '"'})
    return " ".join(text.split())


def read_reply(text: str) -> ReplyReading:
    """Read one user reply (see the module docstring for the rules)."""
    written = normalised(text.lstrip()[: MAX_READ_CHARS * 2])[:MAX_READ_CHARS]
    if not written:
        return ReplyReading("unread")
    if REDO.search(written):
        return ReplyReading("redo", ("redo",))
    acceptance = ["accepting phrase"] if ACCEPTING_PHRASES.search(written) else []
    rest = ACCEPTING_PHRASES.sub(" ~ ", written)
    folded = rest.casefold()
    correction = [name for name, cue in CORRECTION_CUES.items() if cue.search(folded)]
    if _ERROR_NAME.search(rest):
        correction.append("error name")
    acceptance += [name for name, cue in ACCEPTANCE_CUES.items() if cue.search(folded)]
    if correction:
        return ReplyReading("correction", tuple(correction), tuple(acceptance))
    if acceptance:
        return ReplyReading("acceptance", (), tuple(acceptance))
    return ReplyReading("unread")


def asks_for_redo(text: str) -> bool:
    return read_reply(text).kind == "redo"


def corrects(text: str) -> bool:
    """A redo request or a correction."""
    return read_reply(text).kind in ("redo", "correction")


def accepts(text: str) -> bool:
    """Read as an acceptance (no correction in it)."""
    return read_reply(text).kind == "acceptance"


def plain_acceptance(text: str) -> bool:
    """An acceptance with no redo request and no correction in it: nothing to learn from its words."""
    return accepts(text)
