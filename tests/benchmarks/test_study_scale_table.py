"""benchmarks/study_scale.py's table: a configuration recorded by an earlier call with other
settings is listed apart and enters no S, E or local; E is the report's scaling efficiency."""

from __future__ import annotations

import json

from benchmarks.study_scale import experiment_document, parse_args, plan, table


def _write(args, config, *, rate: float, **changed) -> None:
    document = experiment_document(args, config, "run", [], True, 0.0)
    document["settings"].update(changed)
    directory = args.out / config.directory
    for index in range(config.peers):
        peer = directory / f"peer-{index + 1:02d}"
        peer.mkdir(parents=True)
        components = {name: {"mean": 0.1} for name in ("step_seconds", "data_seconds", "compute_seconds")}
        components["averaging_seconds"] = {"mean": 0.0}
        summary = {"steps": 10, "samples_per_second": rate, "components": components}
        (peer / "summary.json").write_text(json.dumps(summary))
    (directory / "experiment.json").write_text(json.dumps(document))


def test_rows_of_another_call_are_refused_and_efficiency_is_per_vcpu(tmp_path):
    args = parse_args(["--total-vcpus", "2", "--peers", "2", "--local-updates", "off", "--out", str(tmp_path),
                       "--table-only"])  # fmt: skip
    base, solo, peers = plan(2, [2], [False])
    _write(args, base, rate=100.0)
    _write(args, solo, rate=60.0, max_steps=999)  # an earlier call's, with other steps
    _write(args, peers, rate=40.0)
    lines = table(args, [base, solo, peers])
    rows = {line.split()[0]: line.split() for line in lines[1:]}
    assert " ".join(rows["p2-solo"][1:]).startswith(
        "not in the table: recorded with max_steps 999 (this call"
    )
    hivemind = rows["p2-luoff"]
    assert float(hivemind[11]) == 0.8  # S: 2 x 40 over 100
    assert float(hivemind[12]) == 0.8  # E: S per vCPU, the peers sharing the baseline's 2 cores
    assert hivemind[13] == "-"  # no local ratio against a solo reference of other settings
