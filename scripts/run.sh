#!/usr/bin/env bash
# The README's main command: set up, build, then run the main job.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh release
./build/graphtrain --help
