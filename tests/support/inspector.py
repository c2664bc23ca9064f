"""Count the scored tokens an inspector report shows."""

from __future__ import annotations

from html.parser import HTMLParser

from hermes_opd.contract.provenance import scored_positions


class TokenCounter(HTMLParser):
    """Counts elements by class and collects the JSON data block."""

    def __init__(self) -> None:
        super().__init__()
        self.scored = 0
        self.scored_classes: list[str] = []
        self.generated_unscored = 0
        self.hints: list[str] = []
        self._in_hint = False
        self._in_data = False
        self.data_text = ""
        self.resource_urls: list[str] = []

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        classes = (attributes.get("class") or "").split()
        if "tok" in classes and "scored" in classes:
            self.scored += 1
            self.scored_classes.append(" ".join(classes))
        if "tok" in classes and "gen" in classes:
            self.generated_unscored += 1
        if "hint" in classes:
            self._in_hint = True
        if tag == "script" and attributes.get("id") == "opd-data":
            self._in_data = True
        for name in ("src", "href", "xlink:href", "action", "poster", "data"):
            if attributes.get(name):
                self.resource_urls.append(attributes[name])

    def handle_endtag(self, tag):
        self._in_hint = False
        self._in_data = False

    def handle_data(self, data):
        if self._in_hint:
            self.hints.append(data)
        if self._in_data:
            self.data_text += data


def count_scored(groups: list[dict]) -> int:
    return sum(int(scored_positions(g, seq).sum()) for g in groups for seq in range(len(g["tokens"])))
