"""Built-in hard tasks: a tokenizer, an expression evaluator, graphs and a trie."""

from __future__ import annotations

from environments.tasks.builtin_common import make_task
from environments.tasks.task import Task

TASKS: list[Task] = [
    make_task(
        "tokenizer",
        "hard",
        """
        Write a function `tokenize(source: str) -> list[tuple[str, str]]` for a small expression
        language. It returns (kind, text) pairs in order:
        - "NUMBER": digits with an optional fractional part ("42", "3.14"; a leading "." as in ".5"
          or a trailing "." as in "5." is not a number).
        - "NAME": a letter or underscore followed by letters, digits or underscores.
        - "OP": one of `** == != <= >= + - * / % < > = ( ) ,` — always take the longest operator
          that matches ("**" not "*", "*"; "<=" not "<", "=").
        - "STRING": text in double quotes, with no escapes; the token text includes the quotes.
        Whitespace separates tokens and is skipped. Raise `ValueError` for any other character,
        for an unterminated string, and for a malformed number such as "1.2.3", "5." or ".5"; the
        message must contain the 0-based position where the problem starts as "position N".
        """,
        tests="""
        from solution import tokenize

        def test_simple_expression():
            assert tokenize("x = 3 + 42") == [("NAME", "x"), ("OP", "="), ("NUMBER", "3"),
                                              ("OP", "+"), ("NUMBER", "42")]

        def test_longest_operator():
            assert tokenize("a**b<=c==d!=e>=f") == [
                ("NAME", "a"), ("OP", "**"), ("NAME", "b"), ("OP", "<="), ("NAME", "c"), ("OP", "=="),
                ("NAME", "d"), ("OP", "!="), ("NAME", "e"), ("OP", ">="), ("NAME", "f")]

        def test_decimals_and_names():
            assert tokenize("_tmp1*3.25/(y_2%7)") == [
                ("NAME", "_tmp1"), ("OP", "*"), ("NUMBER", "3.25"), ("OP", "/"), ("OP", "("),
                ("NAME", "y_2"), ("OP", "%"), ("NUMBER", "7"), ("OP", ")")]

        def test_strings_and_commas():
            assert tokenize('f("a b", 2)') == [("NAME", "f"), ("OP", "("), ("STRING", '"a b"'),
                                               ("OP", ","), ("NUMBER", "2"), ("OP", ")")]

        def test_whitespace_and_empty():
            assert tokenize("") == []
            assert tokenize(" \\t\\n ") == []
            assert tokenize("  1\\n+\\t2 ") == [("NUMBER", "1"), ("OP", "+"), ("NUMBER", "2")]

        def _error(source):
            try:
                tokenize(source)
            except ValueError as exc:
                return str(exc)
            raise AssertionError(f"tokenize({source!r}) should raise ValueError")

        def test_bad_character_position():
            assert "position 4" in _error("1 + $")
            assert "position 0" in _error("@")

        def test_unterminated_string():
            assert "position 2" in _error('x "abc')

        def test_malformed_numbers():
            assert "position 0" in _error("1.2.3")
            assert "position 2" in _error("1 5.")
            assert "position 0" in _error(".5")

        def test_bang_alone_is_error():
            assert "position 1" in _error("a!b")
        """,
        solution="""
        _OPERATORS = ["**", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "<", ">", "=", "(", ")", ","]


        def tokenize(source):
            tokens = []
            i, n = 0, len(source)
            while i < n:
                ch = source[i]
                if ch.isspace():
                    i += 1
                elif ch.isdigit():
                    j = i
                    while j < n and source[j].isdigit():
                        j += 1
                    if j < n and source[j] == ".":
                        j += 1
                        if j >= n or not source[j].isdigit():
                            raise ValueError(f"malformed number at position {i}")
                        while j < n and source[j].isdigit():
                            j += 1
                        if j < n and source[j] == ".":
                            raise ValueError(f"malformed number at position {i}")
                    tokens.append(("NUMBER", source[i:j]))
                    i = j
                elif ch.isalpha() or ch == "_":
                    j = i + 1
                    while j < n and (source[j].isalnum() or source[j] == "_"):
                        j += 1
                    tokens.append(("NAME", source[i:j]))
                    i = j
                elif ch == '"':
                    j = source.find('"', i + 1)
                    if j < 0:
                        raise ValueError(f"unterminated string at position {i}")
                    tokens.append(("STRING", source[i:j + 1]))
                    i = j + 1
                else:
                    for op in _OPERATORS:
                        if source.startswith(op, i):
                            tokens.append(("OP", op))
                            i += len(op)
                            break
                    else:
                        raise ValueError(f"unexpected character {ch!r} at position {i}")
            return tokens
        """,
    ),
    make_task(
        "expression_evaluator",
        "hard",
        """
        Write a function `evaluate(expression: str, variables: dict[str, float] | None = None)`
        that evaluates an arithmetic expression WITHOUT using `eval`, `exec` or `compile`.
        Supported: integer and decimal numbers, variable names (letters, digits, underscores; not
        starting with a digit) looked up in `variables`, binary `+ - * / % **`, unary `+` and `-`,
        and parentheses. Precedence, from lowest: `+ -`, then `* / %` (all left-associative), then
        unary `+ -`, then `**` (right-associative, and binding tighter than unary minus on its left,
        so `-2 ** 2 == -4` and `2 ** -1 == 0.5`). Integer literals are Python ints and decimals are
        floats; results follow Python's arithmetic (`7 / 2 == 3.5`, `7 % 3 == 1`).
        Division or modulo by zero raises `ZeroDivisionError`. Any syntax error, unknown character
        or unknown variable raises `ValueError`.
        """,
        tests="""
        from solution import evaluate

        def test_precedence():
            assert evaluate("1 + 2 * 3") == 7
            assert evaluate("(1 + 2) * 3") == 9
            assert evaluate("10 - 4 - 3") == 3
            assert evaluate("2 * 3 % 4") == 2

        def test_division_and_decimals():
            assert evaluate("7 / 2") == 3.5
            assert evaluate("0.5 + 0.25") == 0.75
            assert evaluate("7 % 3") == 1

        def test_power():
            assert evaluate("2 ** 3 ** 2") == 512
            assert evaluate("-2 ** 2") == -4
            assert evaluate("2 ** -1") == 0.5
            assert evaluate("(-2) ** 2") == 4

        def test_unary():
            assert evaluate("--3") == 3
            assert evaluate("-(2 + 3) * +2") == -10

        def test_variables():
            assert evaluate("rate * hours + bonus_1", {"rate": 20, "hours": 8, "bonus_1": 5}) == 165
            assert evaluate("x ** 2 - x", {"x": 3}) == 6

        def test_whitespace():
            assert evaluate("  1+\\t2 \\n") == 3

        def _raises(exc_type, *args):
            try:
                evaluate(*args)
            except exc_type:
                return True
            return False

        def test_zero_division():
            assert _raises(ZeroDivisionError, "1 / 0")
            assert _raises(ZeroDivisionError, "5 % (2 - 2)")

        def test_syntax_errors():
            for bad in ["", "1 +", "(1 + 2", "1 + 2)", "2 3", "* 2", "1 ^ 2", "a b", "1..2", "()"]:
                assert _raises(ValueError, bad), bad

        def test_unknown_variable_and_no_eval():
            assert _raises(ValueError, "y + 1", {"x": 1})
            assert _raises(ValueError, "__import__('os')")
            assert _raises(ValueError, "x.real", {"x": 1})
        """,
        solution="""
        import re

        _TOKEN = re.compile(r"\\s*(?:(\\d+\\.\\d+|\\d+)|([A-Za-z_][A-Za-z0-9_]*)|(\\*\\*|[-+*/%()]))")


        def _tokenize(expression):
            tokens = []
            pos = 0
            expression = expression.rstrip()
            while pos < len(expression):
                match = _TOKEN.match(expression, pos)
                if match is None:
                    raise ValueError(f"unexpected input at position {pos}")
                number, name, op = match.groups()
                if number is not None:
                    tokens.append(("num", float(number) if "." in number else int(number)))
                elif name is not None:
                    tokens.append(("name", name))
                else:
                    tokens.append(("op", op))
                pos = match.end()
            return tokens


        class _Parser:
            def __init__(self, tokens, variables):
                self.tokens = tokens
                self.pos = 0
                self.variables = variables

            def peek(self):
                return self.tokens[self.pos] if self.pos < len(self.tokens) else (None, None)

            def take_op(self, *ops):
                kind, value = self.peek()
                if kind == "op" and value in ops:
                    self.pos += 1
                    return value
                return None

            def expression(self):
                value = self.term()
                while (op := self.take_op("+", "-")) is not None:
                    right = self.term()
                    value = value + right if op == "+" else value - right
                return value

            def term(self):
                value = self.unary()
                while (op := self.take_op("*", "/", "%")) is not None:
                    right = self.unary()
                    if op == "*":
                        value = value * right
                    elif op == "/":
                        value = value / right
                    else:
                        value = value % right
                return value

            def unary(self):
                op = self.take_op("+", "-")
                if op is not None:
                    value = self.unary()
                    return -value if op == "-" else +value
                return self.power()

            def power(self):
                base = self.atom()
                if self.take_op("**") is not None:
                    return base ** self.unary()
                return base

            def atom(self):
                kind, value = self.peek()
                if kind == "num":
                    self.pos += 1
                    return value
                if kind == "name":
                    self.pos += 1
                    if value not in self.variables:
                        raise ValueError(f"unknown variable {value!r}")
                    return self.variables[value]
                if self.take_op("(") is not None:
                    inner = self.expression()
                    if self.take_op(")") is None:
                        raise ValueError("missing ')'")
                    return inner
                raise ValueError(f"unexpected token {value!r}")


        def evaluate(expression, variables=None):
            parser = _Parser(_tokenize(expression), dict(variables or {}))
            value = parser.expression()
            if parser.pos != len(parser.tokens):
                raise ValueError(f"unexpected token {parser.peek()[1]!r}")
            return value
        """,
    ),
    make_task(
        "topological_sort",
        "hard",
        """
        Write a function `topo_sort(dependencies: dict[str, list[str]]) -> list[str]` that orders
        tasks so every task comes after all of its dependencies. `dependencies[t]` lists the tasks
        `t` depends on; a task that only appears as a dependency is a task too. When several tasks
        are ready at once, take the alphabetically smallest first, so the answer is unique. If the
        dependencies contain a cycle, raise `ValueError` whose message names at least one task on
        the cycle.
        """,
        tests="""
        from solution import topo_sort

        def test_chain():
            assert topo_sort({"c": ["b"], "b": ["a"]}) == ["a", "b", "c"]

        def test_alphabetical_ties():
            assert topo_sort({"d": [], "b": [], "a": [], "c": []}) == ["a", "b", "c", "d"]
            assert topo_sort({"z": ["m"], "y": ["m"], "m": []}) == ["m", "y", "z"]

        def test_diamond():
            deps = {"app": ["lib", "util"], "lib": ["core"], "util": ["core"], "core": []}
            assert topo_sort(deps) == ["core", "lib", "util", "app"]

        def test_dependency_only_nodes():
            assert topo_sort({"b": ["a", "c"]}) == ["a", "c", "b"]

        def test_empty():
            assert topo_sort({}) == []

        def test_order_respected_and_ties_smallest_first():
            deps = {"e": ["b"], "a": ["d"], "c": []}
            assert topo_sort(deps) == ["b", "c", "d", "a", "e"]

        def _cycle_message(deps):
            try:
                topo_sort(deps)
            except ValueError as exc:
                return str(exc)
            raise AssertionError("a cycle should raise ValueError")

        def test_cycle():
            message = _cycle_message({"a": ["b"], "b": ["c"], "c": ["a"], "d": []})
            assert any(name in message for name in "abc")

        def test_self_cycle():
            assert "x" in _cycle_message({"x": ["x"]})

        def test_large_chain():
            deps = {f"t{i:05d}": [f"t{i - 1:05d}"] for i in range(1, 20000)}
            order = topo_sort(deps)
            assert order == [f"t{i:05d}" for i in range(20000)]
        """,
        solution="""
        import heapq


        def topo_sort(dependencies):
            nodes = set(dependencies)
            for deps in dependencies.values():
                nodes.update(deps)
            waiting = {node: set() for node in nodes}
            dependents = {node: [] for node in nodes}
            for node, deps in dependencies.items():
                for dep in deps:
                    if dep not in waiting[node]:
                        waiting[node].add(dep)
                        dependents[dep].append(node)
            ready = [node for node in nodes if not waiting[node]]
            heapq.heapify(ready)
            order = []
            while ready:
                node = heapq.heappop(ready)
                order.append(node)
                for nxt in dependents[node]:
                    waiting[nxt].discard(node)
                    if not waiting[nxt]:
                        heapq.heappush(ready, nxt)
            if len(order) != len(nodes):
                stuck = sorted(node for node in nodes if waiting[node])
                raise ValueError(f"dependency cycle among: {', '.join(stuck)}")
            return order
        """,
    ),
    make_task(
        "shortest_path",
        "hard",
        """
        Write a function `shortest_path(graph: dict[str, dict[str, float]], start: str, goal: str)`
        for a directed graph with non-negative edge weights: `graph[u][v]` is the weight of the edge
        u -> v. Return a tuple `(cost, path)` where `path` is the list of nodes from `start` to
        `goal` (both included) of a cheapest path, or `None` if `goal` cannot be reached. A node may
        appear only as a target (it then has no outgoing edges). `shortest_path(g, a, a)` is
        `(0, [a])`. If `start` appears nowhere in the graph (neither as a key nor as a target), raise
        `KeyError`. It must handle graphs with tens of thousands of edges quickly.
        """,
        tests="""
        from solution import shortest_path

        GRAPH = {
            "A": {"B": 4, "C": 1},
            "C": {"B": 2, "D": 7},
            "B": {"D": 1},
            "D": {"E": 3},
            "F": {"A": 1},
        }

        def test_cheapest_not_fewest_edges():
            assert shortest_path(GRAPH, "A", "D") == (4, ["A", "C", "B", "D"])

        def test_to_target_only_node():
            assert shortest_path(GRAPH, "A", "E") == (7, ["A", "C", "B", "D", "E"])

        def test_unreachable():
            assert shortest_path(GRAPH, "A", "F") is None
            assert shortest_path(GRAPH, "E", "A") is None

        def test_same_node():
            assert shortest_path(GRAPH, "B", "B") == (0, ["B"])

        def test_unknown_start():
            try:
                shortest_path(GRAPH, "Z", "A")
            except KeyError:
                return
            raise AssertionError("unknown start should raise KeyError")

        def test_float_weights_and_zero_edges():
            graph = {"s": {"a": 0.5, "b": 0}, "b": {"a": 0.25}, "a": {"t": 1.5}}
            cost, path = shortest_path(graph, "s", "t")
            assert abs(cost - 1.75) < 1e-9 and path == ["s", "b", "a", "t"]

        def test_large_grid_fast():
            import time
            n = 120
            graph = {}
            for r in range(n):
                for c in range(n):
                    edges = {}
                    if r + 1 < n:
                        edges[(r + 1, c)] = 1 + (r * 7 + c * 3) % 5
                    if c + 1 < n:
                        edges[(r, c + 1)] = 1 + (r * 5 + c * 11) % 5
                    graph[(r, c)] = edges
            start = time.process_time()
            cost, path = shortest_path(graph, (0, 0), (n - 1, n - 1))
            assert time.process_time() - start < 3.0, "too slow"
            assert path[0] == (0, 0) and path[-1] == (n - 1, n - 1) and len(path) == 2 * n - 1
            assert cost == sum(graph[u][v] for u, v in zip(path, path[1:]))
            assert cost == 474
        """,
        solution="""
        import heapq
        import itertools


        def shortest_path(graph, start, goal):
            if start not in graph and not any(start in edges for edges in graph.values()):
                raise KeyError(start)
            best = {start: 0}
            previous = {}
            tie = itertools.count()
            queue = [(0, next(tie), start)]
            done = set()
            while queue:
                cost, _, node = heapq.heappop(queue)
                if node in done:
                    continue
                done.add(node)
                if node == goal:
                    path = [node]
                    while path[-1] in previous:
                        path.append(previous[path[-1]])
                    return cost, path[::-1]
                for nxt, weight in graph.get(node, {}).items():
                    new_cost = cost + weight
                    if nxt not in best or new_cost < best[nxt]:
                        best[nxt] = new_cost
                        previous[nxt] = node
                        heapq.heappush(queue, (new_cost, next(tie), nxt))
            return None
        """,
    ),
    make_task(
        "trie",
        "hard",
        """
        Write a class `Trie` storing a set of words:
        - `insert(word: str) -> None` (inserting a word twice stores it once),
        - `contains(word: str) -> bool`: was exactly this word inserted,
        - `starts_with(prefix: str) -> bool`: does any stored word start with `prefix` (the empty
          prefix matches when at least one word is stored),
        - `words_with_prefix(prefix: str) -> list[str]`: all stored words starting with `prefix`,
          in alphabetical order,
        - `remove(word: str) -> bool`: delete the word; return True if it was stored, else False.
          After removal, prefixes that only led to that word no longer match,
        - `__len__()`: the number of stored words.
        The empty string is a valid word.
        """,
        tests="""
        from solution import Trie

        def make(*words):
            trie = Trie()
            for word in words:
                trie.insert(word)
            return trie

        def test_contains_vs_prefix():
            trie = make("car", "cart", "dog")
            assert trie.contains("car") and trie.contains("cart")
            assert not trie.contains("ca")
            assert trie.starts_with("ca") and not trie.starts_with("cat")

        def test_words_with_prefix_sorted():
            trie = make("banana", "band", "ban", "apple", "bandana")
            assert trie.words_with_prefix("ban") == ["ban", "banana", "band", "bandana"]
            assert trie.words_with_prefix("x") == []
            assert trie.words_with_prefix("") == ["apple", "ban", "banana", "band", "bandana"]

        def test_len_and_duplicates():
            trie = make("a", "a", "ab")
            assert len(trie) == 2

        def test_remove():
            trie = make("car", "cart")
            assert trie.remove("cart") is True
            assert not trie.contains("cart")
            assert trie.contains("car")
            assert not trie.starts_with("cart")
            assert trie.remove("cart") is False
            assert trie.remove("ca") is False
            assert len(trie) == 1

        def test_remove_prefix_word_keeps_longer():
            trie = make("car", "cart")
            assert trie.remove("car") is True
            assert trie.contains("cart") and not trie.contains("car")
            assert trie.starts_with("car")

        def test_empty_word_and_empty_trie():
            trie = Trie()
            assert len(trie) == 0 and not trie.starts_with("") and not trie.contains("")
            trie.insert("")
            assert trie.contains("") and trie.starts_with("") and len(trie) == 1
            assert trie.words_with_prefix("") == [""]
        """,
        solution="""
        class _Node:
            __slots__ = ("children", "terminal")

            def __init__(self):
                self.children = {}
                self.terminal = False


        class Trie:
            def __init__(self):
                self._root = _Node()
                self._size = 0

            def _find(self, prefix):
                node = self._root
                for ch in prefix:
                    node = node.children.get(ch)
                    if node is None:
                        return None
                return node

            def insert(self, word):
                node = self._root
                for ch in word:
                    node = node.children.setdefault(ch, _Node())
                if not node.terminal:
                    node.terminal = True
                    self._size += 1

            def contains(self, word):
                node = self._find(word)
                return node is not None and node.terminal

            def starts_with(self, prefix):
                node = self._find(prefix)
                return node is not None and (node.terminal or bool(node.children))

            def words_with_prefix(self, prefix):
                node = self._find(prefix)
                out = []
                stack = [(node, prefix)] if node is not None else []
                while stack:
                    current, text = stack.pop()
                    if current.terminal:
                        out.append(text)
                    for ch, child in current.children.items():
                        stack.append((child, text + ch))
                return sorted(out)

            def remove(self, word):
                path = [self._root]
                for ch in word:
                    nxt = path[-1].children.get(ch)
                    if nxt is None:
                        return False
                    path.append(nxt)
                if not path[-1].terminal:
                    return False
                path[-1].terminal = False
                self._size -= 1
                for i in range(len(word), 0, -1):
                    node = path[i]
                    if node.terminal or node.children:
                        break
                    del path[i - 1].children[word[i - 1]]
                return True

            def __len__(self):
                return self._size
        """,
    ),
]
