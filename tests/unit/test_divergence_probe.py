"""The divergence probe's hint for a live session is the proxy's: the rules judge's reading of the
user's reply after the tool result (hermes_opd/learning_study/divergence_probe.py)."""

from hermes_opd.learning_study.divergence_probe import Divergence, slot_index, table, user_hint_for


def test_a_correction_after_the_tool_result_is_the_hint_in_the_users_words():
    hint = user_hint_for(
        "Write compute_total.", "Wrong file: the team's convention is utils.py for all code."
    )
    assert hint == "Wrong file: the team's convention is `utils.py` for all code."


def test_an_acceptance_gives_no_hint():
    assert user_hint_for("Write compute_total.", "Thanks, that works.") is None


def test_the_table_counts_the_slots_each_row_has():
    rows = [
        Divergence(
            "t1",
            "name",
            "user",
            "h",
            "a",
            12.0,
            0.0,
            {"path": {"kl": 10.0, "teacher_top": "comp", "teacher_top_is_convention": False}},
        ),
        Divergence(
            "t2",
            "name",
            "user",
            "h",
            "a",
            4.0,
            6.0,
            {"path": {"kl": 2.0, "teacher_top": "util", "teacher_top_is_convention": True}},
        ),
    ]
    line = [x for x in table(rows).splitlines() if x.strip().startswith("name")][0].split()
    assert line[:6] == ["name", "user", "2", "8.00", "3.00", "1"]
    assert line[6:8] == ["6.00", "1/2"] and line[8:] == ["-", "-"]


class PieceTokenizer:
    """Each id is one piece of text."""

    def __init__(self, pieces: list[str]) -> None:
        self.pieces = pieces

    def decode(self, ids, **_):
        return "".join(self.pieces[i] for i in ids)


def test_a_slot_is_the_token_that_holds_its_first_character():
    tok = PieceTokenizer(['{"path": "', "util", "s.py", '", "content": "', "def", " ", " get", "_x"])
    assert slot_index(tok, [0, 1, 2, 3, 4, 5, 7], '"path": "') == 1  # the slot starts a token
    assert slot_index(tok, [0, 1, 2, 3, 4, 5, 7], "def ") == 6
    assert slot_index(tok, [0, 1, 2, 3, 4, 6, 7], "def ") == 5  # " get" holds the name's first letter
    assert slot_index(tok, [1, 2], "def ") is None
