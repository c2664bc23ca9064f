"""Built-in easy tasks: short string and list functions."""

from __future__ import annotations

from environments.tasks.builtin_common import make_task
from environments.tasks.task import Task

TASKS: list[Task] = [
    make_task(
        "reverse_words",
        "easy",
        """
        Write a function `reverse_words(text: str) -> str` that returns the words of `text` in reverse
        order, separated by single spaces. Words are separated by any run of whitespace; leading and
        trailing whitespace is ignored. An input with no words gives "".
        """,
        tests="""
        from solution import reverse_words

        def test_basic():
            assert reverse_words("hello world") == "world hello"

        def test_whitespace_runs():
            assert reverse_words("  the   quick\\tbrown\\nfox  ") == "fox brown quick the"

        def test_single_word():
            assert reverse_words("alone") == "alone"

        def test_empty():
            assert reverse_words("") == ""
            assert reverse_words("   ") == ""

        def test_punctuation_kept():
            assert reverse_words("Hi, there!") == "there! Hi,"
        """,
        solution="""
        def reverse_words(text):
            return " ".join(reversed(text.split()))
        """,
    ),
    make_task(
        "is_palindrome",
        "easy",
        """
        Write a function `is_palindrome(text: str) -> bool` that tells whether `text` reads the same
        forwards and backwards when only letters and digits are considered, ignoring case. The empty
        string (or one with no letters or digits) is a palindrome.
        """,
        tests="""
        from solution import is_palindrome

        def test_simple():
            assert is_palindrome("racecar") is True
            assert is_palindrome("python") is False

        def test_ignores_case_and_punctuation():
            assert is_palindrome("A man, a plan, a canal: Panama!") is True
            assert is_palindrome("No 'x' in Nixon") is True

        def test_digits():
            assert is_palindrome("12321") is True
            assert is_palindrome("1231") is False

        def test_empty_and_symbols():
            assert is_palindrome("") is True
            assert is_palindrome("?!.") is True

        def test_near_miss():
            assert is_palindrome("ab") is False
            assert is_palindrome("abca") is False
        """,
        solution="""
        def is_palindrome(text):
            chars = [c.lower() for c in text if c.isalnum()]
            return chars == chars[::-1]
        """,
    ),
    make_task(
        "fizzbuzz",
        "easy",
        """
        Write a function `fizzbuzz(n: int) -> list[str]` that returns the FizzBuzz sequence for
        1..n as strings: "Fizz" for multiples of 3, "Buzz" for multiples of 5, "FizzBuzz" for
        multiples of both, and the number itself otherwise. For n <= 0 return an empty list.
        """,
        tests="""
        from solution import fizzbuzz

        def test_first_fifteen():
            assert fizzbuzz(15) == ["1", "2", "Fizz", "4", "Buzz", "Fizz", "7", "8", "Fizz", "Buzz",
                                    "11", "Fizz", "13", "14", "FizzBuzz"]

        def test_small():
            assert fizzbuzz(1) == ["1"]
            assert fizzbuzz(3) == ["1", "2", "Fizz"]

        def test_non_positive():
            assert fizzbuzz(0) == []
            assert fizzbuzz(-4) == []

        def test_length_and_tail():
            out = fizzbuzz(100)
            assert len(out) == 100
            assert out[-1] == "Buzz" and out[89] == "FizzBuzz" and out[97] == "98"
        """,
        solution="""
        def fizzbuzz(n):
            out = []
            for i in range(1, n + 1):
                word = ("Fizz" if i % 3 == 0 else "") + ("Buzz" if i % 5 == 0 else "")
                out.append(word or str(i))
            return out
        """,
    ),
    make_task(
        "flatten",
        "easy",
        """
        Write a function `flatten(nested: list) -> list` that flattens arbitrarily nested lists into
        one flat list, keeping the left-to-right order. Only `list` objects are flattened; any other
        value (including tuples and strings) is kept as a single item. The input is not modified.
        Lists may be nested thousands of levels deep.
        """,
        tests="""
        from solution import flatten

        def test_flat_stays_flat():
            assert flatten([1, 2, 3]) == [1, 2, 3]

        def test_deep():
            assert flatten([1, [2, [3, [4, [5]]]], 6]) == [1, 2, 3, 4, 5, 6]

        def test_empty_lists():
            assert flatten([]) == []
            assert flatten([[], [[]], [[], [7]]]) == [7]

        def test_other_values_kept():
            assert flatten([(1, 2), "ab", [None, [{"k": 1}]]]) == [(1, 2), "ab", None, {"k": 1}]

        def test_input_not_modified():
            data = [1, [2, [3]]]
            flatten(data)
            assert data == [1, [2, [3]]]

        def test_very_deep():
            data = [0]
            for i in range(1, 3000):
                data = [data, i]
            assert flatten(data) == list(range(3000))
        """,
        solution="""
        def flatten(nested):
            out = []
            stack = [iter(nested)]
            while stack:
                for item in stack[-1]:
                    if isinstance(item, list):
                        stack.append(iter(item))
                        break
                    out.append(item)
                else:
                    stack.pop()
            return out
        """,
    ),
    make_task(
        "chunk_list",
        "easy",
        """
        Write a function `chunk(items: list, size: int) -> list[list]` that splits `items` into
        consecutive chunks of length `size`; the last chunk may be shorter. An empty list gives [].
        If `size` is less than 1, raise `ValueError`.
        """,
        tests="""
        from solution import chunk

        def test_even():
            assert chunk([1, 2, 3, 4], 2) == [[1, 2], [3, 4]]

        def test_remainder():
            assert chunk([1, 2, 3, 4, 5], 2) == [[1, 2], [3, 4], [5]]

        def test_size_larger_than_list():
            assert chunk([1, 2], 5) == [[1, 2]]

        def test_empty():
            assert chunk([], 3) == []

        def test_bad_size():
            for bad in (0, -1):
                try:
                    chunk([1, 2], bad)
                except ValueError:
                    pass
                else:
                    raise AssertionError(f"chunk(..., {bad}) should raise ValueError")
        """,
        solution="""
        def chunk(items, size):
            if size < 1:
                raise ValueError("size must be >= 1")
            return [list(items[i:i + size]) for i in range(0, len(items), size)]
        """,
    ),
    make_task(
        "run_length",
        "easy",
        """
        Write two functions in the same file:
        - `rle_encode(text: str) -> str`: run-length encode `text`, writing each run as its length
          followed by the character, e.g. "aaabcc" -> "3a1b2c". The empty string encodes to "".
        - `rle_decode(encoded: str) -> str`: the inverse. Counts may have several digits
          ("12x" -> "xxxxxxxxxxxx").
        The input to `rle_encode` never contains digits.
        """,
        tests="""
        from solution import rle_decode, rle_encode

        def test_encode():
            assert rle_encode("aaabcc") == "3a1b2c"
            assert rle_encode("abc") == "1a1b1c"

        def test_encode_empty():
            assert rle_encode("") == ""

        def test_long_runs():
            assert rle_encode("x" * 12 + "y") == "12x1y"
            assert rle_decode("12x1y") == "x" * 12 + "y"

        def test_decode():
            assert rle_decode("3a1b2c") == "aaabcc"
            assert rle_decode("") == ""

        def test_round_trip_with_spaces_and_case():
            for text in ["aAaa  bb", "  ", "zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz!", "q"]:
                assert rle_decode(rle_encode(text)) == text
        """,
        solution="""
        def rle_encode(text):
            out = []
            i = 0
            while i < len(text):
                j = i
                while j < len(text) and text[j] == text[i]:
                    j += 1
                out.append(f"{j - i}{text[i]}")
                i = j
            return "".join(out)


        def rle_decode(encoded):
            out = []
            count = ""
            for ch in encoded:
                if ch.isdigit():
                    count += ch
                else:
                    out.append(ch * int(count))
                    count = ""
            return "".join(out)
        """,
    ),
    make_task(
        "dedupe",
        "easy",
        """
        Write a function `dedupe(items: list) -> list` that returns the items with duplicates removed,
        keeping the first occurrence of each and the original order. Items are hashable.
        """,
        tests="""
        from solution import dedupe

        def test_order_kept():
            assert dedupe([3, 1, 3, 2, 1]) == [3, 1, 2]

        def test_strings():
            assert dedupe(["b", "a", "b", "c", "a"]) == ["b", "a", "c"]

        def test_empty_and_unique():
            assert dedupe([]) == []
            assert dedupe([1, 2, 3]) == [1, 2, 3]

        def test_mixed_types():
            assert dedupe([1, "1", (1,), 1, "1"]) == [1, "1", (1,)]

        def test_large():
            data = [i % 100 for i in range(100000)]
            assert dedupe(data) == list(range(100))
        """,
        solution="""
        def dedupe(items):
            seen = set()
            out = []
            for item in items:
                if item not in seen:
                    seen.add(item)
                    out.append(item)
            return out
        """,
    ),
    make_task(
        "snake_to_camel",
        "easy",
        """
        Write a function `snake_to_camel(name: str) -> str` that converts a snake_case identifier to
        lowerCamelCase. Split on underscores and ignore empty parts (so leading, trailing and repeated
        underscores vanish). The first part is lowercased; every later part gets its first letter
        uppercased and the rest lowercased. No parts gives "".
        Examples: "hello_world" -> "helloWorld", "HTTP_response_code" -> "httpResponseCode".
        """,
        tests="""
        from solution import snake_to_camel

        def test_basic():
            assert snake_to_camel("hello_world") == "helloWorld"

        def test_case_normalised():
            assert snake_to_camel("HTTP_response_code") == "httpResponseCode"

        def test_extra_underscores():
            assert snake_to_camel("__private__name_") == "privateName"

        def test_single_and_empty():
            assert snake_to_camel("word") == "word"
            assert snake_to_camel("") == ""
            assert snake_to_camel("___") == ""

        def test_digits():
            assert snake_to_camel("version_2_beta") == "version2Beta"
        """,
        solution="""
        def snake_to_camel(name):
            parts = [p for p in name.split("_") if p]
            if not parts:
                return ""
            return parts[0].lower() + "".join(p[:1].upper() + p[1:].lower() for p in parts[1:])
        """,
    ),
    make_task(
        "second_largest",
        "easy",
        """
        Write a function `second_largest(numbers: list[int]) -> int | None` that returns the second
        largest DISTINCT value in `numbers`, or None when there are fewer than two distinct values.
        """,
        tests="""
        from solution import second_largest

        def test_basic():
            assert second_largest([4, 1, 7, 3]) == 4

        def test_duplicates_of_max():
            assert second_largest([9, 9, 9, 2]) == 2

        def test_not_enough_distinct():
            assert second_largest([]) is None
            assert second_largest([5]) is None
            assert second_largest([5, 5, 5]) is None

        def test_negative():
            assert second_largest([-3, -1, -2]) == -2

        def test_unsorted_large():
            data = list(range(1000, 0, -1)) * 2
            assert second_largest(data) == 999
        """,
        solution="""
        def second_largest(numbers):
            distinct = sorted(set(numbers))
            return distinct[-2] if len(distinct) >= 2 else None
        """,
    ),
    make_task(
        "count_vowels",
        "easy",
        """
        Write a function `count_vowels(text: str) -> dict[str, int]` that counts the vowels a, e, i,
        o, u in `text`, case-insensitively. Return a dict with exactly the five keys "a", "e", "i",
        "o", "u" (counts may be 0). "y" is not a vowel; accented letters are not counted.
        """,
        tests="""
        from solution import count_vowels

        def test_basic():
            assert count_vowels("Education") == {"a": 1, "e": 1, "i": 1, "o": 1, "u": 1}

        def test_case_insensitive():
            assert count_vowels("AaAa EE") == {"a": 4, "e": 2, "i": 0, "o": 0, "u": 0}

        def test_empty_has_all_keys():
            assert count_vowels("") == {"a": 0, "e": 0, "i": 0, "o": 0, "u": 0}

        def test_y_and_accents_ignored():
            assert count_vowels("rhythm caf\\u00e9") == {"a": 1, "e": 0, "i": 0, "o": 0, "u": 0}
        """,
        solution="""
        def count_vowels(text):
            counts = {v: 0 for v in "aeiou"}
            for ch in text.lower():
                if ch in counts:
                    counts[ch] += 1
            return counts
        """,
    ),
]
