#!/usr/bin/env bash
# design_modules.sh: the module order, read from the picture in docs/design.md ("The module
# order"), for scripts/check_layers.sh, which holds the includes to it. Prints "module:rank ..."
# (the picture's bottom row rank 0, each row above one more; testing, src/testing.h, rank 0).
# Fails, naming them, when the picture's modules and the directories under src/ (plus tools/)
# differ, or when a module has no row in the table "What exists": the picture cannot go stale.
# Usage: scripts/design_modules.sh [repository root]   (default: this script's parent)
set -euo pipefail
root=${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
cd "$root"
doc=docs/design.md
# the picture: the first fenced block after the heading; its rows are the lines naming modules
ranks=$(awk '
    /^## The module order/ { sec = 1; next }
    sec && /^```/ { if (in_pic) exit; in_pic = 1; next }
    in_pic {
        row = ""
        n = split($0, w, /[ \t|+-]+/)
        for (i = 1; i <= n; i++) if (w[i] ~ /^[a-z][a-z_\/]*$/) { sub(/\/.*/, "", w[i]); row = row " " w[i] }
        if (row != "") rows[++nr] = row
    }
    END {
        if (nr == 0) { print "design_modules: no module picture under \"## The module order\" in '"$doc"'" > "/dev/stderr"; exit 1 }
        for (r = 1; r <= nr; r++) { n = split(rows[r], m, " "); for (i = 1; i <= n; i++) out = out m[i] ":" nr - r " " }
        print out "testing:0"
    }' "$doc")
pic=$(tr ' ' '\n' <<<"$ranks" | sed 's/:.*//' | grep -vx testing | sort)
tree=$( (for d in src/*/; do basename "$d"; done; echo tools) | sort)
bad=0
for m in $(comm -23 <(echo "$tree") <(echo "$pic")); do
    echo "design_modules: src/$m/ is a module but not in $doc's picture (\"The module order\")" >&2; bad=1
done
for m in $(comm -13 <(echo "$tree") <(echo "$pic")); do
    echo "design_modules: $doc's picture names '$m', which is no directory under src/" >&2; bad=1
done
for m in $pic; do
    grep -Eq "^\| *$m(/[a-z]+)? *\|" "$doc" ||
        { echo "design_modules: $doc's table \"What exists\" has no row for '$m'" >&2; bad=1; }
done
[ "$bad" = 0 ] || exit 1
echo "$ranks"
