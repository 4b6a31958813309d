"""The grid files' expression language: arithmetic on names, nothing else."""

from __future__ import annotations

import pytest

from controller.grid.expr import ExpressionError, compile_expression, evaluate


@pytest.mark.parametrize(
    ("source", "names", "value"),
    [
        ("320000 // (peers * batch_size)", {"peers": 2, "batch_size": 64}, 2500),
        ("16 // peers", {"peers": 16}, 1),
        ("10000 // peers if peers > 2 else 5000", {"peers": 2}, 5000),
        ("max(1, total // peers)", {"total": 8, "peers": 16}, 1),
        (
            "strategy == 'baseline' and batch_size in [32, 64]",
            {"strategy": "baseline", "batch_size": 64},
            True,
        ),
        ("not local_updates or repeat == 2", {"local_updates": True, "repeat": 1}, False),
        ("1 < peers <= 8", {"peers": 8}, True),
    ],
)
def test_evaluates(source, names, value):
    assert evaluate(compile_expression(source), names) == value


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("__import__('os').system('true')", "may be called"),
        ("peers.__class__", "Attribute is not allowed"),
        ("(lambda: 1)()", "may be called"),
        ("lambda: 1", "Lambda is not allowed"),
        ("[x for x in peers]", "not allowed"),
        ("peers[0]", "Subscript is not allowed"),
        ("open('/etc/passwd')", "may be called"),
        ("peers +", "cannot parse"),
    ],
)
def test_refuses(source, message):
    with pytest.raises(ExpressionError, match=message):
        compile_expression(source)


def test_unknown_names_and_failures():
    with pytest.raises(ExpressionError, match="unknown name bs"):
        evaluate(compile_expression("bs * 2"), {"peers": 1})
    with pytest.raises(ExpressionError, match="by zero"):
        evaluate(compile_expression("10 // peers"), {"peers": 0})
