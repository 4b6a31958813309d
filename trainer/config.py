"""Run settings: one typed, validated object per trainer run (serialised to ``config.json``).

Settings come from three layers, later ones winning: the field defaults below, a YAML/JSON ``--config FILE``
using the field names, and command-line flags (``--batch-size`` → ``batch_size``). :meth:`RunConfig.validate`
checks every value once, before anything starts, and raises :class:`ConfigError` with one line naming the
field and value.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import ipaddress
import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

# the allowed values, from the experiment's one definition
from experiment.variables import (
    BY_NAME,
    COMPRESSION_PACKAGES,
    DATA_PARALLEL_STRATEGIES,
    STRATEGIES,
    VARIABLES,
    KindError,
    parse_value,
    rule_problems,
)
from trainer.dilation import check_factor

DEFAULT_DATA_ROOTS = {"fashion-mnist": "/usr/share/datasets/fashion-mnist"}

_MULTIADDR = re.compile(
    r"^/(?P<proto>ip4|ip6|dns|dns4|dns6)/(?P<host>[^/]+)"
    r"/(?P<transport>tcp|udp)/(?P<port>\d+)"
    r"(?P<quic>/quic(?:-v1)?)?"
    r"(?:/p2p/(?P<peer>[1-9A-HJ-NP-Za-km-z]+))?$"
)
_HOSTNAME = re.compile(
    r"^(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$"
)
_SAFE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


class ConfigError(ValueError):
    """A setting that cannot work, reported as ``<what> (<field>=<value>)`` before anything starts.

    :param what: what is wrong, in words a user can act on
    :param field: the ``RunConfig`` field at fault (None when the error is not about one field)
    :param value: the offending value
    """

    def __init__(self, what: str, field: str | None = None, value: Any = None) -> None:
        self.what = what
        self.field = field
        self.value = value
        super().__init__(what if field is None else f"{what} ({field}={_show(value)})")


def _show(value: Any) -> str:
    if isinstance(value, list | tuple):
        return " ".join(str(v) for v in value)
    return str(value)


def _opt(help_text: str, **extra: Any) -> dict[str, Any]:
    return {"help": help_text, **extra}


#: where the trainer's own default differs from the experiment's, and why (a test keeps the others equal)
TRAINER_DEFAULTS = {
    # a trainer started by hand needs no dataset on disk; the experiment trains on the study's
    "dataset": "synthetic",
}


#: RunConfig fields the experiment playbook hands over (Variable.trainers): defined in experiment/variables.py
SHARED_FIELDS = tuple(variable.name for variable in VARIABLES if variable.trainers)


def _shared(name: str, **extra: Any) -> Any:
    """A setting the experiment playbook hands to the trainer as this flag: its default and help come from
    the experiment's one definition (experiment/variables.py), its allowed values into the help."""
    variable = BY_NAME[name]
    choices = f": {' | '.join(map(str, variable.kind))}" if isinstance(variable.kind, tuple) else ""
    default = TRAINER_DEFAULTS.get(name, variable.default)
    return field(default=default, metadata=_opt(variable.meaning + choices, shared=True, **extra))


@dataclass(kw_only=True)
class RunConfig:
    """Every setting of one trainer run.

    :param strategy: how this trainer trains with the others (experiment/variables.py ``STRATEGIES``):
        ``baseline`` (one node, plain torch optimizer), ``hivemind`` (one peer of a collaborative run),
        ``ddp``/``zero``/``fsdp``/``deepspeed`` (one rank of a data-parallel run) or ``diloco`` (one replica)
    :param model: ``resnet18`` (torchvision, 10 classes, the study's model) or ``smallcnn`` (tiny, for fast
        tests)
    :param dataset: ``synthetic`` (in memory, learnable), ``fashion-mnist`` (idx files), ``cifar10``
        (``cifar-10-batches-py`` pickles) or ``imagefolder`` (one folder per class)
    :param data_root: where the dataset lives; default /usr/share/datasets/fashion-mnist for fashion-mnist,
        required for cifar10 and imagefolder, unused for synthetic
    :param batch_size: samples per local step
    :param learning_rate: optimizer learning rate (> 0)
    :param optimizer: ``sgd`` (momentum 0.9) or ``adam``
    :param max_steps: local steps after which this peer stops (a Hivemind run may stop earlier collectively)
    :param seed: seeds model initialisation, data order and synthetic data
    :param vcpus: torch threads (None: torch's default); the placement decides the cores
    :param data_workers: DataLoader worker processes (0: load in the training process)
    :param preprocessing: ``decode`` (imagefolder: decode and resize every image each time it is loaded) or
        ``cached`` (decode and resize once into a uint8 array under ``cache_dir``); the other datasets are
        arrays in memory either way
    :param cache_dir: where ``cached`` keeps the decoded arrays (reused while the image folder is unchanged)
    :param target_loss: training loss (mean of the last 10 steps) whose first crossing is the time to target;
        reaching it ends the run (exit reason ``target_loss``). None: no target
    :param eval_every: validation loss/accuracy every K steps into evals.csv (0: never)
    :param eval_batches: validation batches per evaluation (0: the whole validation split)
    :param run_id: the run this peer belongs to (label ``run_id`` on every metric; peers of one run share it)
    :param peer_id: this peer's name (label ``peer``); default: the host name
    :param results_dir: where config.json, steps.csv, rounds.csv, evals.csv and summary.json go
    :param metrics_port: Prometheus exporter port (0: pick a free port, recorded in config.json; -1: no
        exporter)
    :param metrics_address: address the exporter binds to
    :param target_batch_size: Hivemind: samples all peers together process per Hivemind epoch
    :param local_updates: Hivemind: step the optimizer every local step and average parameters at epoch end
        (True) or accumulate gradients and average them (False)
    :param matchmaking_time: Hivemind: seconds spent forming an averaging group
    :param next_chunk_timeout: Hivemind: seconds an all-reduce waits for a peer's next part before it goes
        on without it (the part stays un-averaged, a ``partial`` round); None: the matchmaking time, as
        Hivemind's own default, which a short matchmaking time makes too short for a large model's parts
    :param average_state_every: Hivemind: average the parameters (and optimizer state) with the others every
        this many epochs (Hivemind's default 1). Without local updates the gradients are averaged every epoch
        anyway and this round is a safeguard against drift that runs in the background, on the peer's cores
        (docs/study-scale.md); with local updates it is how the peers agree
    :param compression: Hivemind: what its averagers send compressed (gradients, parameters, the state a
        peer downloads): none, fp16, scaled_fp16, uint8, quantile8, blockwise8 (needs bitsandbytes)
    :param averaging_timeout: Hivemind: seconds after which an averaging round is abandoned
    :param listen: Hivemind: multiaddr the DHT/p2pd listens on
    :param initial_peers: Hivemind: multiaddrs (with /p2p/ id) of peers to join; none: this is the bootstrap
        peer
    :param identity_path: Hivemind: this peer's private key file (`trainer identity` makes one), so that its
        peer ID, and with it its multiaddr, is known before it starts; empty: a new identity every start
    :param peers: Hivemind: peers that must have joined before anyone takes a step (start barrier)
    :param min_peers: Hivemind: when the start barrier times out with at least this many peers (> 0), they
        start without the others instead of giving up (0: every expected peer is needed)
    :param start_timeout: Hivemind: seconds to wait at the start barrier before giving up (exit status 3)
    :param finish_grace: Hivemind: seconds a peer that is done keeps serving averaging for the others
    :param time_dilation: D, how many times slower this peer's CPU is than the machine it models (>= 1; 1:
        none). Every time setting above is in the modelled machine's seconds and the trainer waits D times
        as long (trainer/dilation.py); summary.json also gives its times divided by D
    :param rank: DDP/ZeRO/FSDP/DeepSpeed: this process's rank, 0 .. peers - 1 (rank 0 hosts the
        rendezvous)
    :param rendezvous: DDP/ZeRO/FSDP/DeepSpeed: ``HOST:PORT`` where rank 0 listens for the others (its
        cluster address)
    :param zero_stage: DeepSpeed: the ZeRO stage, 1 (optimizer state sharded), 2 (and gradients) or 3 (and
        parameters); None: 2. Refused with any other strategy
    :param sync_every: DiLoCo: inner steps between syncs (H); None: experiment.variables.DEFAULT_SYNC_EVERY
    :param outer_learning_rate: DiLoCo: the outer Nesterov SGD's learning rate; None: the default (0.7)
    :param outer_momentum: DiLoCo: the outer Nesterov SGD's momentum (0 <= m < 1); None: the default (0.9)
    :param lighthouse: DiLoCo: ``HOST:PORT`` of torchft's Lighthouse (the monitor host's cluster address)
    :param config: the YAML/JSON file these settings were read from (informational)
    :param overwrite: replace a finished run in ``results_dir`` instead of refusing

    >>> RunConfig(strategy="baseline", model="smallcnn", max_steps=10).validate().batch_size
    32
    """

    strategy: str = field(default="baseline", metadata=_opt(" | ".join(s for s in STRATEGIES if s != "solo")))
    model: str = _shared("model")
    dataset: str = _shared("dataset")
    data_root: str | None = field(default=None, metadata=_opt("dataset directory", metavar="PATH"))
    batch_size: int = _shared("batch_size")
    learning_rate: float = _shared("learning_rate")
    optimizer: str = _shared("optimizer")
    max_steps: int = _shared("max_steps")
    seed: int = _shared("seed")
    vcpus: int | None = field(default=None, metadata=_opt("torch threads (default: torch's)"))
    data_workers: int = _shared("data_workers")
    preprocessing: str = _shared("preprocessing")
    cache_dir: str = field(
        default="/var/tmp/testbed-cache",
        metadata=_opt("where --preprocessing cached keeps arrays", metavar="DIR"),
    )
    target_loss: float | None = _shared("target_loss")
    eval_every: int = _shared("eval_every", metavar="K")
    eval_batches: int = _shared("eval_batches")
    run_id: str = field(default="local", metadata=_opt("run identifier (metric label run_id)"))
    peer_id: str | None = field(
        default=None, metadata=_opt("peer name (metric label peer; default hostname)")
    )
    results_dir: str = field(default="results", metadata=_opt("results directory", metavar="DIR"))
    metrics_port: int = field(default=0, metadata=_opt("exporter port (0: free port, -1: none)", metavar="P"))
    metrics_address: str = field(default="0.0.0.0", metadata=_opt("exporter bind address"))
    target_batch_size: int = _shared("target_batch_size")
    local_updates: bool = _shared("local_updates")
    matchmaking_time: float = _shared("matchmaking_time")
    average_state_every: int = _shared("average_state_every", metavar="N")
    next_chunk_timeout: float | None = _shared("next_chunk_timeout")
    compression: str = _shared("compression")
    averaging_timeout: float = _shared("averaging_timeout")
    listen: str = field(default="/ip4/0.0.0.0/tcp/0", metadata=_opt("Hivemind: listen multiaddr"))
    initial_peers: list[str] = field(
        default_factory=list, metadata=_opt("Hivemind: multiaddrs of peers to join", metavar="MULTIADDR")
    )
    identity_path: str = field(
        default="",
        metadata=_opt("Hivemind: private key file fixing this peer's ID (empty: a new one)", metavar="PATH"),
    )
    peers: int = field(
        default=1, metadata=_opt("Hivemind: peers to wait for before the first step; DDP/ZeRO: world size")
    )
    start_timeout: float = field(default=300.0, metadata=_opt("Hivemind: start barrier timeout (s)"))
    min_peers: int = _shared("min_peers")
    finish_grace: float = _shared("finish_grace")
    time_dilation: float = field(
        default=1.0, metadata=_opt("times slower this peer runs than the machine it models", metavar="D")
    )
    hold_rate: float | None = field(
        default=None,
        metadata=_opt(
            "a calibrated local run's samples per CPU second of the training thread, as planned: each step "
            "without averaging is paced to it (trainer/loop.py, Pace; none: not paced)",
            metavar="RATE",
        ),
    )
    hold_headroom: float = field(
        default=0.0,
        metadata=_opt("the CPU quota this container was given above its plan (a share), for the pacing"),
    )
    rank: int = field(default=0, metadata=_opt("data parallel: this process's rank (0 hosts the rendezvous)"))
    rendezvous: str = field(
        default="127.0.0.1:29500", metadata=_opt("data parallel: rank 0's HOST:PORT", metavar="HOST:PORT")
    )
    zero_stage: int | None = _shared("zero_stage")
    sync_every: int | None = _shared("sync_every", metavar="H")
    outer_learning_rate: float | None = _shared("outer_learning_rate")
    outer_momentum: float | None = _shared("outer_momentum")
    lighthouse: str | None = field(
        default=None, metadata=_opt("DiLoCo: torchft Lighthouse HOST:PORT", metavar="HOST:PORT")
    )
    config: str | None = field(default=None, metadata=_opt("YAML/JSON settings file", metavar="FILE"))
    overwrite: bool = field(default=False, metadata=_opt("replace a finished run in the results dir"))

    # ---------------------------------------------------------------- construction

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls))

    @classmethod
    def from_mapping(cls, values: dict[str, Any], *, source: str = "settings") -> RunConfig:
        """Build from field names (a config file's keys may use dashes), coercing types; unknown keys are
        errors."""
        known = {f.name: f for f in dataclasses.fields(cls)}
        kwargs: dict[str, Any] = {}
        for raw_key, value in values.items():
            key = str(raw_key).replace("-", "_")
            if key not in known:
                raise ConfigError(f"unknown setting in {source}", key, value)
            kwargs[key] = _coerce(known[key], value)
        return cls(**kwargs)

    @classmethod
    def load_file(cls, path: str | os.PathLike[str]) -> dict[str, Any]:
        """Read a YAML or JSON settings file into a dict of field names (not yet validated)."""
        file = Path(path)
        if not file.is_file():
            raise ConfigError("config file not found", "config", str(path))
        try:
            text = file.read_text(encoding="utf-8")
            data = json.loads(text) if file.suffix == ".json" else yaml.safe_load(text)
        except (OSError, ValueError, yaml.YAMLError) as exc:
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise ConfigError(f"cannot parse config file: {first}", "config", str(path)) from exc
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise ConfigError("config file must hold a mapping of settings", "config", str(path))
        return {str(k).replace("-", "_"): v for k, v in data.items()}

    @classmethod
    def from_sources(cls, flags: dict[str, Any]) -> RunConfig:
        """Merge defaults < ``flags['config']`` file < the other flags (only flags actually given)."""
        values: dict[str, Any] = {}
        config_file = flags.get("config")
        if config_file:
            values.update(cls.load_file(config_file))
            values["config"] = str(config_file)
        values.update(flags)
        return cls.from_mapping(values, source="config file" if config_file else "settings")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    # ---------------------------------------------------------------- derived values

    @property
    def resolved_data_root(self) -> str | None:
        return self.data_root if self.data_root else DEFAULT_DATA_ROOTS.get(self.dataset)

    @property
    def resolved_peer_id(self) -> str:
        return self.peer_id or _hostname()

    # ---------------------------------------------------------------- validation

    def validate(self, *, check_paths: bool = True) -> RunConfig:
        """Check every value; raise :class:`ConfigError` on the first that cannot work. Returns self."""
        _choice("strategy", self.strategy, STRATEGIES)
        self._check_shared()
        self._check_rules("compression")
        package = COMPRESSION_PACKAGES.get(self.compression)
        if package and importlib.util.find_spec(package) is None:
            raise ConfigError(
                f"needs {package}, which is not installed here", "compression", self.compression
            )
        if self.vcpus is not None:
            host_cpus = os.cpu_count() or 1
            _at_least("vcpus", self.vcpus, 1)
            if self.vcpus > host_cpus:
                raise ConfigError(f"more vcpus than this host has ({host_cpus})", "vcpus", self.vcpus)
        if not -1 <= self.metrics_port <= 65535:
            raise ConfigError(
                "metrics port must be 0..65535 (0: free port, -1: none)", "metrics_port", self.metrics_port
            )
        for name, value in (("run_id", self.run_id), ("peer_id", self.peer_id)):
            if value is not None and not _SAFE_ID.match(value):
                raise ConfigError("use letters, digits, '.', '_' and '-' only", name, value)
        if "." in self.run_id:
            # Hivemind uses the run id as its DHT key prefix and refuses dots there.
            raise ConfigError("no '.' in a run id (a Hivemind DHT prefix)", "run_id", self.run_id)
        _at_least("peers", self.peers, 1)
        self._check_rules()
        if not self.start_timeout > 0:
            raise ConfigError("must be a positive number of seconds", "start_timeout", self.start_timeout)
        problem = check_factor(self.time_dilation)
        if problem:
            raise ConfigError(problem, "time_dilation", self.time_dilation)
        if self.hold_rate is not None and not self.hold_rate > 0:
            raise ConfigError("must be a positive rate (samples per CPU second)", "hold_rate", self.hold_rate)
        if not 0 <= self.hold_headroom < 1:
            raise ConfigError("must be a share in [0, 1)", "hold_headroom", self.hold_headroom)
        check_multiaddr(self.listen, field_name="listen", require_peer_id=False)
        self._check_diloco()
        if self.strategy in DATA_PARALLEL_STRATEGIES:
            if not 0 <= self.rank < self.peers:
                raise ConfigError(f"rank must be 0 .. peers - 1 = {self.peers - 1}", "rank", self.rank)
            check_rendezvous(self.rendezvous)
        for address in self.initial_peers:
            check_multiaddr(address, field_name="initial_peers", require_peer_id=True)
        if check_paths:
            self._check_data_root()
        return self

    def _check_diloco(self) -> None:
        """DiLoCo's own settings (which strategy takes them is a rule between variables: _check_rules)."""
        if self.strategy != "diloco":
            if self.lighthouse is not None:
                raise ConfigError("only strategy diloco has a Lighthouse", "lighthouse", self.lighthouse)
            return
        if self.sync_every is not None:
            _at_least("sync_every", self.sync_every, 1)
        if self.outer_learning_rate is not None and not (
            math.isfinite(self.outer_learning_rate) and self.outer_learning_rate > 0
        ):
            raise ConfigError("must be a positive number", "outer_learning_rate", self.outer_learning_rate)
        if self.outer_momentum is not None and not 0 <= self.outer_momentum < 1:
            raise ConfigError("must be >= 0 and below 1", "outer_momentum", self.outer_momentum)
        if not self.lighthouse:
            raise ConfigError("strategy diloco needs the Lighthouse's HOST:PORT", "lighthouse", None)
        check_rendezvous(self.lighthouse, field_name="lighthouse")

    def _check_shared(self) -> None:
        """The settings the experiment hands to the trainer, checked by their kinds in the experiment's one
        definition (experiment/variables.py: its kind parser, its allowed values)."""
        for name in SHARED_FIELDS:
            value, kind = getattr(self, name), BY_NAME[name].kind
            if value is None:
                continue
            if isinstance(kind, tuple):
                _choice(name, value, kind)
                continue
            try:
                parse_value(kind, value, typed=True)
            except KindError as error:
                raise ConfigError(str(error), name, value) from None

    def _check_rules(self, *names: str) -> None:
        """The rules between variables, as the playbook and the grid apply them (experiment/variables.py):
        the first the config breaks among ``names``, or among all but data_root's (checked with the paths)."""
        for field_name, problem in rule_problems(dataclasses.asdict(self)):
            if field_name in names or (not names and field_name != "data_root"):
                raise ConfigError(problem, field_name, getattr(self, field_name))

    def _check_data_root(self) -> None:
        if self.dataset == "synthetic":
            return
        self._check_rules("data_root")
        root = self.resolved_data_root
        if not Path(root).is_dir():
            raise ConfigError(f"data root not found: {root}", "data_root", root)


def check_rendezvous(address: str, *, field_name: str = "rendezvous") -> None:
    """``HOST:PORT`` with an IPv4 address or host name and a port 1..65535.

    >>> check_rendezvous("10.0.0.1:29500")
    >>> check_rendezvous("10.0.0.1")
    Traceback (most recent call last):
    ...
    trainer.config.ConfigError: rendezvous must be HOST:PORT (rendezvous=10.0.0.1)
    """
    host, _, port = (address or "").rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) <= 65535 or not _HOSTNAME.match(host):
        raise ConfigError(f"{field_name} must be HOST:PORT", field_name, address)


def check_multiaddr(address: str, *, field_name: str, require_peer_id: bool) -> None:
    """Check a multiaddr's shape (``/ip4|ip6|dns…/host/tcp|udp/port[/quic][/p2p/ID]``) without importing
    hivemind."""
    match = _MULTIADDR.match(address or "")
    if match is None:
        raise ConfigError(
            "malformed multiaddr, expected /ip4/HOST/tcp/PORT[/p2p/PEER_ID]", field_name, address
        )
    host, proto = match["host"], match["proto"]
    try:
        if proto == "ip4":
            ipaddress.IPv4Address(host)
        elif proto == "ip6":
            ipaddress.IPv6Address(host)
        elif not _HOSTNAME.match(host):
            raise ValueError(host)
    except ValueError as exc:
        raise ConfigError(f"malformed multiaddr: bad {proto} address {host!r}", field_name, address) from exc
    if int(match["port"]) > 65535:
        raise ConfigError("malformed multiaddr: port out of range", field_name, address)
    if match["quic"] and match["transport"] != "udp":
        raise ConfigError("malformed multiaddr: quic needs udp", field_name, address)
    if require_peer_id and not match["peer"]:
        raise ConfigError("initial peer multiaddr lacks /p2p/PEER_ID", field_name, address)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add one flag per ``RunConfig`` field; flags not given stay absent from the namespace (so a file can
    set them)."""
    for f in dataclasses.fields(RunConfig):
        flag = "--" + f.name.replace("_", "-")
        help_text = f.metadata.get("help", "")
        default_text = f" (default: {f.default})" if f.default is not dataclasses.MISSING else ""
        common: dict[str, Any] = {"dest": f.name, "default": argparse.SUPPRESS}
        if f.name == "local_updates":
            parser.add_argument(
                flag, action=argparse.BooleanOptionalAction, help=help_text + default_text, **common
            )
        elif f.name == "overwrite":
            parser.add_argument(flag, action="store_true", help=help_text, **common)
        elif f.name == "initial_peers":
            parser.add_argument(flag, nargs="*", metavar=f.metadata.get("metavar"), help=help_text, **common)
        else:
            parser.add_argument(
                flag,
                metavar=f.metadata.get("metavar", f.name.upper()),
                help=help_text + default_text,
                **common,
            )


def config_from_namespace(args: argparse.Namespace) -> RunConfig:
    """The validated settings for ``trainer run``: defaults < --config file < flags."""
    names = set(RunConfig.field_names())
    flags = {k: v for k, v in vars(args).items() if k in names}
    return RunConfig.from_sources(flags).validate()


# -------------------------------------------------------------------- helpers


def _coerce(f: dataclasses.Field[Any], value: Any) -> Any:
    """Turn a flag string or a file value into the field's type; raise ConfigError naming the field."""
    type_text = str(f.type)
    if value is None:
        if "None" in type_text:
            return None
        raise ConfigError("a value is required", f.name, value)
    try:
        if type_text.startswith("list"):
            items = value.split() if isinstance(value, str) else list(value)
            return [str(item) for item in items]
        if type_text.startswith("bool"):
            return _to_bool(value)
        if type_text.startswith("int"):
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError(value)
            if (
                isinstance(value, str)
                and value.strip().lower() in ("", "none", "null")
                and "None" in type_text
            ):
                return None
            return int(value) if not isinstance(value, str) else int(value.strip(), 10)
        if type_text.startswith("float"):
            if (
                isinstance(value, str)
                and value.strip().lower() in ("", "none", "null")
                and "None" in type_text
            ):
                return None
            if isinstance(value, bool):
                raise ValueError(value)
            return float(value)
        return str(value)
    except (TypeError, ValueError) as exc:
        kind = type_text.split(" ")[0].split("|")[0]
        raise ConfigError(f"not a valid {kind}", f.name, value) from exc


def _to_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ValueError(value)


def _choice(name: str, value: Any, choices: tuple[Any, ...]) -> None:
    if value not in choices:
        allowed = ", ".join(map(str, choices))
        raise ConfigError(f"unknown {name.replace('_', ' ')}, choose from {allowed}", name, value)


def _at_least(name: str, value: int, minimum: int) -> None:
    if value < minimum:
        raise ConfigError(f"{name.replace('_', ' ')} must be at least {minimum}", name, value)


def _hostname() -> str:
    import socket

    name = socket.gethostname().split(".")[0] or "peer"
    return re.sub(r"[^A-Za-z0-9._-]", "-", name)
