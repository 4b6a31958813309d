"""Compute calibrations: samples/s of one training process against its threads.

Real cores do not add up: on a 16-core machine sixteen threads train ResNet18 at BS 32 about 5x as fast as
one, not 16x. A calibration records what a machine's processes reach at each thread count, all cores busy and
every process pinned to its own cores (``benchmarks/thread_scaling.py`` measures one). The controller reads
it to give each modelled VM the compute its vCPUs really deliver, not vCPUs x one core's rate.

A calibration file (JSON)::

    {"kind": "testbed-thread-scaling",
     "measured_on": {"cores": 16, "cpu_model": "...", "torch": "2.14.1", "date": "2026-11-20", "note": "..."},
     "method": "...",
     "rates": [{"model": "resnet18", "batch_size": 32, "threads": 1, "processes": 16,
                "samples_per_second": 131.0, "source": "trainer"}, ...]}

Optionally, what a Hivemind peer's compute keeps beside its own processes (DHT, p2pd, averagers on the same
cores), measured by ``benchmarks/study_scale.py --calibration-out`` as the solo loop's compute
seconds over a peer's at the same threads, peers on disjoint core blocks::

     "hivemind_compute": [{"model": "resnet18", "batch_size": 32, "threads": 8, "compute_ratio": 0.62,
                           "peers": 2, "settings": {...}}, ...]

The model already gives a one-thread container that share of its own quota (the truth benchmark checks it), so
a Hivemind peer of v vCPUs is modelled at ``ratio(v) / ratio(1)`` of its solo rate.

The project ships one measured on a 16-core machine (``controller/calibrations/default.json``; no Hivemind
rows yet: those of 2026-11-23 ran with spinning OpenMP threads, docs/study-scale.md).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from experiment.results import CALIBRATION_KIND as KIND

DEFAULT = Path(__file__).resolve().parent / "calibrations" / "default.json"
#: the records of where the model of Hivemind peers was checked (``load_model_checks``)
MODEL_CHECKS = Path(__file__).resolve().parent / "calibrations" / "model-checks.json"
MODEL_CHECKS_KIND = "testbed-model-checks"


class CalibrationError(ValueError):
    """A calibration file that cannot be used, with what is wrong and where."""


@dataclass(frozen=True)
class Calibration:
    path: str
    measured_on: dict[str, Any]
    method: str
    # (model, batch_size) -> {threads: samples/s per process}
    rates: dict[tuple[str, int], dict[int, float]]
    # (model, batch_size) -> {threads: a Hivemind peer's compute ratio to the solo loop's}
    hivemind_compute: dict[tuple[str, int], dict[int, float]] = field(default_factory=dict)

    def hivemind_compute_factor(self, model: str, batch_size: int, vcpus: float) -> float | None:
        """How much slower a Hivemind peer of ``vcpus`` computes than the model's one-thread container
        already makes it: ratio(vcpus) / ratio(1), or None without both rows.

        >>> c = Calibration("c", {}, "", {}, {("resnet18", 32): {1: 0.8, 8: 0.4}})
        >>> c.hivemind_compute_factor("resnet18", 32, 8), c.hivemind_compute_factor("resnet18", 32, 4)
        (0.5, None)
        """
        curve = self.hivemind_compute.get((model, batch_size), {})
        if vcpus != int(vcpus) or int(vcpus) not in curve or 1 not in curve:
            return None
        return curve[int(vcpus)] / curve[1]

    def speedup(self, model: str, batch_size: int, threads: int) -> float:
        """Samples/s of a process with ``threads`` threads over a one-thread process's, same model and batch.

        >>> calibration = load(DEFAULT)
        >>> round(calibration.speedup("resnet18", 32, 16), 2)
        4.33
        >>> calibration.speedup("resnet18", 32, 1)
        1.0
        """
        curve = self.curve(model, batch_size)
        if threads not in curve:
            known = ", ".join(str(t) for t in sorted(curve))
            raise CalibrationError(f"{self.path}: {model} at batch size {batch_size} has no rate for "
                                   f"{threads} threads (it has {known})")  # fmt: skip
        if 1 not in curve:
            raise CalibrationError(f"{self.path}: {model} at batch size {batch_size} has no one-thread rate")
        return curve[threads] / curve[1]

    def rate(self, model: str, batch_size: int, vcpus: float) -> float | None:
        """Samples/s of one process on ``vcpus`` cores, or None where the calibration has no such rate."""
        if vcpus != int(vcpus):
            return None
        return self.rates.get((model, batch_size), {}).get(int(vcpus))

    def ceiling(
        self, model: str, batch_size: int, peer_vcpus: list[float], baseline_vcpus: float
    ) -> float | None:
        """The no-communication ceiling of a speedup: the peers' calibrated samples/s summed over the
        baseline's, as if averaging cost nothing (None where a rate is missing).

        >>> calibration = load(DEFAULT)
        >>> round(calibration.ceiling("resnet18", 32, [1] * 16, 16), 2)  # 16 one-vCPU peers, 16-vCPU baseline
        3.69
        >>> round(calibration.ceiling("resnet18", 32, [8, 8], 16), 2)
        1.81
        """
        peers = [self.rate(model, batch_size, vcpus) for vcpus in peer_vcpus]
        baseline = self.rate(model, batch_size, baseline_vcpus)
        if not peers or baseline is None or any(rate is None for rate in peers):
            return None
        return sum(peers) / baseline

    def describe(self) -> str:
        """Where the rates come from, in a line; the torch it was measured with where the hosts run another
        (requirements/node.txt)."""
        on = self.measured_on
        parts = [f"{on['cores']} cores" if "cores" in on else None, on.get("cpu_model"), on.get("date")]
        torch, pinned = on.get("torch"), pinned_torch()
        if torch and pinned and not str(torch).startswith(pinned):
            parts.append(f"torch {torch}, the hosts run {pinned}")
        return f"{self.path} (measured on {', '.join(str(p) for p in parts if p) or 'an unnamed machine'})"

    def curve(self, model: str, batch_size: int) -> dict[int, float]:
        """threads -> samples/s per process for ``model`` at ``batch_size``."""
        try:
            return self.rates[(model, batch_size)]
        except KeyError:
            known = ", ".join(f"{m} at {b}" for m, b in sorted(self.rates))
            raise CalibrationError(
                f"{self.path}: no rates for {model} at batch size {batch_size} (it has {known})"
            ) from None


def load(path: str | Path) -> Calibration:
    """Read and check a calibration file; CalibrationError names the file and the first problem."""
    path = Path(path)
    try:
        document = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise CalibrationError(f"{path}: not a readable JSON file ({exc})") from None
    return parse(document, str(path))


def pinned_torch() -> str | None:
    """The torch version the hosts install (requirements/node.txt's pin), or None.

    >>> pinned_torch()
    '2.14.1'
    """
    requirements = Path(__file__).resolve().parents[1] / "requirements" / "node.txt"
    try:
        lines = requirements.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        if line.strip().startswith("torch=="):
            return line.strip().split("==", 1)[1].split(";")[0].strip()
    return None


def parse(document: Any, name: str = "calibration") -> Calibration:
    """A Calibration from the parsed JSON ``document`` (``name`` in the errors).

    >>> try:
    ...     parse({"kind": KIND, "measured_on": {}, "rates": [
    ...         {"model": "m", "batch_size": 8, "threads": 2, "samples_per_second": -1}]})
    ... except CalibrationError as error:
    ...     print(error)
    calibration: rates[0]: samples_per_second must be > 0 (got -1)
    """
    if not isinstance(document, dict) or document.get("kind") != KIND:
        raise CalibrationError(f'{name}: not a calibration (its "kind" must be {KIND!r})')
    rows = document.get("rates")
    if not isinstance(rows, list) or not rows:
        raise CalibrationError(f'{name}: "rates" must be a non-empty list')
    rates = _curves(rows, f"{name}: rates", "samples_per_second", lambda rate: rate > 0, "> 0")
    measured_on = document.get("measured_on")
    if not isinstance(measured_on, dict):
        raise CalibrationError(f'{name}: "measured_on" must say which machine (an object)')
    hivemind = _hivemind_rows(document.get("hivemind_compute", []), name)
    return Calibration(name, measured_on, str(document.get("method", "")), rates, hivemind)


def _hivemind_rows(rows: Any, name: str) -> dict[tuple[str, int], dict[int, float]]:
    """The optional ``hivemind_compute`` rows: a ratio in (0, 2] per model, batch size and threads.

    >>> _hivemind_rows([{"model": "m", "batch_size": 8, "threads": 2, "compute_ratio": 0}], "c")
    Traceback (most recent call last):
    ...
    controller.calibration.CalibrationError: c: hivemind_compute[0]: compute_ratio must be in (0, 2] (got 0)
    """
    if not isinstance(rows, list):
        raise CalibrationError(f'{name}: "hivemind_compute" must be a list')
    return _curves(
        rows, f"{name}: hivemind_compute", "compute_ratio", lambda ratio: 0 < ratio <= 2, "in (0, 2]"
    )


def _curves(
    rows: list[Any], where: str, field_name: str, valid: Callable[[float], bool], requirement: str
) -> dict[tuple[str, int], dict[int, float]]:
    """(model, batch size) -> {threads: the row's ``field_name``}; CalibrationError names the first bad row
    (``where[index]``) and what is wrong with it."""
    curves: dict[tuple[str, int], dict[int, float]] = {}
    for index, row in enumerate(rows):
        here = f"{where}[{index}]"
        if not isinstance(row, dict):
            raise CalibrationError(f"{here}: must be an object")
        model, batch, threads, value = (row.get(k) for k in ("model", "batch_size", "threads", field_name))
        if not isinstance(model, str) or not model:
            raise CalibrationError(f"{here}: model must be a name (got {model!r})")
        for label, number in (("batch_size", batch), ("threads", threads)):
            if not isinstance(number, int) or isinstance(number, bool) or number < 1:
                raise CalibrationError(f"{here}: {label} must be an integer >= 1 (got {number!r})")
        if not isinstance(value, int | float) or isinstance(value, bool) or not valid(value):
            raise CalibrationError(f"{here}: {field_name} must be {requirement} (got {value!r})")
        curve = curves.setdefault((model, batch), {})
        if threads in curve:
            raise CalibrationError(
                f"{here}: a second rate for {model} at batch size {batch}, {threads} threads"
            )
        curve[threads] = float(value)
    return curves


# ------------------------------------------------------------------------ where the scale model was checked


@dataclass(frozen=True)
class ModelCheck:
    """One check of the dilated, calibrated model of Hivemind peers against a measurement of the real thing:
    its per-peer samples/s error (modelled over measured - 1) and its averaging share's (points)."""

    vcpus: int  # a peer's
    throughput_error: float
    averaging_share_points: float | None
    against: str
    date: str = ""

    @property
    def holds(self) -> bool:
        """Within the model's goals: 25 % on throughput, 10 points on the averaging share."""
        share = self.averaging_share_points
        return abs(self.throughput_error) <= 0.25 and (share is None or abs(share) <= 10)


def load_model_checks(path: Path | str = MODEL_CHECKS) -> tuple[ModelCheck, ...]:
    """Every check of the model recorded in ``path`` (controller/calibrations/model-checks.json; the
    benchmarks that measure them append to it); CalibrationError names what is wrong with the file."""
    path = Path(path)
    try:
        document = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise CalibrationError(f"{path}: cannot read the model's checks: {error}") from None
    if not isinstance(document, dict) or document.get("kind") != MODEL_CHECKS_KIND:
        raise CalibrationError(f"{path}: not a record of model checks (kind {MODEL_CHECKS_KIND!r})")
    checks = []
    for index, record in enumerate(document.get("checks") or []):
        try:
            share = record.get("averaging_share_points")
            checks.append(
                ModelCheck(
                    vcpus=int(record["vcpus"]),
                    throughput_error=float(record["throughput_error"]),
                    averaging_share_points=None if share is None else float(share),
                    against=str(record["against"]),
                    date=str((record.get("measured_on") or {}).get("date", "")),
                )
            )
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            raise CalibrationError(f"{path}: checks[{index}]: {error!r}") from None
    return tuple(checks)


def measured_here() -> dict[str, Any]:
    """``measured_on`` of a check taken on this machine now: its cores, CPU model, torch, hivemind, date."""
    import datetime
    import importlib.metadata

    from experiment.machine import this_machine

    try:
        hivemind = importlib.metadata.version("hivemind")
    except importlib.metadata.PackageNotFoundError:
        hivemind = ""
    return {**this_machine(), "hivemind": hivemind, "date": datetime.date.today().isoformat()}


def append_model_check(record: dict[str, Any], path: Path | str = MODEL_CHECKS) -> None:
    """Add one check's record (vcpus, throughput_error, averaging_share_points, against, measured_on,
    command) to ``path``, as the benchmarks that measure one do with ``--record``."""
    path = Path(path)
    document = json.loads(path.read_text())
    document.setdefault("checks", []).append(record)
    path.write_text(json.dumps(document, indent=2) + "\n")


def _shown(path: Path) -> str:
    """``path`` relative to the repository where it lies in it (the caveat names the record it rests on)."""
    try:
        return str(path.resolve().relative_to(MODEL_CHECKS.parents[2]))
    except ValueError:
        return str(path)


def _latest(checks: Iterable[ModelCheck]) -> dict[int, ModelCheck]:
    """Per size the check recorded last (a later measurement replaces an earlier one)."""
    return {check.vcpus: check for check in checks}


def hivemind_model_caveat(
    vcpus: float, checks: tuple[ModelCheck, ...] | None = None, source: Path | str = MODEL_CHECKS
) -> str | None:
    """Why a dilated model of Hivemind peers with ``vcpus`` each is outside the range the model was checked
    in, or None where the latest check at that size holds. ``checks`` None: those recorded in ``source``.
    The model gives a peer the solo loop's compute at its vCPUs; how much a multi-threaded peer loses to its
    own averagers is not in it.

    >>> hivemind_model_caveat(2) is None
    True
    >>> caveat = hivemind_model_caveat(8)
    >>> caveat.split(":")[0]
    "outside the scale model's validated range (Hivemind peers of 1, 2 vCPUs)"
    >>> "at 8 vCPUs a peer it was +105 % on samples/s per peer" in caveat, "up to 105 %" in caveat
    (True, True)
    """
    latest = _latest(load_model_checks(source) if checks is None else checks)
    if not latest:
        return f"no check of the scale model recorded ({source})"
    valid = sorted(size for size, check in latest.items() if check.holds)
    here = latest.get(int(vcpus)) if float(vcpus).is_integer() else None
    if here is not None and here.holds:
        return None
    sizes = ", ".join(str(v) for v in valid) or "none"
    worst = max(latest.values(), key=lambda check: check.throughput_error)
    if here is not None:
        when = f", {here.date}" if here.date else ""
        measured = (
            f"at {vcpus:g} vCPUs a peer it was {here.throughput_error * 100:+.0f} % on samples/s per peer "
            f"({here.against}{when})"
        )
    else:
        measured = f"no check at {vcpus:g} vCPUs a peer"
    record = _shown(Path(source)) if checks is None else "the given checks"
    return (
        f"outside the scale model's validated range (Hivemind peers of {sizes} vCPUs): {measured}; its "
        f"compute is the solo loop's, optimistic by up to {worst.throughput_error * 100:.0f} % ({record})"
    )


def hivemind_model_caveats(peer_vcpus: dict[str, float], factored: Iterable[str] = ()) -> list[str]:
    """The caveats of a dilated run of Hivemind peers (host -> vCPUs), one per size outside the checked range,
    the largest first; hosts in ``factored`` are left out (their calibration carried the interference).

    >>> [c.split(": ")[1][:16] for c in hivemind_model_caveats({"a": 8, "b": 2, "c": 16}, factored=["c"])]
    ['at 8 vCPUs a pee']
    """
    left_out = set(factored)
    sizes = sorted(
        {vcpus for host, vcpus in peer_vcpus.items() if vcpus and host not in left_out}, reverse=True
    )
    return [caveat for vcpus in sizes if (caveat := hivemind_model_caveat(vcpus))]
