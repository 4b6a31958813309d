"""The ``trainer`` command: ``run`` (one peer or baseline), ``netprobe`` (link bandwidth between two hosts),
``cpuprobe`` (a host's CPU under full load), ``dht`` (a DHT-only bootstrap node), ``imagefolder`` (a JPEG
dataset to load), ``identity`` (a Hivemind peer ID fixed ahead of its start); and the controller's ``grid``
(many experiments) and ``report`` (tables, plots), which the controller package adds as plugin commands
(``PLUGIN_GROUP``)."""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import importlib.util
import logging
import multiprocessing
import os
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import NoReturn

from experiment.results import is_complete
from trainer.config import ConfigError, add_arguments, config_from_namespace

# Imported only when their subcommand runs: each provides configure_parser(parser) and main(args) -> int.
SUBCOMMAND_MODULES = {
    "netprobe": ("trainer.netprobe", "measure the TCP throughput between two hosts"),
    "cpuprobe": ("trainer.cpuprobe", "measure the CPU this host receives under full load"),
    "dht": (
        "trainer.strategies.hivemind.dht_node",
        "serve a DHT-only Hivemind node (a run's bootstrap that does not train)",
    ),
    "imagefolder": ("trainer.imagefolder", "write a JPEG image-folder dataset (data loading experiments)"),
    "identity": ("trainer.identity", "this host's Hivemind identity: create the key once, print its peer ID"),
    "calibrate": (
        "trainer.calibrate",
        "samples/s per process at 1, 2, 4, ... threads (compute calibration)",
    ),
}
#: commands other packages add to ``trainer`` (the controller's grid and report, pyproject.toml); each module
#: has the same two functions and a one-line ``HELP``
PLUGIN_GROUP = "testbed.commands"


def _plugins() -> dict[str, str]:
    """Command name: module, of every plugin command whose package is installed (a VM's wheel carries the
    trainer and the shared package only, not the controller: scripts/build-trainer-wheel.sh)."""
    return {
        entry.name: entry.value
        for entry in importlib.metadata.entry_points(group=PLUGIN_GROUP)
        if importlib.util.find_spec(entry.value.split(".")[0]) is not None
    }


class OneLineParser(argparse.ArgumentParser):
    """Reports bad flags as one line ``trainer: error: …`` with exit status 2, like every other bad input."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"trainer: error: {message}\n")


def build_parser(arguments: Sequence[str] = ()) -> argparse.ArgumentParser:
    """The full parser; a grid/report module is imported only when ``arguments`` name its subcommand."""
    parser = OneLineParser(
        prog="trainer",
        description="run: train one peer or a baseline; grid: many experiments; report: tables, plots; "
        "netprobe: link bandwidth; cpuprobe: CPU under load; dht: a bootstrap node; "
        "calibrate: samples/s against threads",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineParser)
    commands.required = True
    run_parser = commands.add_parser(
        "run",
        help="train as a baseline or as one Hivemind peer",
        description="Train an image classifier alone (baseline) or as one peer of a Hivemind run. Settings "
        "come from flags or a YAML/JSON --config file using the same names with underscores; flags win.",
    )
    add_arguments(run_parser)
    requested = next((a for a in arguments if not a.startswith("-")), None)
    subcommands = dict(SUBCOMMAND_MODULES)
    if requested != "run":  # a plugin's help line costs an import: only where it may be shown
        for name, module_name in _plugins().items():
            shown = requested not in SUBCOMMAND_MODULES
            subcommands[name] = (module_name, _load(module_name).HELP if shown else None)
    for name, (module_name, help_text) in subcommands.items():
        sub = commands.add_parser(name, help=help_text)
        sub.set_defaults(_module=module_name)
        if requested == name:
            _load(module_name).configure_parser(sub)
    return parser


def _load(module_name: str) -> ModuleType:
    return importlib.import_module(module_name)


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    args = build_parser(arguments).parse_args(arguments)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if args.command == "run":
        try:
            config = config_from_namespace(args)
        except ConfigError as exc:
            print(f"trainer: error: {exc}", file=sys.stderr, flush=True)
            return 2
        if is_complete(config.results_dir) and not config.overwrite:  # refuse before the slow torch import
            message = "results dir already holds a finished run, pass --overwrite to replace it"
            print(
                f"trainer: error: {message} (results_dir={config.results_dir})", file=sys.stderr, flush=True
            )
            return 2
        from trainer.runner import run

        exit_code = run(config)
        if argv is None:  # the process's own run (the `trainer` command), not a caller's
            _end_process(exit_code)
        return exit_code
    return int(_load(args._module).main(args) or 0)


def _end_process(exit_code: int) -> NoReturn:
    """Ends the trainer's process once its run is over and its files are written and closed: the logs and
    the standard streams flushed, any child process still there (a data loader's workers) terminated, then
    ``os._exit`` without the interpreter's teardown. That teardown freed torch's and Hivemind's objects in C
    for 1.2-1.7 s after every Hivemind run here (more on a fraction of a core), time that each run spent
    between its summary and its unit's end, with nothing left to save."""
    for child in multiprocessing.active_children():
        child.terminate()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(exit_code)
