import re

_TOKEN = re.compile(r"\s*(?:(\d+\.\d+|\d+)|([A-Za-z_][A-Za-z0-9_]*)|(\*\*|[-+*/%()]))")


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
