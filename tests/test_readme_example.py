"""scripts/readme_example.py: the README's example output is written from a run's records, between its
markers, and the README holds such a block."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))

import readme_example  # noqa: E402


def _demo_results(root: Path, peers: int = 8) -> Path:
    results = root / "hivemind-resnet18-fashion-mnist-p8-20261205T100000Z"
    for index in range(1, peers + 1):
        peer = results / f"peer-{index:02d}"
        peer.mkdir(parents=True)
        summary = {
            "complete": True, "exit_reason": "max_steps", "steps": 50 + index, "samples_per_second": 4.0,
            "time_dilation": 5.5, "rounds_ok": 12, "rounds_failed": 0, "final_loss": 1.1,
            "modelled": {"samples_per_second": 22.0 + index, "components": {"step_seconds": {"mean": 1.5}}},
            "cpu_received": {"cores_used": 0.2, "throttled_fraction": 0.3},
        }  # fmt: skip
        (peer / "summary.json").write_text(json.dumps(summary))
    experiment = {
        "experiment_id": results.name, "time_dilation": 5.5, "started": "2026-12-05T10:00:00+00:00",
        "finished": "2026-12-05T10:04:30+00:00", "hosts": {"peer-01": {"cpu_probe": {"cores_used": 0.21}}},
        "speed_fairness": {"lines": ["speed of equal peers (2 vCPUs): 4.0-4.0 measured samples/s, 0% apart"]},
    }  # fmt: skip
    (results / "experiment.json").write_text(json.dumps(experiment))
    return results


def test_the_block_is_written_from_the_records_between_the_markers(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text(f"# Title\n\nbefore\n{readme_example.START}\nold output\n{readme_example.END}\nafter\n")
    results = _demo_results(tmp_path)
    code = readme_example.main(["--results", str(results), "--seconds", "269", "--readme", str(readme)])
    text = readme.read_text()
    assert code == 0 and "old output" not in text and text.startswith("# Title\n\nbefore\n")
    assert text.endswith(f"{readme_example.END}\nafter\n")
    block = text.split(readme_example.START)[1].split(readme_example.END)[0]
    assert "(2026-12-05, " in block and "D = 5.50): 4 min 29 s from the command" in block, block
    rows = re.findall(r"^peer-(\d+) ", block, re.M)
    assert rows == ["01", "02", "07", "08"] and "\n...\n" in block, block  # the middle peers elided
    assert f"Experiment {results.name} (results in results/{results.name})" in block
    assert "speed of equal peers (2 vCPUs)" in block
    # the modelled rate of peer-08 (summary's modelled values, as the playbook prints them)
    assert re.search(r"^peer-08\s+58\s+30\.00\s", block, re.M), block


def test_a_readme_without_the_markers_is_refused_and_left_as_it_was(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("# Title\n")
    results = _demo_results(tmp_path)
    try:
        readme_example.main(["--results", str(results), "--seconds", "10", "--readme", str(readme)])
    except SystemExit as stop:
        assert "needs the markers" in str(stop)
    else:
        raise AssertionError("no error for a README without markers")
    assert readme.read_text() == "# Title\n"


def test_the_readme_shows_a_generated_block():
    text = (REPO / "README.md").read_text()
    assert text.count(readme_example.START) == 1 and text.count(readme_example.END) == 1
    block = text.split(readme_example.START)[1].split(readme_example.END)[0]
    caption = r"A run on this machine \(\d{4}-\d\d-\d\d, \d+ cores, .*\): \d+ min \d\d s from the"
    assert re.search(caption, block), block
    assert "\n```\nExperiment " in block
