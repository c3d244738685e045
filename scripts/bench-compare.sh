#!/usr/bin/env bash
# Compares the working tree's `tandem` with the one built from REV on one benchmark, on this
# machine, alternating the two binaries so that drift (a warming disk cache, other load, a slow
# spell of the machine) weighs on both alike.
#
#   scripts/bench-compare.sh REV [--runs N] [--figure REGEX] [BENCH ARGS…]
#   scripts/bench-compare.sh HEAD~5 scheduler --nodes 5000 --pods 10000
#   scripts/bench-compare.sh dce8460 --runs 6 api --pods 10000 --clients 32
#
# REV is built in a target directory of its own (target/bench-compare/<commit>, kept between
# runs) from a `git worktree` of that commit; the working tree is built with the usual release
# profile. Then `tandem bench BENCH ARGS…` runs N times per binary (default 4), alternating
# old/new/new/old/old/new…, each run's output kept in target/bench-compare/logs/.
#
# Printed: for each run the headline figure (the first number matched by --figure; by default the
# first `N pods/s`, `N creates/s`, `N requests/s`, `N queries/s`, …) and the CPU time the run
# used (user + system of the benchmark process and its children, from getrusage); then each
# binary's series, medians, and the ratio new/old of both. A ratio of the figure under 1 (for
# rates) or of the CPU over 1 means the new binary is slower.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ $# -lt 2 ]; then
  sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
rev="$1"
shift
runs=4
figure='([0-9][0-9,]*\.?[0-9]*) (pods|creates|requests|queries|binds|objects|updates|ops)/s'
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs="$2"; shift 2 ;;
    --figure) figure="$2"; shift 2 ;;
    *) break ;;
  esac
done
[ $# -gt 0 ] || { echo "bench-compare: name a benchmark (scheduler, api, nodes, …)" >&2; exit 2; }

commit=$(git rev-parse --verify "$rev^{commit}")
short=$(git rev-parse --short "$commit")
root=$PWD/target/bench-compare
old_target=$root/$short
worktree=$root/src-$short
logs=$root/logs
mkdir -p "$root" "$logs"

echo "bench-compare: building $short (old) in $old_target"
if [ ! -d "$worktree" ]; then
  git worktree add --detach "$worktree" "$commit" >/dev/null
fi
(cd "$worktree" && CARGO_TARGET_DIR="$old_target" cargo build --release --locked -p tandem 2>&1 | tail -n 2)
old_bin=$old_target/release/tandem

echo "bench-compare: building the working tree (new)"
cargo build --release --locked -p tandem 2>&1 | tail -n 2
new_bin=$PWD/target/release/tandem

# One run: the benchmark's output to a log, then "FIGURE CPU_SECONDS" on stdout.
run_one() {
  local bin="$1" log="$2"
  shift 2
  python3 - "$bin" "$log" "$figure" "$@" <<'PY'
import re, resource, subprocess, sys
bin_, log, figure, args = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
with open(log, "w") as out:
    rc = subprocess.call([bin_, "bench", *args], stdout=out, stderr=subprocess.STDOUT)
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
text = open(log).read()
m = re.search(figure, text)
value = m.group(1).replace(",", "") if m else "nan"
if rc != 0:
    print(f"bench-compare: run failed (exit {rc}), see {log}", file=sys.stderr)
    value = "nan"
print(value, f"{ru.ru_utime + ru.ru_stime:.2f}")
PY
}

declare -a old_fig old_cpu new_fig new_cpu
for ((i = 0; i < runs; i++)); do
  # old, new, new, old, old, new, …: each pair swaps who goes first.
  if [ $((i % 2)) -eq 0 ]; then order="old new"; else order="new old"; fi
  for which in $order; do
    if [ "$which" = old ]; then bin=$old_bin; else bin=$new_bin; fi
    log=$logs/$which-$((i + 1)).log
    read -r fig cpu < <(run_one "$bin" "$log" "$@")
    printf 'run %d %-3s %12s   %7s s CPU   (%s)\n' "$((i + 1))" "$which" "$fig" "$cpu" "$log"
    if [ "$which" = old ]; then old_fig+=("$fig"); old_cpu+=("$cpu"); else new_fig+=("$fig"); new_cpu+=("$cpu"); fi
  done
done

python3 - "$short" "${old_fig[*]}" "${old_cpu[*]}" "${new_fig[*]}" "${new_cpu[*]}" <<'PY'
import math, statistics, sys
short = sys.argv[1]
series = [[float(x) for x in a.split()] for a in sys.argv[2:]]
old_fig, old_cpu, new_fig, new_cpu = series
def med(xs):
    xs = [x for x in xs if not math.isnan(x)]
    return statistics.median(xs) if xs else float("nan")
def show(xs):
    return " / ".join(f"{x:,.0f}" if x >= 100 else f"{x:.2f}" for x in xs)
print()
print(f"old ({short}):   figure {show(old_fig)}   median {med(old_fig):,.2f}")
print(f"new (worktree): figure {show(new_fig)}   median {med(new_fig):,.2f}")
print(f"old CPU s: {show(old_cpu)}   median {med(old_cpu):.2f}")
print(f"new CPU s: {show(new_cpu)}   median {med(new_cpu):.2f}")
rf = med(new_fig) / med(old_fig) if med(old_fig) else float("nan")
rc = med(new_cpu) / med(old_cpu) if med(old_cpu) else float("nan")
print(f"ratio new/old: figure {rf:.3f} ({(rf - 1) * 100:+.1f} %), CPU {rc:.3f} ({(rc - 1) * 100:+.1f} %)")
PY
