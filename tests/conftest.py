"""The test gate's rules for cluster tests.

A test marked ``cluster`` starts the local cluster or real peers (Hivemind, gloo) on this machine's 2 shared
cores. Such a test asserts what the testbed guarantees (results complete and parseable, every failed round
with a cause, the barrier released everyone, faults recorded, nothing left running). What depends on
Hivemind's chance on an overloaded host (how many rounds formed, a partial reply, equal speed, equal CPU under
load) goes through the ``chance`` fixture instead: recorded and printed at the end of the run, never failing
it, and kept: each observation is appended to its session's file under ``test-results/observations/``
(tests/observations.py; one session per `make test`, whose passes share ``TESTBED_TEST_SESSION``), and the end
of the run says how often each held over the last sessions kept there, so that one that holds less often over
time is seen (``python tests/observations.py`` says the same).

A cluster test that still fails by chance is rerun once (pytest-rerunfailures); unit and Molecule tests never
are. The end of the run lists every rerun with its first failure, so a flake is counted, never hidden.
"""

from __future__ import annotations

import datetime
import json
import os
from dataclasses import asdict

import pytest
import shared_cluster
from observations import Observation, history_lines, last_sessions, observations_dir, read, session_file

pytest_plugins = ["pytester"]

CLUSTER_RERUNS = 1
#: the session every process of a run (pytest-xdist's workers too) writes its observations under
SESSION_VARIABLE = "TESTBED_TEST_SESSION"


class Chance:
    """``chance.expect(held, what, detail)``: an outcome that depends on Hivemind's timing or on the host's
    scheduling, recorded."""

    def __init__(self, test: str, sink: list[Observation]) -> None:
        self._test = test
        self._sink = sink

    def expect(self, held: object, what: str, detail: object = "") -> bool:
        at = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
        observation = Observation(
            self._test, what, bool(held), str(detail)[:400], os.environ.get(SESSION_VARIABLE, ""), at
        )
        self._sink.append(observation)
        path = session_file(observation.session or "unnamed")
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as kept:  # one short line: appends from workers do not mix
            kept.write(json.dumps(asdict(observation)) + "\n")
        return bool(held)


class ClusterGate:
    """Marks cluster tests for one rerun, collects reruns and chance observations, prints both at the end."""

    def __init__(self) -> None:
        self.observations: list[Observation] = []
        self.reruns: list[tuple[str, str, str]] = []
        self.cluster_tests: set[str] = set()

    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        for item in items:
            if item.get_closest_marker("cluster") and not item.get_closest_marker("molecule"):
                item.add_marker(pytest.mark.flaky(reruns=CLUSTER_RERUNS))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "setup" and "cluster" in report.keywords:
            self.cluster_tests.add(report.nodeid)
        if report.outcome == "rerun":
            first_failure = "\n".join(report.longreprtext.splitlines()[-30:])
            self.reruns.append((report.nodeid, report.when, first_failure))

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if not self.cluster_tests:
            return
        write = terminalreporter.write_line
        terminalreporter.section("cluster tests: reruns")
        write(f"{len(self.cluster_tests)} cluster test(s) run, {len(self.reruns)} rerun(s)")
        for nodeid, when, failure in self.reruns:
            write(f"RERUN {nodeid} (failed in {when}); its first failure:")
            for line in failure.splitlines():
                write(f"    {line}")
        session = os.environ.get(SESSION_VARIABLE, "")
        mine = session_file(session or "unnamed")
        # this run's, from every process (pytest-xdist's workers record in their own), else this process's
        observations = (read(mine) if session and mine.exists() else []) or self.observations
        if observations:
            terminalreporter.section("cluster tests: Hivemind's chance, recorded and not asserted")
            missed = sum(not o.held for o in observations)
            write(f"{len(observations)} recorded, {missed} did not hold")
            for o in observations:
                write(f"{'held    ' if o.held else 'NOT HELD'} {o.test}: {o.what}  [{o.detail}]")
            files = last_sessions(observations_dir())
            write(f"kept in {mine}; how often each held over the last {len(files)} session(s):")
            whats = {o.what for o in observations}
            for line in history_lines(files):
                if line.split(": held ")[0] in whats:
                    write(f"    {line}")


def pytest_configure(config: pytest.Config) -> None:
    # before pytest-xdist starts its workers, which inherit it
    os.environ.setdefault(SESSION_VARIABLE, datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%S.%fZ"))
    config.pluginmanager.register(ClusterGate(), "testbed-cluster-gate")


@pytest.hookimpl(tryfirst=True)  # before -m selects by the marker set here
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests on the shared local cluster carry the marker ``local_cluster`` (`make test` runs them as one
    lane: Makefile) and run last, in their own order: its containers (Ceph's daemons, Prometheus, the
    exporters) would otherwise idle beside every later test, on the same two cores, until the session's end
    removes them (``local_cluster``)."""
    for item in items:
        if "local_cluster" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.local_cluster)
    items.sort(key=lambda item: item.get_closest_marker("local_cluster") is not None)


@pytest.fixture
def chance(request) -> Chance:
    gate = request.config.pluginmanager.get_plugin("testbed-cluster-gate")
    attempt = getattr(request.node, "execution_count", 1)  # set by pytest-rerunfailures
    name = request.node.nodeid + (f" (attempt {attempt})" if attempt > 1 else "")
    return Chance(name, gate.observations)


@pytest.fixture(scope="session")
def local_cluster():
    """The tests' local cluster (tests/shared_cluster.py), shared by every end-to-end test of the session:
    the node image must exist (make image); every container the tests started is removed at the end, and
    nothing of them may be left (containers, the network, host processes in their cgroups)."""
    image = shared_cluster.NODE_IMAGE
    assert shared_cluster.node_image_exists(), f"{image} is missing: run `make image` first"
    yield shared_cluster.ISOLATED_CLUSTER
    containers = shared_cluster.container_ids()
    removed = shared_cluster.teardown()
    assert removed.returncode == 0, removed.stdout[-3000:]
    # the teardown leaves nothing: no container, network, Ceph daemon, ceph-fuse mount or trainer process
    assert shared_cluster.leftovers(containers) == [], removed.stdout[-3000:]
