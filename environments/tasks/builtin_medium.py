"""Built-in medium tasks: classic algorithms and small data structures."""

from __future__ import annotations

from environments.tasks.builtin_common import make_task
from environments.tasks.task import Task

TASKS: list[Task] = [
    make_task(
        "merge_intervals",
        "medium",
        """
        Write a function `merge_intervals(intervals: list[list[int]]) -> list[list[int]]` that merges
        overlapping closed intervals [start, end] (start <= end). Intervals that touch ([1, 2] and
        [2, 3]) overlap. The input may be unsorted; the result is sorted by start and made of new
        two-element lists. The input is not modified.
        """,
        tests="""
        from solution import merge_intervals

        def test_overlapping():
            assert merge_intervals([[1, 3], [2, 6], [8, 10], [15, 18]]) == [[1, 6], [8, 10], [15, 18]]

        def test_touching():
            assert merge_intervals([[1, 2], [2, 3]]) == [[1, 3]]

        def test_unsorted_and_contained():
            assert merge_intervals([[5, 7], [1, 10], [2, 3]]) == [[1, 10]]

        def test_empty_and_single():
            assert merge_intervals([]) == []
            assert merge_intervals([[4, 4]]) == [[4, 4]]

        def test_disjoint_unsorted():
            assert merge_intervals([[9, 11], [0, 1], [4, 5]]) == [[0, 1], [4, 5], [9, 11]]

        def test_input_not_modified():
            data = [[3, 4], [1, 3]]
            merge_intervals(data)
            assert data == [[3, 4], [1, 3]]

        def test_negative():
            assert merge_intervals([[-5, -1], [-2, 2], [3, 4]]) == [[-5, 2], [3, 4]]
        """,
        solution="""
        def merge_intervals(intervals):
            merged = []
            for start, end in sorted(intervals):
                if merged and start <= merged[-1][1]:
                    merged[-1][1] = max(merged[-1][1], end)
                else:
                    merged.append([start, end])
            return merged
        """,
    ),
    make_task(
        "balanced_brackets",
        "medium",
        """
        Write a function `is_balanced(text: str) -> bool` that tells whether the brackets (), [] and
        {} in `text` are balanced and properly nested. All other characters are ignored.
        """,
        tests="""
        from solution import is_balanced

        def test_balanced():
            assert is_balanced("([]{})") is True
            assert is_balanced("a(b[c]{d}e)f") is True

        def test_wrong_nesting():
            assert is_balanced("([)]") is False

        def test_unclosed_and_extra_close():
            assert is_balanced("((") is False
            assert is_balanced("())") is False
            assert is_balanced("}{") is False

        def test_empty_and_no_brackets():
            assert is_balanced("") is True
            assert is_balanced("hello") is True

        def test_deep():
            assert is_balanced("(" * 5000 + ")" * 5000) is True
            assert is_balanced("(" * 5000 + ")" * 4999) is False
        """,
        solution="""
        def is_balanced(text):
            pairs = {")": "(", "]": "[", "}": "{"}
            stack = []
            for ch in text:
                if ch in "([{":
                    stack.append(ch)
                elif ch in pairs:
                    if not stack or stack.pop() != pairs[ch]:
                        return False
            return not stack
        """,
    ),
    make_task(
        "roman_numerals",
        "medium",
        """
        Write two functions in the same file:
        - `to_roman(n: int) -> str` for 1 <= n <= 3999 using standard subtractive notation
          (4 -> "IV", 1994 -> "MCMXCIV"); raise `ValueError` for other values.
        - `from_roman(s: str) -> int`, the inverse for upper-case numerals; raise `ValueError` for
          an empty string or a string with characters other than I, V, X, L, C, D, M.
        """,
        tests="""
        from solution import from_roman, to_roman

        def test_to_roman_examples():
            assert to_roman(1) == "I"
            assert to_roman(4) == "IV"
            assert to_roman(9) == "IX"
            assert to_roman(58) == "LVIII"
            assert to_roman(1994) == "MCMXCIV"
            assert to_roman(3999) == "MMMCMXCIX"

        def test_from_roman_examples():
            assert from_roman("III") == 3
            assert from_roman("XLII") == 42
            assert from_roman("MCMXCIV") == 1994

        def test_round_trip():
            for n in range(1, 4000):
                assert from_roman(to_roman(n)) == n

        def _raises(fn, arg):
            try:
                fn(arg)
            except ValueError:
                return True
            return False

        def test_to_roman_out_of_range():
            assert _raises(to_roman, 0)
            assert _raises(to_roman, 4000)
            assert _raises(to_roman, -7)

        def test_from_roman_invalid():
            assert _raises(from_roman, "")
            assert _raises(from_roman, "ABC")
            assert _raises(from_roman, "X1")
        """,
        solution="""
        _VALUES = [(1000, "M"), (900, "CM"), (500, "D"), (400, "CD"), (100, "C"), (90, "XC"),
                   (50, "L"), (40, "XL"), (10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I")]
        _DIGITS = {"I": 1, "V": 5, "X": 10, "L": 50, "C": 100, "D": 500, "M": 1000}


        def to_roman(n):
            if not isinstance(n, int) or not 1 <= n <= 3999:
                raise ValueError("n must be in 1..3999")
            out = []
            for value, numeral in _VALUES:
                count, n = divmod(n, value)
                out.append(numeral * count)
            return "".join(out)


        def from_roman(s):
            if not s or any(ch not in _DIGITS for ch in s):
                raise ValueError(f"invalid roman numeral: {s!r}")
            total = 0
            for i, ch in enumerate(s):
                value = _DIGITS[ch]
                if i + 1 < len(s) and _DIGITS[s[i + 1]] > value:
                    total -= value
                else:
                    total += value
            return total
        """,
    ),
    make_task(
        "binary_search_leftmost",
        "medium",
        """
        Write a function `leftmost_index(items: list[int], target: int) -> int` that returns the
        index of the FIRST occurrence of `target` in the sorted (non-decreasing) list `items`, or -1
        if it is absent. It must run in O(log n) time.
        """,
        tests="""
        from solution import leftmost_index

        def test_found():
            assert leftmost_index([1, 3, 5, 7], 5) == 2

        def test_first_of_duplicates():
            assert leftmost_index([1, 2, 2, 2, 3], 2) == 1
            assert leftmost_index([4, 4, 4, 4], 4) == 0

        def test_absent():
            assert leftmost_index([1, 3, 5], 4) == -1
            assert leftmost_index([1, 3, 5], 0) == -1
            assert leftmost_index([1, 3, 5], 9) == -1
            assert leftmost_index([], 1) == -1

        def test_ends():
            assert leftmost_index([1, 2, 3], 1) == 0
            assert leftmost_index([1, 2, 3], 3) == 2

        def test_large_is_fast():
            import time
            data = [i // 3 for i in range(1_500_000)]
            start = time.process_time()
            for target in range(0, 500_000, 250):
                assert leftmost_index(data, target) == target * 3
            assert time.process_time() - start < 1.0, "too slow for O(log n)"
        """,
        solution="""
        def leftmost_index(items, target):
            lo, hi = 0, len(items)
            while lo < hi:
                mid = (lo + hi) // 2
                if items[mid] < target:
                    lo = mid + 1
                else:
                    hi = mid
            return lo if lo < len(items) and items[lo] == target else -1
        """,
    ),
    make_task(
        "spiral_order",
        "medium",
        """
        Write a function `spiral_order(matrix: list[list[int]]) -> list[int]` that returns the
        elements of a rectangular matrix in clockwise spiral order, starting at the top-left corner
        and moving right. An empty matrix (or one with empty rows) gives [].
        """,
        tests="""
        from solution import spiral_order

        def test_square():
            assert spiral_order([[1, 2, 3], [4, 5, 6], [7, 8, 9]]) == [1, 2, 3, 6, 9, 8, 7, 4, 5]

        def test_wide():
            assert spiral_order([[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12]]) == [
                1, 2, 3, 4, 8, 12, 11, 10, 9, 5, 6, 7]

        def test_tall():
            assert spiral_order([[1, 2], [3, 4], [5, 6], [7, 8]]) == [1, 2, 4, 6, 8, 7, 5, 3]

        def test_single_row_and_column():
            assert spiral_order([[1, 2, 3]]) == [1, 2, 3]
            assert spiral_order([[1], [2], [3]]) == [1, 2, 3]

        def test_empty():
            assert spiral_order([]) == []
            assert spiral_order([[]]) == []
        """,
        solution="""
        def spiral_order(matrix):
            out = []
            if not matrix or not matrix[0]:
                return out
            top, bottom, left, right = 0, len(matrix) - 1, 0, len(matrix[0]) - 1
            while top <= bottom and left <= right:
                out.extend(matrix[top][c] for c in range(left, right + 1))
                out.extend(matrix[r][right] for r in range(top + 1, bottom + 1))
                if top < bottom:
                    out.extend(matrix[bottom][c] for c in range(right - 1, left - 1, -1))
                if left < right:
                    out.extend(matrix[r][left] for r in range(bottom - 1, top, -1))
                top, bottom, left, right = top + 1, bottom - 1, left + 1, right - 1
            return out
        """,
    ),
    make_task(
        "group_anagrams",
        "medium",
        """
        Write a function `group_anagrams(words: list[str]) -> list[list[str]]` that groups words that
        are anagrams of each other (same letters, same counts; case-sensitive). Each group is sorted
        alphabetically, and the groups are sorted by their first word. Duplicate words stay in their
        group as many times as they occur.
        """,
        tests="""
        from solution import group_anagrams

        def test_basic():
            assert group_anagrams(["eat", "tea", "tan", "ate", "nat", "bat"]) == [
                ["ate", "eat", "tea"], ["bat"], ["nat", "tan"]]

        def test_empty():
            assert group_anagrams([]) == []

        def test_duplicates_and_empty_string():
            assert group_anagrams(["", "ab", "ba", "ab", ""]) == [["", ""], ["ab", "ab", "ba"]]

        def test_case_sensitive():
            assert group_anagrams(["Ab", "bA", "ab"]) == [["Ab", "bA"], ["ab"]]
        """,
        solution="""
        def group_anagrams(words):
            groups = {}
            for word in words:
                groups.setdefault("".join(sorted(word)), []).append(word)
            return sorted(sorted(group) for group in groups.values())
        """,
    ),
    make_task(
        "parse_duration",
        "medium",
        """
        Write a function `parse_duration(text: str) -> int` that converts a duration such as
        "1h30m", "2d 4h" or "45s" into a number of seconds. Units: d (days), h (hours), m (minutes),
        s (seconds). Each part is a non-negative integer immediately followed by its unit; parts may
        be separated by spaces; units must appear in the order d, h, m, s and at most once each.
        Surrounding whitespace is ignored. Raise `ValueError` for anything else, including an empty
        string, unknown units, repeated or out-of-order units and missing numbers.
        """,
        tests="""
        from solution import parse_duration

        def test_single_units():
            assert parse_duration("45s") == 45
            assert parse_duration("3m") == 180
            assert parse_duration("2h") == 7200
            assert parse_duration("1d") == 86400

        def test_combined():
            assert parse_duration("1h30m") == 5400
            assert parse_duration("2d 4h") == 187200
            assert parse_duration("1d2h3m4s") == 93784
            assert parse_duration("  10m 5s ") == 605

        def test_zero_and_large():
            assert parse_duration("0s") == 0
            assert parse_duration("100h") == 360000

        def test_invalid():
            for bad in ["", "   ", "5", "h", "5x", "1m1h", "1h1h", "-5s", "1.5h", "1 h", "s5"]:
                try:
                    parse_duration(bad)
                except ValueError:
                    continue
                raise AssertionError(f"parse_duration({bad!r}) should raise ValueError")
        """,
        solution="""
        import re

        _PATTERN = re.compile(r"(?:(\\d+)d)? *(?:(\\d+)h)? *(?:(\\d+)m)? *(?:(\\d+)s)?")
        _SECONDS = (86400, 3600, 60, 1)


        def parse_duration(text):
            stripped = text.strip()
            match = _PATTERN.fullmatch(stripped)
            if not stripped or match is None or all(g is None for g in match.groups()):
                raise ValueError(f"invalid duration: {text!r}")
            return sum(int(g) * unit for g, unit in zip(match.groups(), _SECONDS) if g is not None)
        """,
    ),
    make_task(
        "top_k_words",
        "medium",
        """
        Write a function `top_k_words(text: str, k: int) -> list[tuple[str, int]]` that returns the
        `k` most frequent words of `text` as (word, count) pairs. Words are maximal runs of ASCII
        letters and digits, compared in lower case. Order by count, highest first; break ties by the
        word in alphabetical order. If there are fewer than k distinct words, return them all. k <= 0
        gives [].
        """,
        tests="""
        from solution import top_k_words

        def test_basic():
            assert top_k_words("the cat and the hat and the bat", 2) == [("the", 3), ("and", 2)]

        def test_case_and_punctuation():
            assert top_k_words("Go, go! GO? stop.", 5) == [("go", 3), ("stop", 1)]

        def test_ties_alphabetical():
            assert top_k_words("b a c b a c d", 3) == [("a", 2), ("b", 2), ("c", 2)]

        def test_digits_and_unicode_split():
            assert top_k_words("x1 x1 caf\\u00e9", 3) == [("x1", 2), ("caf", 1)]

        def test_k_edge_cases():
            assert top_k_words("a b", 0) == []
            assert top_k_words("", 3) == []
            assert top_k_words("one", 10) == [("one", 1)]
        """,
        solution="""
        import re
        from collections import Counter


        def top_k_words(text, k):
            if k <= 0:
                return []
            counts = Counter(re.findall(r"[a-z0-9]+", text.lower()))
            return sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:k]
        """,
    ),
    make_task(
        "edit_distance",
        "medium",
        """
        Write a function `edit_distance(a: str, b: str) -> int` that returns the Levenshtein
        distance between `a` and `b`: the minimum number of single-character insertions, deletions
        and substitutions that turn `a` into `b`. Strings may be over a thousand characters long, so
        use dynamic programming rather than recursion.
        """,
        tests="""
        from solution import edit_distance

        def test_classic():
            assert edit_distance("kitten", "sitting") == 3
            assert edit_distance("flaw", "lawn") == 2

        def test_empty():
            assert edit_distance("", "") == 0
            assert edit_distance("abc", "") == 3
            assert edit_distance("", "abcd") == 4

        def test_identical_and_symmetric():
            assert edit_distance("same", "same") == 0
            assert edit_distance("abcdef", "azced") == edit_distance("azced", "abcdef") == 3

        def test_long_strings():
            a = "ab" * 300
            b = "ba" * 300
            assert edit_distance(a, b) == 2
            assert edit_distance("a" * 700, "b" * 600) == 700
        """,
        solution="""
        def edit_distance(a, b):
            previous = list(range(len(b) + 1))
            for i, ca in enumerate(a, start=1):
                current = [i]
                for j, cb in enumerate(b, start=1):
                    current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ca != cb)))
                previous = current
            return previous[-1]
        """,
    ),
    make_task(
        "lru_cache",
        "medium",
        """
        Write a class `LRUCache` with:
        - `LRUCache(capacity: int)`; raise `ValueError` if capacity < 1.
        - `get(key) -> value`: the value stored for `key`, or -1 if absent. A successful get marks
          the key as most recently used.
        - `put(key, value) -> None`: insert or update `key`. Updating marks the key as most recently
          used. When inserting would exceed the capacity, first evict the least recently used key.
        - `__len__()`: the number of stored keys.
        Both `get` and `put` must be O(1) on average.
        """,
        tests="""
        from solution import LRUCache

        def test_basic_eviction():
            cache = LRUCache(2)
            cache.put(1, "a")
            cache.put(2, "b")
            assert cache.get(1) == "a"
            cache.put(3, "c")  # evicts 2, the least recently used
            assert cache.get(2) == -1
            assert cache.get(1) == "a"
            assert cache.get(3) == "c"

        def test_update_refreshes():
            cache = LRUCache(2)
            cache.put("x", 1)
            cache.put("y", 2)
            cache.put("x", 10)  # x is now most recent
            cache.put("z", 3)  # evicts y
            assert cache.get("y") == -1
            assert cache.get("x") == 10
            assert len(cache) == 2

        def test_capacity_one():
            cache = LRUCache(1)
            cache.put(1, 1)
            cache.put(2, 2)
            assert cache.get(1) == -1
            assert cache.get(2) == 2

        def test_missing_get_does_not_change_order():
            cache = LRUCache(2)
            cache.put(1, 1)
            cache.put(2, 2)
            assert cache.get(99) == -1
            cache.put(3, 3)
            assert cache.get(1) == -1
            assert len(cache) == 2

        def test_bad_capacity():
            try:
                LRUCache(0)
            except ValueError:
                return
            raise AssertionError("LRUCache(0) should raise ValueError")

        def test_many_operations_fast():
            import time
            cache = LRUCache(1000)
            start = time.process_time()
            for i in range(200_000):
                cache.put(i, i)
                assert cache.get(i) == i
            assert time.process_time() - start < 2.0, "too slow for O(1) get/put"
            assert len(cache) == 1000
            assert cache.get(199_000) == 199_000
            assert cache.get(198_999) == -1
        """,
        solution="""
        from collections import OrderedDict


        class LRUCache:
            def __init__(self, capacity):
                if capacity < 1:
                    raise ValueError("capacity must be >= 1")
                self.capacity = capacity
                self._data = OrderedDict()

            def get(self, key):
                if key not in self._data:
                    return -1
                self._data.move_to_end(key)
                return self._data[key]

            def put(self, key, value):
                if key in self._data:
                    self._data.move_to_end(key)
                elif len(self._data) >= self.capacity:
                    self._data.popitem(last=False)
                self._data[key] = value

            def __len__(self):
                return len(self._data)
        """,
    ),
]
