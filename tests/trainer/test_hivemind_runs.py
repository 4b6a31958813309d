"""Real Hivemind peers: separate ``trainer run`` processes on 127.0.0.1.

Each test starts peers as the user would (the bootstrap peer first, the others with the multiaddr it writes),
waits for them, then checks their results files and that none of their processes (DHT, averagers, p2pd)
outlived them. Settings keep epochs short (a few steps each) so a run takes tens of seconds on 2 shared cores.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path
from statistics import median

import pytest
from trainer_testing import REPO, trainer_command, trainer_env

from experiment.results import read_rounds, read_steps, read_summary

pytestmark = [pytest.mark.hivemind, pytest.mark.slow, pytest.mark.cluster]


# small and quick: smallcnn, batch 32, 1 s matchmaking; the tests' target batch sizes give each peer 16 steps
# per epoch, a few seconds: long enough for hivemind's progress tracker to see every peer within an epoch
COMMON = [
    "--strategy", "hivemind", "--model", "smallcnn", "--dataset", "synthetic", "--batch-size", "32",
    "--learning-rate", "0.05", "--vcpus", "1", "--metrics-port", "-1", "--listen", "/ip4/127.0.0.1/tcp/0",
    "--matchmaking-time", "1", "--averaging-timeout", "20", "--finish-grace", "20",
]  # fmt: skip
# the slow peer's niceness: it shares one core with the fast peer at ~0.4 of its weight (CFS: nice 4 vs 0)
SLOW_NICE = 4


class Peer:
    """One ``trainer run`` process in its own session (so its whole process tree can be found and ended)."""

    def __init__(self, name: str, results: Path, args: list[str], niceness: int | None = None) -> None:
        self.name = name
        self.results = results
        self.log = results.parent / f"{name}.log"
        command = trainer_command("run", "--peer-id", name, "--results-dir", str(results), *args)
        env = dict(trainer_env(), PYTHONUNBUFFERED="1")
        with open(self.log, "w") as log:
            self.process = subprocess.Popen(
                command,
                cwd=REPO,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=None if niceness is None else lambda: _share_one_core(niceness),
            )
        self.session = self.process.pid

    def wait(self, timeout: float) -> int:
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"{self.name} did not finish within {timeout:.0f}s:\n{self.tail()}")

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.session, signal.SIGKILL)
        for pid in session_processes(self.session):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=10)

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    @property
    def summary(self) -> dict:
        summary = read_summary(self.results)
        assert summary is not None, f"{self.name} wrote no summary.json:\n{self.tail()}"
        return summary


def _share_one_core(niceness: int) -> None:
    """Run on the first allowed core (peers started so compete for it); niceness > 0 means a smaller share."""
    os.sched_setaffinity(0, [min(os.sched_getaffinity(0))])
    if niceness:
        os.nice(niceness)
        # each peer runs in its own session, so with CFS autogroups its niceness must be the group's too
        with contextlib.suppress(OSError), open("/proc/self/autogroup", "w") as autogroup:
            autogroup.write(str(niceness))


def session_processes(session: int) -> list[int]:
    """Live (non-zombie) processes of a session: a finished peer must leave none behind."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == session and fields[0] != "Z":
            found.append(int(entry))
    return found


def wait_for_multiaddr(bootstrap: Peer, timeout: float = 90.0) -> str:
    path = bootstrap.results / "multiaddrs.txt"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            return path.read_text().split()[0]
        if bootstrap.process.poll() is not None:
            pytest.fail(f"bootstrap peer exited early:\n{bootstrap.tail()}")
        time.sleep(0.2)
    pytest.fail(f"bootstrap peer wrote no multiaddrs.txt in {timeout:.0f}s:\n{bootstrap.tail()}")


@pytest.fixture
def peers(tmp_path):
    """Start peers with ``start(name, args)``; every peer (its whole session) is killed at the end."""
    started: list[Peer] = []

    def start(name: str, args: list[str], niceness: int | None = None) -> Peer:
        peer = Peer(name, tmp_path / name, args, niceness)
        started.append(peer)
        return peer

    yield start
    for peer in started:
        if peer.process.poll() is None:
            peer.kill()
        else:
            for pid in session_processes(peer.session):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


def finish_all(group: list[Peer], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    for peer in group:
        code = peer.wait(max(1.0, deadline - time.monotonic()))
        assert code == 0, f"{peer.name} exited with {code}:\n{peer.tail()}"
    time.sleep(0.5)
    for peer in group:
        left = session_processes(peer.session)
        assert not left, f"{peer.name} left processes behind: {[_cmdline(pid) for pid in left]}"


def _cmdline(pid: int) -> str:
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:120]
    return str(pid)


def run_args(
    run_id: str, *, expected: int, max_steps: int, tbs: int, start_timeout: float = 120
) -> list[str]:
    return [
        *COMMON,
        "--run-id",
        run_id,
        "--peers",
        str(expected),
        "--max-steps",
        str(max_steps),
        "--target-batch-size",
        str(tbs),
        "--start-timeout",
        str(start_timeout),
    ]


def epoch_boundaries(steps: list[dict]) -> list[dict]:
    return [
        row
        for prev, row in zip(steps, steps[1:], strict=False)
        if row["hivemind_epoch"] != prev["hivemind_epoch"]
    ]


def assert_averaging_within_optimizer(steps: list[dict]) -> None:
    """A step's averaging wait is part of its optimizer time (a wait inside another counted once)."""
    over = [r for r in steps if r["averaging_seconds"] > r["optimizer_seconds"] + 1e-6]
    assert not over, [(r["step"], r["optimizer_seconds"], r["averaging_seconds"]) for r in over[:5]]


def first_step_start(steps: list[dict]) -> float:
    return steps[0]["timestamp"] - steps[0]["step_seconds"]


# ---------------------------------------------------------------------------------------------- tests


@pytest.mark.timeout(240)
@pytest.mark.parametrize("local_updates", [False, True], ids=["gradient-averaging", "local-updates"])
def test_two_peers_average_and_agree(peers, local_updates, chance):
    lu_flag = "--local-updates" if local_updates else "--no-local-updates"
    # 1024 samples an epoch: 32 steps of each peer. With local updates every step after the first epoch is an
    # epoch with its own round (docs/hivemind-behaviour.md), a second of matchmaking each: 48 steps reach
    # epoch 2 with about 16 rounds (80 steps took 66 s for some 48 rounds, mostly matchmaking)
    max_steps = 48 if local_updates else 80
    args = [*run_args(f"two-{int(local_updates)}", expected=2, max_steps=max_steps, tbs=1024), lu_flag]
    first = peers("peer-01", args)
    second = peers("peer-02", [*args, "--initial-peers", wait_for_multiaddr(first)])
    finish_all([first, second], timeout=200)

    summaries = [first.summary, second.summary]
    averaged = {"gradients", "parameters"} - ({"gradients"} if local_updates else set())
    for peer, summary in zip((first, second), summaries, strict=True):
        # the testbed's guarantees: complete results, every failed round with its cause, the accounting exact
        assert summary["exit_reason"] in ("max_steps", "collective_finish"), peer.tail()
        assert summary["complete"] is True
        rounds = read_rounds(peer.results)
        assert {r["kind"] for r in rounds} <= averaged, rounds  # no gradient averager with local updates
        assert all(r["cause"] for r in rounds if r["outcome"] != "ok"), rounds
        ok = [r for r in rounds if r["outcome"] == "ok"]
        assert ok, (rounds, peer.tail(15))  # the peers did average (how often is Hivemind's chance)
        assert all(r["group_size"] == 2 and r["allreduce_seconds"] > 0 for r in ok), ok
        steps = read_steps(peer.results)
        assert_averaging_within_optimizer(steps)
        # the CPU split by process: the loop's, Hivemind's DHT, its p2pd and the averagers each have a share
        split = summary["cpu_received"]["process_tree_by_role"]
        roles = {"trainer", "dht", "p2pd", "state_averager"} | (set() if local_updates else {"grad_averager"})
        assert set(split) == roles, split
        assert split["trainer"] > 0 and split["dht"] > 0 and split["p2pd"] > 0, split
        assert sum(split.values()) == pytest.approx(summary["cpu_received"]["process_tree_seconds"], abs=0.05)
        # how the rounds went on 2 shared cores: recorded, not asserted
        epoch = summary["hivemind_epoch"]
        chance.expect(epoch >= 2, f"{peer.name} reached epoch 2", epoch)
        chance.expect(len(ok) >= 2, f"{peer.name} had 2 successful rounds", len(ok))
        timeouts = [(r["epoch"], r["kind"], r["cause"]) for r in rounds if r["outcome"] == "timeout"]
        chance.expect(not timeouts, f"{peer.name} had no round time out", timeouts)
        seen = steps[0]["peers"]
        chance.expect(seen == 2, f"{peer.name}'s tracker saw the other before step 1", seen)
        sync = summary["strategy_details"]["tracker_sync_seconds"]
        chance.expect(sync < 15, f"{peer.name}'s trackers synced within 15 s", sync)
        boundaries = epoch_boundaries(steps)
        chance.expect(
            boundaries and max(r["averaging_seconds"] for r in boundaries) > 0,
            f"{peer.name} blocked on averaging at an epoch boundary",
        )
    assert {s["strategy_details"]["stop_requested_by"] for s in summaries} <= {"peer-01", "peer-02"}
    first_epoch = [s["strategy_details"]["epochs"][0]["steps"] for s in summaries]
    chance.expect(min(first_epoch) >= max(first_epoch) / 3, "the peers shared the first epoch", first_epoch)
    # peers averaging gradients whose last rounds both succeeded in the same epoch, each with the full share
    # received, hold the same parameters: asserted whenever that holds, recorded when it does not. With local
    # updates nothing makes them equal: the parameter round runs in the background and the delta rule keeps
    # the local steps each peer took while it ran and after it (recorded only)
    details = [s["strategy_details"] for s in summaries]
    same_epoch = chance.expect(
        details[0]["hivemind_epoch"] == details[1]["hivemind_epoch"],
        "the peers ended in the same epoch",
        [d["hivemind_epoch"] for d in details],
    )
    last_rounds = [read_rounds(p.results)[-1] for p in (first, second)]
    full = all(
        r["outcome"] == "ok" and (r.get("received_share") is None or r["received_share"] >= 1.0)
        for r in last_rounds
    )
    sample_a, sample_b = details[0]["final_params_sample"], details[1]["final_params_sample"]
    if local_updates:
        apart = max(abs(a - b) for a, b in zip(sample_a, sample_b, strict=True))
        chance.expect(apart < 1e-6, "the peers ended with equal parameters (local updates)", apart)
    elif same_epoch and full and last_rounds[0]["epoch"] == last_rounds[1]["epoch"]:
        assert sample_a == pytest.approx(sample_b, abs=1e-6), (sample_a, sample_b)
        assert details[0]["final_params_norm"] == pytest.approx(details[1]["final_params_norm"], rel=1e-6)
    else:
        failed = [
            condition
            for condition, held in (
                ("the peers ended in the same epoch", same_epoch),
                ("both last rounds were ok with the full share received", full),
                (
                    "both last rounds were of the same epoch",
                    last_rounds[0]["epoch"] == last_rounds[1]["epoch"],
                ),
            )
            if not held
        ]
        chance.expect(
            False,
            "equal parameters were checked (their conditions held)",
            f"not checked: {'; '.join(failed)}; last rounds {last_rounds}",
        )


@pytest.mark.timeout(240)
def test_staggered_start_waits_for_the_last_peer(peers):
    stagger = 4.0  # each arrival gap is this plus the later peer's own start-up, so the checks hold
    args = run_args("stagger", expected=3, max_steps=40, tbs=1536)
    group = [peers("peer-01", args)]
    launched = [time.time()]
    address = wait_for_multiaddr(group[0])
    for name in ("peer-02", "peer-03"):
        time.sleep(stagger)
        launched.append(time.time())
        group.append(peers(name, [*args, "--initial-peers", address]))
    finish_all(group, timeout=200)

    summaries = [peer.summary for peer in group]
    steps = [read_steps(peer.results) for peer in group]
    arrived = [s["barrier_release_timestamp"] - s["start_wait_seconds"] for s in summaries]
    starts = [first_step_start(rows) for rows in steps]
    for peer, start in zip(group, starts, strict=True):
        assert start >= max(arrived) - 0.5, f"{peer.name} stepped before the last peer arrived"
    # each peer waited from its arrival to the last one's: at least the launch stagger, never more than the
    # time since its own launch (start-up takes 10-30 s here, so arrivals spread a little more than launches)
    waits = [s["start_wait_seconds"] for s in summaries]
    assert waits[0] > waits[1] > waits[2], waits
    assert waits[0] - waits[2] >= 2 * stagger - 1, waits
    assert waits[0] - waits[1] >= stagger - 1, waits
    assert waits[2] < 5, waits
    for wait, launch, summary in zip(waits, launched, summaries, strict=True):
        assert wait < summary["barrier_release_timestamp"] - launch, (wait, launch, summary)
    assert max(starts) - min(starts) < 3.0, f"first steps {max(starts) - min(starts):.2f}s apart"
    for peer, summary in zip(group, summaries, strict=True):
        assert summary["exit_reason"] in ("max_steps", "collective_finish"), peer.tail()
        assert read_rounds(peer.results), f"{peer.name} took part in no averaging round"


@pytest.mark.timeout(240)
def test_peers_of_different_speeds_finish_together(peers, chance):
    args = run_args("speeds", expected=2, max_steps=80, tbs=1024)
    # both on one core, the slow one with a smaller share of it (a cgroup CPU quota is not enforced here)
    fast = peers("fast", args, niceness=0)
    address = wait_for_multiaddr(fast)
    slow = peers("slow", [*args, "--initial-peers", address], niceness=SLOW_NICE)
    finish_all([fast, slow], timeout=200)

    summaries = {peer.name: peer.summary for peer in (fast, slow)}
    epochs = {name: s["hivemind_epoch"] for name, s in summaries.items()}
    assert abs(epochs["fast"] - epochs["slow"]) <= 1, epochs
    reasons = {name: s["exit_reason"] for name, s in summaries.items()}
    assert set(reasons.values()) <= {"max_steps", "collective_finish"}, reasons
    assert "collective_finish" in reasons.values(), reasons
    for peer in (fast, slow):
        rounds = read_rounds(peer.results)
        assert rounds, f"{peer.name} took part in no averaging round"
        assert all(r["cause"] for r in rounds if r["outcome"] != "ok"), rounds
        timeouts = [(r["epoch"], r["kind"]) for r in rounds if r["outcome"] == "timeout"]
        chance.expect(not timeouts, f"{peer.name} had no round time out", timeouts)
        chance.expect(rounds[-1]["outcome"] == "ok", f"{peer.name}'s last round succeeded", rounds[-1])
        assert_averaging_within_optimizer(read_steps(peer.results))
    compute = {
        peer.name: median(r["compute_seconds"] for r in read_steps(peer.results)) for peer in (fast, slow)
    }
    assert compute["slow"] > 1.5 * compute["fast"], f"the slow peer was not slower: {compute}"


# one peer alone, waiting out its start timeout: nothing of this host is timed (`make test`: the local
# cluster's lane, marker local_lane)
@pytest.mark.load_tolerant
@pytest.mark.local_lane  # its start timeout
@pytest.mark.timeout(120)
def test_expected_peer_that_never_comes(peers):
    lonely = peers("lonely", run_args("lonely", expected=2, max_steps=10, tbs=256, start_timeout=6))
    code = lonely.wait(100)
    assert code == 3, lonely.tail()
    errors = [line for line in lonely.log.read_text().splitlines() if line.startswith("trainer: error:")]
    assert len(errors) == 1 and "1 of 2 expected peers arrived" in errors[0], lonely.tail()
    summary = lonely.summary
    assert summary["exit_reason"] == "start_timeout" and summary["complete"] is False
    assert summary["steps"] == 0
    assert not read_steps(lonely.results)
    time.sleep(0.5)
    assert not session_processes(lonely.session), "the peer left processes behind"


@pytest.mark.load_tolerant
@pytest.mark.local_lane  # its start timeout
@pytest.mark.timeout(120)
def test_unreachable_initial_peer_is_one_clear_error(peers):
    import socket

    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    nowhere = f"/ip4/127.0.0.1/tcp/{port}/p2p/QmXfw7bXTd3Ab7ERtqgnSBRHb7a4zG8fUX4ArvpGSRbAk6"
    args = [
        *run_args("nowhere", expected=2, max_steps=10, tbs=256, start_timeout=4),
        "--initial-peers",
        nowhere,
    ]
    started = time.monotonic()
    peer = peers("stranded", args)
    code = peer.wait(100)
    assert code == 2, peer.tail()
    errors = [line for line in peer.log.read_text().splitlines() if line.startswith("trainer: error:")]
    assert len(errors) == 1 and "cannot reach the initial peers" in errors[0] and nowhere in errors[0], errors
    assert time.monotonic() - started < 90
    assert not read_steps(peer.results)
    time.sleep(0.5)
    assert not session_processes(peer.session), "the peer left processes behind"


@pytest.mark.timeout(200)
def test_a_peer_stopped_by_sigterm_leaves_cleanly_and_the_other_goes_on(peers):
    args = [*run_args("sigterm", expected=2, max_steps=64, tbs=1024), "--averaging-timeout", "10"]
    staying = peers("staying", args)
    leaving = peers("leaving", [*args, "--initial-peers", wait_for_multiaddr(staying)])
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # stop it mid-run, after its first epoch
        rows = read_steps(leaving.results)
        if rows and rows[-1]["hivemind_epoch"] >= 1:
            break
        assert leaving.process.poll() is None, leaving.tail()
        time.sleep(0.2)
    leaving.process.send_signal(signal.SIGTERM)
    stopped = time.monotonic()
    assert leaving.wait(60) == 0, leaving.tail()
    assert time.monotonic() - stopped < 30, "SIGTERM took too long"
    assert leaving.summary["exit_reason"] == "signal" and leaving.summary["complete"] is False
    time.sleep(0.5)
    assert not session_processes(leaving.session), [_cmdline(p) for p in session_processes(leaving.session)]
    # the other peer is not held up for long: at most one averaging timeout, then it trains on alone
    finish_all([staying], timeout=120)
    assert staying.summary["exit_reason"] in ("max_steps", "collective_finish"), staying.tail()
    waits = [r["blocking_seconds"] or 0.0 for r in read_rounds(staying.results)]
    assert max(waits, default=0.0) < 10 + 5, waits


@pytest.mark.timeout(300)
def test_a_paused_peer_finds_itself_behind_and_says_so(peers):
    """A peer that was paused while the other trained on comes back epochs behind; Hivemind throws
    its samples away and loads the state, and its rounds.csv names that lost epoch (cause ``behind``)."""
    # max steps far beyond the pause: peer-01 must not finish (and stop the run) while peer-02 is paused.
    # A 5 s averaging timeout: alone, each of peer-01's rounds waits that long for the paused peer (20 s made
    # the three epochs a minute)
    args = [*run_args("behind", expected=2, max_steps=400, tbs=1024), "--averaging-timeout", "5"]
    first = peers("peer-01", args)
    second = peers("peer-02", [*args, "--initial-peers", wait_for_multiaddr(first)])
    # pause it once it has trained with the other (a successful round): a peer paused before it ever synced
    # has no collaboration to fall behind (CI saw such a peer resume with only its no_group rounds)
    deadline = time.monotonic() + 120
    while not any(row["outcome"] == "ok" for row in read_rounds(second.results)):
        assert time.monotonic() < deadline and second.process.poll() is None, second.tail()
        time.sleep(0.2)
    os.killpg(second.session, signal.SIGSTOP)
    try:
        # peer-01 goes on alone: its rounds find nobody, its epochs advance without peer-02. It must get more
        # than one epoch ahead of where peer-02 stopped (either's steps.csv may lag a round): a peer one epoch
        # behind may catch up by joining the other's next round (Hivemind tolerates one epoch of lag), which
        # is not the path under test. Three epochs leave a gap however the first round after the pause goes.
        def epoch(peer: Peer) -> int:
            return max((row["hivemind_epoch"] for row in read_steps(peer.results)), default=0)

        paused_at = max(epoch(first), epoch(second))
        deadline = time.monotonic() + 150
        while epoch(first) < paused_at + 3 and first.process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
    finally:
        os.killpg(second.session, signal.SIGCONT)

    # its first round after the pause finds it behind; then both are stopped as a user would (SIGTERM: a
    # clean exit with a summary) instead of training on to max_steps
    def behind_rows() -> list[dict]:
        return [row for row in read_rounds(second.results) if row["cause"] == "behind"]

    deadline = time.monotonic() + 120
    while not behind_rows() and second.process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.5)
    for peer in (first, second):
        if peer.process.poll() is None:
            peer.process.send_signal(signal.SIGTERM)
    finish_all([first, second], timeout=120)
    behind = behind_rows()
    assert behind, [(r["epoch"], r["outcome"], r["cause"]) for r in read_rounds(second.results)]
    assert behind[0]["outcome"] == "failed" and behind[0]["error"].startswith("behind: at epoch"), behind[0]
    assert second.summary["rounds_failed_by_cause"].get("behind", 0) == len(behind)
