#!/usr/bin/env bash
# Build the trainer's wheel (packages trainer and experiment) reproducibly (same sources -> byte-identical
# wheel), so the trainer role can ship it and reinstall only when the sources changed. Usage: build-trainer-wheel.sh SOURCE_DIR OUT_DIR
# Prints the wheel's path. The wheel of sources built before is reused (OUT_DIR/.source-<hash of the sources>
# names it): pip's build takes about 2 s, and every converge of the trainer role asks.
set -euo pipefail
src=$(cd "${1:?source dir}" && pwd)
out=${2:?output dir}
python=${PYTHON:-$src/.venv/bin/python}
[ -x "$python" ] || python=python3
mkdir -p "$out"
# what runs on a VM: the trainer and the package it shares with the controller (not the controller itself)
sources() {
  tar -C "$src" --exclude=__pycache__ --exclude='*.pyc' --sort=name --mtime=@315532800 --owner=0 --group=0 \
    --numeric-owner -cf - pyproject.toml trainer experiment
}
stamp="$out/.source-$(sources | sha256sum | cut -c1-16)"
if [ -s "$stamp" ] && [ -s "$out/$(cat "$stamp")" ]; then echo "$out/$(cat "$stamp")"; exit 0; fi
work=$(mktemp -d)
staged=$(mktemp -d "$out/.build.XXXXXX") # on out's file system: the wheel appears there by an atomic rename
trap 'rm -rf "$work" "$staged"' EXIT
sources | tar -C "$work" -xf -
SOURCE_DATE_EPOCH=315532800 "$python" -m pip wheel --quiet --no-deps --no-build-isolation \
  --wheel-dir "$staged" "$work" >&2
wheel=$(basename "$staged"/testbed_trainer-*.whl)
# concurrent builds (parallel Molecule scenarios) never see a missing or half-written wheel or stamp
mv -f "$staged/$wheel" "$out/$wheel"
find "$out" -maxdepth 1 -name 'testbed_trainer-*.whl' ! -name "$wheel" -delete
find "$out" -maxdepth 1 -name '.source-*' ! -name "$(basename "$stamp")" -delete
echo "$wheel" > "$staged/stamp" && mv -f "$staged/stamp" "$stamp"
echo "$out/$wheel"
