#!/usr/bin/env bash
# Creates (once) the Python environment the offline stub provider runs in and prints its python.
# Kept apart from .venv: the `tf` package pins protobuf<6, which the trainer's stack does not accept.
# Usage: infra/testing/stub-venv.sh [VENV_DIR]   (default: .cache/tf-stub-venv in the repository)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
venv="${1:-$repo/.cache/tf-stub-venv}"
python="$venv/bin/python"
stamp="$venv/.requirements.txt"

if ! [ -x "$python" ] || ! cmp -s "$here/requirements.txt" "$stamp" \
  || ! "$python" -c 'import grpc, cryptography, tf.gen.tfplugin_pb2' 2>/dev/null; then
  python3 -m venv "$venv" >&2
  "$python" -m pip install --quiet --disable-pip-version-check -r "$here/requirements.txt" >&2
  cp "$here/requirements.txt" "$stamp"
fi
echo "$python"
