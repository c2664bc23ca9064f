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
            tokens.append(("STRING", source[i : j + 1]))
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
