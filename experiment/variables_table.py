"""The experiment's variables as docs/architecture.md's table, generated from their one definition
(experiment/variables.py): ``python -m experiment.variables_table --write-docs`` rewrites it, and a test fails
when it is stale."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from experiment.variables import ALL_TRAINERS, DATA_PARALLEL, DEEPSPEED, DILOCO, HIVEMIND, VARIABLES, Variable

DOCS = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"
_SECTION = re.compile(r"(<!-- variables:start.*?-->\n).*?(<!-- variables:end -->)", re.DOTALL)


def _default_text(variable: Variable) -> str:
    if variable.default is None:
        return "–"
    if isinstance(variable.default, bool):
        return str(variable.default).lower()
    return str(variable.default)


def markdown_table() -> str:
    """The variables as a Markdown table, in definition order."""
    lines = [
        "| variable | kind | default | trainer flag | defines the setting | meaning |",
        "|---|---|---|---|---|---|",
    ]
    for variable in VARIABLES:
        names = {
            ALL_TRAINERS: "every strategy",
            HIVEMIND: "Hivemind",
            DATA_PARALLEL: "DDP/ZeRO/FSDP/DeepSpeed/DiLoCo",
            DEEPSPEED: "DeepSpeed",
            DILOCO: "DiLoCo",
        }
        flag = ", ".join(names[trainer] for trainer in variable.trainers) or "–"
        grid = " (set by `trainer grid`)" if variable.set_by_grid else ""
        kind = variable.kind_text()
        lines.append(
            f"| `{variable.name}` | {kind} | {_default_text(variable)} | {flag} | "
            f"{'yes' if variable.defines_setting else 'no'} | {variable.meaning}{grid} |"
        )
    return "\n".join(lines) + "\n"


def docs_with_table(text: str) -> str:
    """``text`` (docs/architecture.md) with the generated table between its markers."""
    if not _SECTION.search(text):
        raise ValueError(
            "docs/architecture.md has no <!-- variables:start --> ... <!-- variables:end --> section"
        )
    return _SECTION.sub(lambda match: match[1] + markdown_table() + match[2], text)


def main() -> None:
    parser = argparse.ArgumentParser(description="The experiment's variables as a table.")
    parser.add_argument("--write-docs", action="store_true", help="rewrite the table in docs/architecture.md")
    args = parser.parse_args()
    if args.write_docs:
        DOCS.write_text(docs_with_table(DOCS.read_text()))
    else:
        print(markdown_table(), end="")


if __name__ == "__main__":
    main()
