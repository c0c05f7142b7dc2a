"""A safe calculator: arithmetic from untrusted text, without ``eval``.

A language model predicts the digits of ``37 * 91`` like any other tokens, so it can get them
wrong; a calculator tool computes them. But the expression arrives as text the model wrote, and
text in a model's context can come from anyone (prompt injection), so ``eval`` is out of the
question: ``eval("__import__('os').system(...)")`` runs whatever it is given.

Instead we let Python's own parser turn the text into a syntax tree (``ast.parse`` only parses,
it never runs anything) and walk that tree ourselves, allowing a short list of node types:
numbers, ``+ - * / // % **``, unary ``+ -``, parentheses, the constants ``pi`` and ``e`` and the
functions ``abs``, ``round`` and ``sqrt``. Anything else (names, attributes, calls to other
functions, lambdas, strings, comparisons) is refused with a message that says what was refused.

Arithmetic on Python integers is exact and unbounded, which is itself a risk: ``9**9**9`` has
369 million digits and would take minutes and gigabytes to compute. So every number is bounded
(``MAX_MAGNITUDE``), powers are checked *before* they are computed, and the text has a length
limit. Within those limits the result equals what Python computes for the same expression.
"""
from __future__ import annotations

import ast
import math
import operator

MAX_EXPRESSION_LENGTH = 300
MAX_DIGITS = 100  # results and intermediate numbers stay below 10 ** MAX_DIGITS
MAX_MAGNITUDE = 10**MAX_DIGITS
MAX_ROUND_DIGITS = 100

ALLOWED = "numbers, + - * / // % **, parentheses, pi, e, abs(x), round(x) or round(x, digits), sqrt(x)"

BINARY_OPERATORS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
UNARY_OPERATORS = {ast.UAdd: operator.pos, ast.USub: operator.neg}
CONSTANTS = {"pi": math.pi, "e": math.e}


class CalculatorError(ValueError):
    """The expression is not allowed arithmetic, or its result is out of bounds."""


def _round(x: int | float, digits: int | None = None) -> int | float:
    # round(5, -10**9) would build 10**(10**9) internally: bound the digits first.
    if digits is not None and (not isinstance(digits, int) or abs(digits) > MAX_ROUND_DIGITS):
        limit = MAX_ROUND_DIGITS
        raise CalculatorError(f"round(x, digits) needs a whole number of digits between -{limit} and {limit}")
    return round(x, digits)


def _sqrt(x: int | float) -> float:
    if x < 0:
        raise CalculatorError(f"sqrt of a negative number ({x}) is not a real number")
    return math.sqrt(x)


FUNCTIONS = {"abs": abs, "round": _round, "sqrt": _sqrt}


def calculate(expression: str) -> int | float:
    """Evaluate ``expression`` as Python arithmetic and return the number, or raise ``CalculatorError``."""
    if not isinstance(expression, str):
        raise CalculatorError(f"the expression must be text, got {type(expression).__name__}")
    if len(expression) > MAX_EXPRESSION_LENGTH:
        raise CalculatorError(f"the expression is {len(expression)} characters long; the limit is {MAX_EXPRESSION_LENGTH}")
    if not expression.strip():
        raise CalculatorError(f"the expression is empty; write arithmetic such as 2 * (3 + 4) using {ALLOWED}")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as exc:
        raise CalculatorError(f"{expression!r} is not a valid expression ({exc.msg})") from None
    return _Evaluator(expression.strip()).visit(tree.body)


class _Evaluator:
    """Walks the syntax tree, computing allowed nodes and refusing every other kind."""

    def __init__(self, source: str):
        self.source = source

    def visit(self, node: ast.AST) -> int | float:
        if isinstance(node, ast.Constant):
            return self.number(node)
        if isinstance(node, ast.BinOp) and type(node.op) in BINARY_OPERATORS:
            return self.binary(node)
        if isinstance(node, ast.UnaryOp) and type(node.op) in UNARY_OPERATORS:
            return self.bounded(UNARY_OPERATORS[type(node.op)](self.visit(node.operand)), node)
        if isinstance(node, ast.Name) and node.id in CONSTANTS:
            return CONSTANTS[node.id]
        if isinstance(node, ast.Call):
            return self.call(node)
        raise self.refuse(node)

    def number(self, node: ast.Constant) -> int | float:
        # bool is a subclass of int, and complex is a number too: neither is arithmetic here.
        if type(node.value) not in (int, float):
            raise self.refuse(node, f"{type(node.value).__name__} values are not numbers")
        return self.bounded(node.value, node)

    def binary(self, node: ast.BinOp) -> int | float:
        left, right = self.visit(node.left), self.visit(node.right)
        if isinstance(node.op, ast.Pow):
            check_power(left, right)
        try:
            result = BINARY_OPERATORS[type(node.op)](left, right)
        except ZeroDivisionError:
            raise CalculatorError(f"division by zero in {self.segment(node)!r}") from None
        except OverflowError:
            raise CalculatorError(f"{self.segment(node)!r} is too large (the limit is 1e{MAX_DIGITS})") from None
        if isinstance(result, complex):  # (-8) ** 0.5 is a complex number in Python
            raise CalculatorError(f"{self.segment(node)!r} is not a real number")
        return self.bounded(result, node)

    def call(self, node: ast.Call) -> int | float:
        name = node.func.id if isinstance(node.func, ast.Name) else None
        if name not in FUNCTIONS:
            raise self.refuse(node, f"the only functions are {', '.join(FUNCTIONS)}")
        if node.keywords or any(isinstance(arg, ast.Starred) for arg in node.args):
            raise self.refuse(node, "pass function arguments by position")
        arguments = [self.visit(arg) for arg in node.args]
        try:
            return self.bounded(FUNCTIONS[name](*arguments), node)
        except TypeError:
            raise CalculatorError(f"{self.segment(node)!r} has the wrong number of arguments") from None

    def bounded(self, value: int | float, node: ast.AST) -> int | float:
        """Return ``value`` if its size is within ``MAX_MAGNITUDE``, else refuse (this also catches inf and nan)."""
        if not abs(value) <= MAX_MAGNITUDE:
            raise CalculatorError(f"{self.segment(node)!r} is too large (the limit is 1e{MAX_DIGITS})")
        return value

    def segment(self, node: ast.AST) -> str:
        return ast.get_source_segment(self.source, node) or type(node).__name__

    def refuse(self, node: ast.AST, reason: str | None = None) -> CalculatorError:
        if reason is None:
            kind = type(getattr(node, "op", node))  # for operators, the operator (BitXor) says more than BinOp
            reason = REASONS.get(kind, f"{kind.__name__} is not arithmetic")
        return CalculatorError(f"not allowed: {self.segment(node)!r} ({reason}). The calculator accepts {ALLOWED}.")


REASONS = {
    ast.Name: "unknown name",
    ast.Attribute: "attribute access",
    ast.Lambda: "lambda functions",
    ast.BitXor: "^ is bitwise XOR in Python; write ** for a power",
}


def check_power(base: int | float, exponent: int | float) -> None:
    """Refuse ``base ** exponent`` before computing it if the result would pass ``MAX_MAGNITUDE``.

    The result has about ``exponent * log10(|base|)`` decimal digits, which we can afford to
    work out even when the power itself (``9 ** 387420489``) would take minutes to compute.
    """
    if base == 0:
        return  # 0 ** n is 0, 1, or a division by zero that the operator itself reports
    digits = exponent * math.log10(abs(base))
    if digits > MAX_DIGITS:
        raise CalculatorError(f"{base} ** {exponent} is too large (about 1e{digits:.0f}; the limit is 1e{MAX_DIGITS})")
