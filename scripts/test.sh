#!/usr/bin/env bash
# Runs every test: formatting and lints (rustfmt, clippy with warnings as errors), then unit,
# contract, integration and end-to-end tests (the built `tandem` binary driven by the machine's
# kubectl). Installs what the tests need first.
set -euo pipefail
cd "$(dirname "$0")/.."
# A fresh checkout gains nothing from incremental compilation and it costs gigabytes of disk.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
scripts/install-deps.sh
scripts/build-images.sh
cargo fmt --all --check
# docs/conformance.md names tests that must exist and totals that must add up.
scripts/conformance.sh
cargo clippy --locked --workspace --all-targets -- -D warnings
cargo nextest run --workspace --locked --no-fail-fast
