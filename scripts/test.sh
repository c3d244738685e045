#!/usr/bin/env bash
# Runs every test: unit, contract, integration and end-to-end (the built `tandem` binary driven
# by the machine's kubectl). Installs what the tests need first.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build-images.sh
cargo build --locked -p tandem
cargo nextest run --workspace --locked --no-fail-fast
