#!/usr/bin/env bash
# Checks docs/conformance.md, the map of Kubernetes' conformance entries to tandem's tests:
# every row's status is covered, n/a or missing; every `covered` row names tests that exist
# (the file is there and defines `fn NAME` for Rust or `def NAME` for Python); no codename
# appears twice; and the document's totals line matches the rows. Prints the totals and any
# problem, and exits non-zero on a problem.
#
#   scripts/conformance.sh            check
#   scripts/conformance.sh --update   rewrite only the totals line, then check
#
# Needs bash and python3, nothing else; runs no build.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
doc="$root/docs/conformance.md"

update=0
case "${1:-}" in
  "") ;;
  --update) update=1 ;;
  -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
  *) echo "usage: $0 [--update]" >&2; exit 2 ;;
esac

[ -f "$doc" ] || { echo "conformance: $doc not found" >&2; exit 1; }

exec python3 - "$root" "$doc" "$update" <<'PY'
import os
import re
import sys

root, doc, update = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
STATUSES = ("covered", "n/a", "missing")
TOTALS = re.compile(r"^Totals: (\d+) entries — covered (\d+), not applicable (\d+), missing (\d+)\.$")
REF = re.compile(r"`(crates/[A-Za-z0-9_./-]+\.(?:rs|py))::([A-Za-z_][A-Za-z0-9_]*)`")


def split_row(line):
    """The cells of a Markdown table row; `|` inside code spans does not split."""
    body = line.strip()
    if body.startswith("|"):
        body = body[1:]
    if body.endswith("|"):
        body = body[:-1]
    cells, cur, i, fence = [], [], 0, 0
    while i < len(body):
        ch = body[i]
        if ch == "`":
            j = i
            while j < len(body) and body[j] == "`":
                j += 1
            run = j - i
            if fence == 0:
                fence = run
            elif fence == run:
                fence = 0
            cur.append(body[i:j])
            i = j
            continue
        if ch == "|" and fence == 0:
            cells.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
        i += 1
    cells.append("".join(cur).strip())
    return cells


def code_span(cell):
    """The text of a cell that is a single code span, else None."""
    m = re.fullmatch(r"(`+)(.*?)\1", cell)
    if not m:
        return None
    text = m.group(2)
    if len(text) >= 2 and text.startswith(" ") and text.endswith(" ") and text.strip():
        text = text[1:-1]
    return text


with open(doc, encoding="utf-8") as f:
    lines = f.read().split("\n")

problems = []
rows = []
seen = {}
AREA = re.compile(r"^## .*\(`test/e2e/([a-z]+)`")
area = None
by_area = {}
for n, line in enumerate(lines, 1):
    heading = AREA.match(line)
    if heading:
        area = heading.group(1)
    if not line.startswith("|"):
        continue
    cells = split_row(line)
    if len(cells) != 4:
        continue
    codename = code_span(cells[0])
    if codename is None or not codename.startswith("["):
        continue  # header, separator or another table
    status = cells[2]
    rows.append((n, codename, status, cells[3]))
    if area is not None and status in STATUSES:
        by_area.setdefault(area, {k: 0 for k in STATUSES})[status] += 1
    if codename in seen:
        problems.append(f"line {n}: codename also on line {seen[codename]}: {codename}")
    else:
        seen[codename] = n
    if status not in STATUSES:
        problems.append(f"line {n}: unknown status {status!r} (want covered, n/a or missing)")
        continue
    if not cells[1]:
        problems.append(f"line {n}: no behaviour given")
    if status != "covered":
        if not cells[3]:
            problems.append(f"line {n}: {status} without a reason")
        continue
    refs = REF.findall(cells[3])
    if not refs:
        problems.append(f"line {n}: covered but names no test as `crates/...rs::fn`")
    for path, name in refs:
        full = os.path.join(root, path)
        if not os.path.isfile(full):
            problems.append(f"line {n}: no file {path}")
            continue
        with open(full, encoding="utf-8", errors="replace") as t:
            text = t.read()
        if path.endswith(".py"):
            pattern = rf"^\s*(?:async\s+)?def\s+{re.escape(name)}\s*\("
        else:
            pattern = rf"\bfn\s+{re.escape(name)}\b"
        if not re.search(pattern, text, re.M):
            kind = "def" if path.endswith(".py") else "fn"
            problems.append(f"line {n}: {path} has no {kind} {name}")

counts = {s: sum(1 for r in rows if r[2] == s) for s in STATUSES}
total = len(rows)
want = (f"Totals: {total} entries — covered {counts['covered']}, "
        f"not applicable {counts['n/a']}, missing {counts['missing']}.")

# The "By area" table: one row per area heading, in the order the sections come.
area_rows = [f"| {a} | {sum(c.values())} | {c['covered']} | {c['n/a']} | {c['missing']} |"
             for a, c in by_area.items()]
area_at = [i for i, l in enumerate(lines) if l.startswith("| ") and
           l.split(" | ")[0][2:] in by_area and not l.startswith("| `")]
if update and area_at and [lines[i] for i in area_at] != area_rows and len(area_at) == len(area_rows):
    for i, row in zip(area_at, area_rows):
        lines[i] = row
    with open(doc, "w", encoding="utf-8") as f:
        f.write("\n".join(lines))
    print(f"conformance: by-area table updated in {os.path.relpath(doc, root)}")
if len(area_at) != len(area_rows):
    problems.append(f"the By area table has {len(area_at)} rows, the document {len(area_rows)} areas")
elif [lines[i] for i in area_at] != area_rows:
    problems.append("the By area table differs from the rows (scripts/conformance.sh --update fixes it)")

totals_at = [i for i, l in enumerate(lines) if l.startswith("Totals:")]
if update:
    if len(totals_at) != 1:
        print(f"conformance: expected one line starting 'Totals:' in {doc}, found {len(totals_at)}",
              file=sys.stderr)
        sys.exit(1)
    if lines[totals_at[0]] != want:
        lines[totals_at[0]] = want
        with open(doc, "w", encoding="utf-8") as f:
            f.write("\n".join(lines))
        print(f"conformance: totals line updated in {os.path.relpath(doc, root)}")

if not totals_at:
    problems.append("no totals line ('Totals: N entries — covered C, not applicable A, missing M.')")
elif len(totals_at) > 1:
    problems.append("more than one totals line")
else:
    line = lines[totals_at[0]]
    if not TOTALS.match(line):
        problems.append(f"line {totals_at[0] + 1}: totals line not in the expected form: {line}")
    elif line != want:
        problems.append(f"line {totals_at[0] + 1}: totals line says {line!r}, the table gives {want!r}"
                        " (scripts/conformance.sh --update fixes it)")
if total == 0:
    problems.append("no table rows found")

print(f"conformance: {total} entries — covered {counts['covered']}, "
      f"not applicable {counts['n/a']}, missing {counts['missing']}")
for p in problems:
    print(f"  problem: {p}")
sys.exit(1 if problems else 0)
PY
