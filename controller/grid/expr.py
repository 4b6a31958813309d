"""A small, safe expression language for grid files: derived values and `--only` filters.

Expressions are Python syntax restricted to literals, names, arithmetic (``+ - * / // % **``),
comparisons, ``and``/``or``/``not``, ``x if cond else y``, list/tuple literals (for ``in``) and the functions
``min``, ``max``, ``int``, ``float``, ``round`` and ``abs``. Names come from a mapping given by the caller
(constants, the run's settings, ``repeat``); anything else is refused when the expression is parsed.

>>> rule = compile_expression("total // (peers * batch_size)")
>>> evaluate(rule, {"total": 320000, "peers": 2, "batch_size": 32})
5000
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

_BINARY: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type, Callable[[Any], Any]] = {
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
    ast.Not: operator.not_,
}
_COMPARE: dict[type, Callable[[Any, Any], Any]] = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b,
}
FUNCTIONS: dict[str, Callable[..., Any]] = {
    "min": min,
    "max": max,
    "int": int,
    "float": float,
    "round": round,
    "abs": abs,
}
_CONSTANT_TYPES = (int, float, str, bool, type(None))


class ExpressionError(ValueError):
    """An expression that cannot be parsed, uses something not allowed, or fails to evaluate."""


@dataclass(frozen=True)
class Expression:
    """A parsed expression and the names it reads.

    :param source: the text as written
    :param names: every variable name the expression reads (functions excluded)
    """

    source: str
    tree: ast.Expression
    names: frozenset[str]


def compile_expression(source: str) -> Expression:
    """Parse `source` and check that it only uses the allowed constructs; raise ExpressionError otherwise."""
    try:
        tree = ast.parse(source.strip(), mode="eval")
    except SyntaxError as error:
        raise ExpressionError(f"cannot parse expression {source!r}: {error.msg}") from None
    names: set[str] = set()
    for node in ast.walk(tree):
        _check_node(node, source)
        if isinstance(node, ast.Name) and node.id not in FUNCTIONS:
            names.add(node.id)
    return Expression(source=source, tree=tree, names=frozenset(names))


def _check_node(node: ast.AST, source: str) -> None:
    allowed = (
        ast.Expression,
        ast.BinOp,
        ast.UnaryOp,
        ast.BoolOp,
        ast.Compare,
        ast.IfExp,
        ast.Name,
        ast.Load,
        ast.Constant,
        ast.Call,
        ast.List,
        ast.Tuple,
        ast.And,
        ast.Or,
        *_BINARY,
        *_UNARY,
        *_COMPARE,
    )
    if not isinstance(node, allowed):
        raise ExpressionError(f"{type(node).__name__} is not allowed in expression {source!r}")
    if isinstance(node, ast.Constant) and not isinstance(node.value, _CONSTANT_TYPES):
        raise ExpressionError(f"constant {node.value!r} is not allowed in expression {source!r}")
    if isinstance(node, ast.Call):
        if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS:
            raise ExpressionError(
                f"only the functions {', '.join(sorted(FUNCTIONS))} may be called in expression {source!r}"
            )
        if node.keywords:
            raise ExpressionError(f"keyword arguments are not allowed in expression {source!r}")


def evaluate(expression: Expression, names: Mapping[str, Any]) -> Any:
    """Evaluate a compiled expression with the given variables; raise ExpressionError on unknown names."""
    missing = sorted(expression.names - set(names))
    if missing:
        raise ExpressionError(f"unknown name {', '.join(missing)} in expression {expression.source!r}")
    try:
        return _eval(expression.tree.body, names)
    except ExpressionError:
        raise
    except (ArithmeticError, TypeError, ValueError) as error:
        raise ExpressionError(f"expression {expression.source!r} failed: {error}") from None


def _eval(node: ast.AST, names: Mapping[str, Any]) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        return names[node.id]
    if isinstance(node, ast.BinOp):
        return _BINARY[type(node.op)](_eval(node.left, names), _eval(node.right, names))
    if isinstance(node, ast.UnaryOp):
        return _UNARY[type(node.op)](_eval(node.operand, names))
    if isinstance(node, ast.BoolOp):
        if isinstance(node.op, ast.And):
            return all(_eval(value, names) for value in node.values)
        return any(_eval(value, names) for value in node.values)
    if isinstance(node, ast.Compare):
        left = _eval(node.left, names)
        for op, comparator in zip(node.ops, node.comparators, strict=True):
            right = _eval(comparator, names)
            if not _COMPARE[type(op)](left, right):
                return False
            left = right
        return True
    if isinstance(node, ast.IfExp):
        return _eval(node.body, names) if _eval(node.test, names) else _eval(node.orelse, names)
    if isinstance(node, ast.Call):
        return FUNCTIONS[node.func.id](*(_eval(arg, names) for arg in node.args))  # type: ignore[attr-defined]
    if isinstance(node, ast.List | ast.Tuple):
        return [_eval(element, names) for element in node.elts]
    raise ExpressionError(f"{type(node).__name__} is not allowed")  # unreachable after _check_node
