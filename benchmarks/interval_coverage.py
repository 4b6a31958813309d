"""Do the report's intervals hold at the few runs a testbed has? A Monte Carlo check.

Repeats are drawn from known distributions, normal and log-normal, with a coefficient of variation of
5, 15 and 25 % and n = 2, 3, 5, 10 runs a side, the same CV on both sides. Per cell and method:

- **coverage**: how often the 95 % interval of the ratio holds the true ratio (1.25);
- **false verdicts**: how often the verdict is "beyond the noise" when the true ratio is 1;
- **detected**: how often it is "beyond the noise" when the true ratio is 1.25 (the power: what a
  difference of 25 % needs in runs).

Methods: **welch**, the report's ``ratio_interval`` (Welch's t-interval on logarithms), called as the report
calls it; **bootstrap**, the percentile bootstrap of the ratio of means, the usual alternative
(``scipy.stats.bootstrap(method="percentile")``; here the same resampling written with numpy, vectorised
over the draws so that thousands of draws run in seconds). A cell passes where coverage >= 93 % and false
verdicts <= 6 %; ``MIN_RUNS`` in controller/report/intervals.py is the fewest runs from which Welch's interval
passes in every cell. docs/statistics.md holds the full table::

    python benchmarks/interval_coverage.py                       # 10000 draws a cell, ~2 minutes
    python benchmarks/interval_coverage.py --draws 1000 --welch-only  # seconds: Welch's interval only

tests/controller/test_interval_coverage.py runs a smaller seeded version with a tolerance.
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from controller.report.intervals import ratio_interval  # noqa: E402

DISTRIBUTIONS = ("normal", "log-normal")
VARIATIONS = (0.05, 0.15, 0.25)
RUNS = (2, 3, 5, 10)
TRUE_RATIO = 1.25
COVERAGE_GOAL = 0.93
FALSE_VERDICT_LIMIT = 0.06
OLD_RESAMPLES = 999


@dataclass(frozen=True)
class Cell:
    distribution: str
    variation: float
    runs: int
    method: str
    coverage: float
    false_verdicts: float
    #: the share of draws the method gave an interval for (the rest: no verdict)
    given: float
    #: the share of draws at the true ratio TRUE_RATIO called beyond the noise
    detected: float = 0.0

    @property
    def holds(self) -> bool:
        return self.coverage >= COVERAGE_GOAL and self.false_verdicts <= FALSE_VERDICT_LIMIT


def draw(
    rng: np.random.Generator, distribution: str, variation: float, mean: float, shape: tuple
) -> np.ndarray:
    """Runs with the given mean and coefficient of variation (normal: clipped at 1 % of the mean, which a
    CV of 25 % reaches with a chance of 5e-5)."""
    if distribution == "normal":
        return np.maximum(mean * (1 + variation * rng.standard_normal(shape)), 0.01 * mean)
    sigma = math.sqrt(math.log(1 + variation**2))
    return rng.lognormal(math.log(mean) - sigma**2 / 2, sigma, shape)


def welch_intervals(top: np.ndarray, bottom: np.ndarray) -> list[tuple[float, float] | None]:
    return [ratio_interval(list(a), list(b)) for a, b in zip(top, bottom, strict=True)]


def bootstrap_intervals(
    top: np.ndarray, bottom: np.ndarray, rng: np.random.Generator
) -> list[tuple[float, float]]:
    """The percentile bootstrap of the ratio of means: each side resampled on its own, OLD_RESAMPLES times."""
    draws, n = top.shape
    intervals = []
    for a, b in zip(top, bottom, strict=True):
        picks = rng.integers(0, n, (2, OLD_RESAMPLES, n))
        ratios = a[picks[0]].mean(axis=1) / b[picks[1]].mean(axis=1)
        low, high = np.percentile(ratios, [2.5, 97.5])
        intervals.append((float(low), float(high)))
    return intervals


def cell(distribution: str, variation: float, runs: int, method: str, draws: int, seed: int) -> Cell:
    rng = np.random.default_rng([seed, DISTRIBUTIONS.index(distribution), int(variation * 100), runs])
    rates = {
        ratio: (
            draw(rng, distribution, variation, ratio * 100, (draws, runs)),
            draw(rng, distribution, variation, 100, (draws, runs)),
        )
        for ratio in (TRUE_RATIO, 1.0)
    }
    found = {}
    for ratio, (top, bottom) in rates.items():
        found[ratio] = (
            welch_intervals(top, bottom) if method == "welch" else bootstrap_intervals(top, bottom, rng)
        )
    given = [i for i in found[TRUE_RATIO] if i is not None]
    null = [i for i in found[1.0] if i is not None]
    return Cell(
        distribution,
        variation,
        runs,
        method,
        coverage=sum(low <= TRUE_RATIO <= high for low, high in given) / max(len(given), 1),
        false_verdicts=sum(low > 1 or high < 1 for low, high in null) / max(len(null), 1),
        given=len(given) / draws,
        detected=sum(low > 1 or high < 1 for low, high in given) / draws,
    )


def table(draws: int, seed: int, methods: tuple[str, ...] = ("bootstrap", "welch")) -> list[Cell]:
    return [
        cell(distribution, variation, runs, method, draws, seed)
        for distribution in DISTRIBUTIONS
        for variation in VARIATIONS
        for runs in RUNS
        for method in methods
    ]


def markdown(cells: list[Cell], draws: int, seed: int) -> str:
    methods = sorted({c.method for c in cells}, key=("bootstrap", "welch").index)
    header = (
        "| distribution | CV | runs a side | "
        + " | ".join(f"{m}: coverage | {m}: false verdicts" for m in methods)
        + " | welch: detects 1.25x"
    )
    lines = [
        f"{draws} draws a cell, seed {seed}; goal: coverage >= {COVERAGE_GOAL:.0%}, false verdicts <= "
        f"{FALSE_VERDICT_LIMIT:.0%} (a cell that misses it is marked **x**).",
        "",
        header + " |",
        "|---" * (4 + 2 * len(methods)) + "|",
    ]
    by_key = {(c.distribution, c.variation, c.runs, c.method): c for c in cells}
    for distribution in DISTRIBUTIONS:
        for variation in VARIATIONS:
            for runs in RUNS:
                parts = [distribution, f"{variation:.0%}", str(runs)]
                for method in methods:
                    c = by_key[distribution, variation, runs, method]
                    cov = f"{c.coverage:.1%}" + ("" if c.coverage >= COVERAGE_GOAL else " **x**")
                    false = f"{c.false_verdicts:.1%}" + (
                        "" if c.false_verdicts <= FALSE_VERDICT_LIMIT else " **x**"
                    )
                    parts += [cov, false]
                parts.append(f"{by_key[distribution, variation, runs, 'welch'].detected:.0%}")
                lines.append("| " + " | ".join(parts) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, default=10000, help="draws a cell (default 10000)")
    parser.add_argument("--seed", type=int, default=52)
    parser.add_argument("--welch-only", action="store_true", help="Welch's interval only (fast)")
    args = parser.parse_args()
    cells = table(args.draws, args.seed, ("welch",) if args.welch_only else ("bootstrap", "welch"))
    print(markdown(cells, args.draws, args.seed), end="")
    held = sorted(
        {c.runs for c in cells if c.method == "welch"}
        - {c.runs for c in cells if c.method == "welch" and not c.holds}
    )
    print(
        f"\nWelch's interval holds in every cell from n = {min(held) if held else 'none'} "
        f"(runs a side tried: {RUNS})"
    )


if __name__ == "__main__":
    main()
