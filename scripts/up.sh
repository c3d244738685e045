#!/usr/bin/env bash
# Builds tandem and runs the whole cluster in the foreground: `tandem up`. Extra arguments are
# passed on (e.g. --port 6443 --data-dir .tandem).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build-images.sh
cargo build --locked --release -p tandem
exec target/release/tandem up "$@"
