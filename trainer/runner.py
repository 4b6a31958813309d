"""``trainer run``: prepare everything, pass the start barrier, run the loop, always leave a summary.

Exit codes (docs/architecture.md): 0 finished (any normal exit reason, including a signal), 2 bad input before
training, 3 start barrier timed out, 1 crash.
"""

from __future__ import annotations

import logging
import sys
import time
import traceback
from typing import Any

import torch

from experiment.results import (
    ResultsWriter,
    RoundRecord,
    append_rejoin,
    last_step,
    prepare_run_dir,
    take_rejoin,
)
from trainer import cpu_usage, memory, netcounters, shm
from trainer.config import ConfigError, RunConfig
from trainer.data import build_loaders
from trainer.environment import apply_vcpus, git_revision, host_facts, package_versions
from trainer.loop import LoopLimits, Pace, TrainingLoop, evaluate_at_end
from trainer.models import build_model
from trainer.shutdown import StopRequested, StopSignals
from trainer.stats import RunStats
from trainer.strategies import get_strategy
from trainer.telemetry import Telemetry

log = logging.getLogger(__name__)

EXIT_OK, EXIT_CRASH, EXIT_BAD_INPUT, EXIT_START_TIMEOUT = 0, 1, 2, 3


def fail(message: str) -> int:
    """Report bad input as the one line the contract asks for; returns exit status 2."""
    print(f"trainer: error: {message}", file=sys.stderr, flush=True)
    return EXIT_BAD_INPUT


class RunSession:
    """One trainer run from validated settings to summary.json.

    :param config: validated settings (``RunConfig.validate()`` already called)
    """

    def __init__(self, config: RunConfig) -> None:
        self.config = config
        self.peer_id = config.resolved_peer_id
        self.start_timestamp = time.time()
        self.stats = RunStats(target_loss=config.target_loss)
        self.signals = StopSignals()
        self.telemetry: Telemetry | None = None
        self.writer: ResultsWriter | None = None
        self.barrier_release: float | None = None
        self.start_wait: float | None = None
        self.exit_detail: str | None = None
        self.cpu_at_release: cpu_usage.CpuSnapshot | None = None
        self.cpu_at_loop_end: cpu_usage.CpuSnapshot | None = None
        self.net_at_release: netcounters.NetCounters | None = None  # bytes on the wire (summary's network)
        self.net_at_loop_end: netcounters.NetCounters | None = None
        self.process_roles: dict[int, str] = {}  # the strategy's own processes (cpu_received's split)
        self.loop_end: float | None = None  # Unix time the training loop ended (the finish follows)
        self.memory: dict[str, Any] | None = None  # measured at the loop's end
        #: a restarted trainer's rejoin document (experiment/results.py take_rejoin), None for a first start
        self.rejoin: dict[str, Any] | None = None
        #: the files and bytes of /dev/shm an earlier trainer's ended processes left, removed at the start
        self.stale_shm: dict[str, int] | None = None

    # ---------------------------------------------------------------- phases

    def prepare(self) -> None:
        """Everything that can fail on bad input, before any training (raises
        ConfigError/FileExistsError/OSError)."""
        config = self.config
        # what an earlier trainer's killed processes left in /dev/shm would fill it over runs (trainer/shm.py)
        self.stale_shm = shm.remove_stale()
        self.rejoin = take_rejoin(config.results_dir)
        if self.rejoin is not None:
            if config.strategy not in ("hivemind", "diloco"):
                what = "a restarted trainer rejoins only a hivemind or diloco run"
                raise ConfigError(what, "strategy", config.strategy)
            # a killed trainer started again: its results so far stay, the new rows follow them
            self.rejoin["steps_before"] = last_step(config.results_dir)
            log.info("rejoining the run as incarnation %s", self.rejoin.get("incarnation"))
        else:
            prepare_run_dir(config.results_dir, overwrite=config.overwrite)
        self.writer = ResultsWriter(
            config.results_dir, write_evals=config.eval_every > 0, append=self.rejoin is not None
        )
        self.cpu = apply_vcpus(config.vcpus)
        torch.manual_seed(config.seed)
        self.train_loader, self.val_loader = build_loaders(config)
        self.model = build_model(config.model, seed=config.seed)
        self.telemetry = Telemetry(run_id=config.run_id, peer=self.peer_id, strategy=config.strategy)
        self.telemetry.set_run_info(config)
        port = None
        if config.metrics_port >= 0:
            try:
                port = self.telemetry.start_exporter(config.metrics_port, config.metrics_address)
            except OSError as exc:
                what = f"cannot serve metrics: {exc.strerror or exc}"
                raise ConfigError(what, "metrics_port", config.metrics_port) from exc
        if self.rejoin is None:  # a rejoining incarnation keeps the run's config.json
            self.writer.write_config(self.config_document(port))

    def config_document(self, metrics_port: int | None) -> dict[str, Any]:
        settings = self.config.to_dict()
        settings["peer_id"] = self.peer_id
        settings["data_root"] = self.config.resolved_data_root
        return {
            **settings,
            "versions": package_versions(),
            "host": host_facts(),
            "git_revision": git_revision(),
            "metrics_port": metrics_port,
            "cpu": self.cpu,
            "start_timestamp": self.start_timestamp,
        }

    def on_round(self, record: RoundRecord) -> None:
        """Fan a strategy's averaging round out to rounds.csv, the exporter and the summary counts."""
        self.stats.add_round(record)
        if self.writer is not None:
            self.writer.write_round(record)
        if self.telemetry is not None:
            self.telemetry.observe_round(record)

    def on_rejoined(self, cost: dict[str, Any]) -> None:
        """A restarted trainer has the collaboration's state: what that cost goes to rejoins.jsonl at once,
        kept whatever happens to this incarnation."""
        if self.rejoin is None:
            return
        self.rejoin.update(cost, process_started_at=self.start_timestamp, rejoined_at=time.time())
        append_rejoin(self.config.results_dir, self.rejoin)

    def execute(self) -> int:
        """Strategy setup, start barrier, training, finish and summary; returns the exit code.

        One function on purpose: the run's phases in order, with one ``try`` whose ``finally`` writes the
        summary and frees the strategy whatever phase failed."""
        config = self.config
        strategy = get_strategy(config.strategy)
        exit_reason, exit_code = "error", EXIT_CRASH
        loop: TrainingLoop | None = None
        try:
            self.signals.interrupting = True
            if self.rejoin is not None:  # the strategy calls on_rejoined once the state is downloaded
                strategy.rejoining, strategy.on_rejoined = True, self.on_rejoined
            try:
                strategy.setup(self.model, config, self.on_round)
            except (ValueError, ConnectionError) as exc:
                self.exit_detail = _one_line(exc)
                return fail(self.exit_detail)
            wait_started = time.monotonic()
            try:
                self.start_wait = strategy.wait_for_start()
            except TimeoutError as exc:
                self.start_wait = time.monotonic() - wait_started
                self.exit_detail = _one_line(exc)
                exit_reason, exit_code = "start_timeout", EXIT_START_TIMEOUT
                print(f"trainer: error: {self.exit_detail}", file=sys.stderr, flush=True)
                return exit_code
            except ConnectionError as exc:  # a start barrier that failed before its timeout, saying why
                self.start_wait = time.monotonic() - wait_started
                self.exit_detail = _one_line(exc)
                print(f"trainer: error: {self.exit_detail}", file=sys.stderr, flush=True)
                return exit_code  # exit_reason error
            self.barrier_release = time.time()
            self.process_roles = strategy.process_roles()
            self.cpu_at_release = cpu_usage.snapshot(self.process_roles)
            self.net_at_release = netcounters.snapshot()
            self.signals.interrupting = False
            if self.writer is None or self.telemetry is None:
                raise RuntimeError("RunSession.prepare() must run before execute()")
            self.writer.start_clock(self.barrier_release)
            origin = self.writer.clock_origin or self.barrier_release  # a rejoining peer: the run's own
            self.telemetry.set_start_timestamp(origin)
            log.info("start barrier released after %.1f s", self.start_wait)
            loop = TrainingLoop(
                model=strategy.training_module(),
                strategy=strategy,
                train_loader=self.train_loader,
                val_loader=self.val_loader,
                limits=LoopLimits(
                    max_steps=config.max_steps, eval_every=config.eval_every, eval_batches=config.eval_batches
                ),
                stats=self.stats,
                writer=self.writer,
                telemetry=self.telemetry,
                signals=self.signals,
                **self._pacing(),
            )
            if self.rejoin is not None:  # step numbers go on from the killed incarnation's last
                loop.step = self.rejoin["steps_before"]
            exit_reason = loop.run(clock_origin=origin)
            self.loop_end = time.time()
            self.stats.validation_seconds = loop.validation_seconds
            # the CPU received while training, not while finishing (a peer may serve averaging for a while)
            self.cpu_at_loop_end = cpu_usage.snapshot(self.process_roles)
            self.net_at_loop_end = netcounters.snapshot()
            self.memory = self._memory_profile(strategy)
            evaluate_at_end(loop, exit_reason, config.eval_every)
            exit_code = EXIT_OK
        except (StopRequested, KeyboardInterrupt):
            exit_reason, exit_code = "signal", EXIT_OK
        except Exception as exc:
            if self.signals.requested:  # e.g. a DataLoader worker killed by the same signal
                exit_reason, exit_code = "signal", EXIT_OK
                log.info("stopped by %s: %s", self.signals.signal_name, _one_line(exc))
            else:
                traceback.print_exc()
                exit_reason, exit_code = "error", EXIT_CRASH
                self.exit_detail = f"{type(exc).__name__}: {_one_line(exc)}"
        finally:
            self.signals.shielded = True
            details = self._finish_strategy(strategy, exit_reason)
            self.write_summary(exit_reason, details)
        log.info("run ended: %s after %d steps", exit_reason, self.stats.steps)
        return exit_code

    def _pacing(self) -> dict[str, Any]:
        """The loop's pacing of a calibrated local run (``hold_rate``): the plan's CPU speed, and the quota
        and usage of this container's cgroup it holds it by; none where the run is not paced or no quota is
        readable (said in the log)."""
        config = self.config
        if not config.hold_rate:
            return {}
        meter = cpu_usage.cgroup_meter()
        quota = meter.quota_cores() if meter is not None else None
        if quota is None:
            log.warning(
                "hold_rate given, but this process's cgroup has no readable CPU quota: steps not paced"
            )
            return {}
        log.info("pacing steps to %.1f samples per CPU second, quota %.3f cores", config.hold_rate, quota)
        return {"pace": Pace(config.hold_rate, config.hold_headroom, quota), "meter": meter}

    def _finish_strategy(self, strategy: Any, exit_reason: str) -> dict[str, Any]:
        """Call strategy.finish (always, even after a failed setup), tolerating a signal or error inside
        it."""
        try:
            strategy.finish(exit_reason)
        except (StopRequested, KeyboardInterrupt):
            log.warning("strategy shutdown interrupted by a second signal")
        except Exception:
            log.exception("strategy shutdown failed")
        details = getattr(strategy, "summary_details", None)
        if callable(details):
            try:
                return dict(details())
            except Exception:
                log.exception("strategy summary details failed")
        return {}

    def write_summary(self, exit_reason: str, details: dict[str, Any] | None = None) -> None:
        if self.writer is None:
            return
        summary = self.stats.summary(
            run_id=self.config.run_id,
            peer_id=self.peer_id,
            strategy=self.config.strategy,
            exit_reason=exit_reason,
            start_timestamp=self.start_timestamp,
            barrier_release_timestamp=self.barrier_release,
            start_wait_seconds=self.start_wait,
            end_timestamp=time.time(),
            loop_end_timestamp=self.loop_end,
            time_dilation=self.config.time_dilation,
            extra={
                "exit_detail": self.exit_detail,
                "cpu_received": self._cpu_received(),
                "memory": self.memory,
                "stale_shm_removed": self.stale_shm,
                "network": netcounters.traffic(
                    self.net_at_release,
                    self.net_at_loop_end or netcounters.snapshot(),
                    self.stats.samples,
                ),
                **({"strategy_details": details} if details else {}),
                **({"rejoin": self.rejoin} if self.rejoin is not None else {}),
            },
        )
        self.writer.write_summary(summary)
        self.writer.close()

    def _memory_profile(self, strategy: Any) -> dict[str, Any]:
        """summary.json's ``memory`` (trainer/memory.py), also set on the exporter's memory gauge."""
        held = getattr(strategy, "held_bytes", None)  # what a strategy that shards its own way holds
        sizes = held() if callable(held) else memory.model_bytes(self.model)
        local = getattr(strategy, "local_optimizer", None)
        optimizer = local() if callable(local) else None
        resident = memory.rss_bytes()
        profile = {
            "peak_rss_bytes": max(memory.peak_rss_bytes(), resident),
            "rss_bytes": resident,
            "parameter_bytes": sizes["parameters"],
            "gradient_bytes": sizes["gradients"],
            # a strategy with more than one optimizer (DiLoCo's inner and outer) counts their state itself
            "optimizer_state_bytes": sizes.get("optimizer_state")
            or (memory.optimizer_state_bytes(optimizer) if optimizer is not None else None),
        }
        if self.telemetry is not None:
            self.telemetry.observe_memory(
                {
                    "parameters": profile["parameter_bytes"],
                    "gradients": profile["gradient_bytes"],
                    "optimizer_state": profile["optimizer_state_bytes"],
                }
            )
        return profile

    def _cpu_received(self) -> dict[str, Any] | None:
        """The CPU this run got from the start barrier's release to the loop's end (or now, when the loop did
        not end normally), next to what it was promised."""
        if self.cpu_at_release is None:
            return None
        try:
            document = cpu_usage.received(
                self.cpu_at_release, self.cpu_at_loop_end or cpu_usage.snapshot(self.process_roles)
            )
        except OSError as exc:
            log.warning("could not read the CPU received: %s", exc)
            return None
        return {"declared_vcpus": self.config.vcpus, **document}

    def close(self) -> None:
        self.signals.restore()
        if self.telemetry is not None:
            self.telemetry.stop_exporter()
        if self.writer is not None:
            self.writer.close()


def run(config: RunConfig) -> int:
    """Run one trainer process's job; returns the exit code."""
    session = RunSession(config)
    session.signals.install()
    session.signals.interrupting = True  # until training starts, a signal ends the run at once
    try:
        try:
            session.prepare()
        except (ConfigError, FileExistsError) as exc:
            return fail(_one_line(exc))
        except OSError as exc:
            return fail(f"cannot prepare the run: {_one_line(exc)}")
        except (StopRequested, KeyboardInterrupt):
            log.info("stopped by %s before training", session.signals.signal_name or "SIGINT")
            session.write_summary("signal")
            return EXIT_OK
        return session.execute()
    finally:
        session.close()


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return " ".join(text.split())
