#!/usr/bin/env bash
# check_layers.sh: holds the module order of docs/design.md ("The module order"), read from its
# picture by scripts/design_modules.sh (which fails if the picture and src/'s modules differ):
#
#   tools -> train -> plan -> (optim, io) -> offload -> model -> kernels -> (mem, dist) -> core
#
# Reads every `#include "..."` in src/, tools/ and include/ and reports, as violations:
#   up        an include of a module above the includer's (a back-edge in the order);
#   side      an include of another module on the includer's row (testing.h excepted);
#   kernels   kernels/kernels.h or kernels/cpu/* included outside src/kernels/ (the backend
#             table, kernels/backend.h, is the only way in);
#   private   a module's private header (<module>/*_int.h) included from another module;
#   tools     tools/ including anything but the public header and its own headers (so never
#             src/testing.h, the test hooks);
#   public    the public header's parts (include/hptrain/*.h) included by anything but
#             include/hptrain.h (everyone includes hptrain.h), or a public header including
#             anything of the library's own in quotes (the parts are self-contained);
#   lines     a source file (src/, tools/, include/, tests/, bench/) over 1,000 lines.
# It prints the module graph it measured (each module's floor: 0 for a module that includes
# no other, else 1 + the highest floor below it; "cycle" for a module on a cycle or above
# one), the cycles (each group of modules that reach one another), every violation, and fails on any violation not in the allowlist
# (scripts/layers.allow: "file -> include  # why", "file -> LINES  # why"). Allowlist entries
# that no longer match are stale and fail the check too, so the list only shrinks honestly.
#
# Given a build directory, a second pass holds the same order at link level, which includes
# cannot show (a module may declare another's function itself, or call through the public
# header): `nm` over the library's objects (BUILD/CMakeFiles/hptrain.dir/src/<module>/...o),
# each undefined symbol mapped to the object that defines it, the objects to modules by their
# source path. It prints the module graph at link level and its cycles, reports as violations
#   link      a call (or a data reference) from a module to one above it in the order, or
#             to another on its row;
# (allowlist: "src/caller.c -> src/callee.c  # why"), and prints, for the review in
# docs/design.md ("The module order"), the groups of files inside a module that call one
# another both ways (not a failure: a module is one unit).
# Usage: scripts/check_layers.sh [repository root [build directory]]
#        (default root: this script's parent; without a build directory, no link pass)
set -euo pipefail
root=${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
build=${2:-}
[ -n "$build" ] && build=$(cd "$build" && pwd)      # before the cd: relative to the caller
cd "$root"; root=$(pwd)
allow=scripts/layers.allow
max_lines=1000
ranks=$(bash scripts/design_modules.sh "$root")   # "module:rank ..." from the picture

# "file include" pairs
pairs=$(grep -rHo '^[[:space:]]*#[[:space:]]*include[[:space:]]*"[^"]*"' src tools include 2>/dev/null |
        sed -E 's/^([^:]*):[^"]*"([^"]*)"/\1 \2/' | sort -u)
# "file LINES" for long files
long=$(find src tools include tests bench -name '*.[ch]' -type f 2>/dev/null | sort |
       while read -r f; do n=$(wc -l <"$f"); [ "$n" -gt "$max_lines" ] && echo "$f $n"; done || true)

status=0
# print_cycles(NONE): the awk function both passes use: each group of modules that reach one
# another (reach[a " " b], the transitive closure over order[1..n]) printed once, or NONE.
cycles_awk='
function print_cycles(none,    i, j, m, cyc, nc, done) {
    for (i = 1; i <= n; i++) {
        m = order[i]
        if (!((m " " m) in reach) || (m in done)) continue
        cyc = m; done[m] = 1
        for (j = 1; j <= n; j++) if (order[j] != m && (m " " order[j]) in reach && (order[j] " " m) in reach) { cyc = cyc " <-> " order[j]; done[order[j]] = 1 }
        print "  cycle: " cyc; nc++
    }
    if (nc == 0) print none
}
'
awk -v allowfile="$allow" -v longlist="$long" -v ranks="$ranks" "$cycles_awk"'
function modof(path,   a, n) {          # the module of a file under src/ or tools/
    n = split(path, a, "/")
    if (a[1] == "tools") return "tools"
    if (a[1] == "src" && n == 2) return a[2] == "testing.h" ? "testing" : "src"
    return a[2]
}
BEGIN {
    nm = split(ranks, r, " ")                          # the picture, top row first
    for (i = 1; i <= nm; i++) { split(r[i], kv, ":"); rank[kv[1]] = kv[2]; order[i] = kv[1] }
    while ((getline line < allowfile) > 0) {
        sub(/#.*/, "", line); gsub(/^[ \t]+|[ \t]+$/, "", line)
        if (line == "") continue
        split(line, kv, /[ \t]*->[ \t]*/)
        if (kv[2] ~ /^src\//) continue              # a link entry: the second pass
        allowed[kv[1] " -> " kv[2]] = 1
    }
    nl = split(longlist, ll, "\n")
    for (i = 1; i <= nl; i++) if (ll[i] != "") {
        split(ll[i], kv, " ")
        report(kv[1], "LINES", "lines", kv[2] " lines (over 1,000)")
    }
}
function report(file, inc, kind, why,   key) {
    key = file " -> " inc
    if (key in allowed) { used[key] = 1; nallowed++; tag = "allowed" }
    else { nnew++; tag = "VIOLATION" }
    lines[++nv] = sprintf("  %-9s %-7s %s  (%s)", tag, kind, key, why)
}
{
    file = $1; inc = $2
    if (file ~ /^include\//) {                       # the public header and its parts
        if (file == "include/hptrain.h" && inc ~ /^hptrain\/[^\/]*\.h$/) next
        report(file, inc, "public", "the public header includes its parts; they include nothing in quotes")
        next
    }
    if (inc ~ /^hptrain\//) {
        report(file, inc, "public", "a part of the public header: include hptrain.h")
        next
    }
    src = modof(file)
    if (inc == "hptrain.h") next                     # the public header: anyone
    if (inc == "testing.h") tgt = "testing"
    else if (inc !~ /\//) {                          # same directory as the includer
        d = file; sub(/\/[^\/]*$/, "", d); full = d "/" inc; tgt = modof(full)
        if (src == "tools") next                     # tools/ own headers
        inc = substr(full, 5)                        # as written from src/
    } else { split(inc, p, "/"); tgt = p[1] }
    if (src == "tools") {
        report(file, inc, "tools", "tools/ includes the public header and its own only")
        next
    }
    if (tgt != src) edge[src " " tgt] = 1
    if (!(tgt in rank) || !(src in rank)) { report(file, inc, "unknown", "module not in the order"); next }
    if (rank[tgt] > rank[src])
        report(file, inc, "up", src " (" rank[src] ") reaches up to " tgt " (" rank[tgt] ")")
    if (tgt != src && tgt != "testing" && rank[tgt] == rank[src])
        report(file, inc, "side", src " and " tgt " share a row (" rank[src] ")")
    if (tgt == "kernels" && src != "kernels" && inc != "kernels/backend.h")
        report(file, inc, "kernels", "kernel internals outside src/kernels/: use kernels/backend.h")
    if (inc ~ /_int\.h$/ && tgt != src)
        report(file, inc, "private", tgt "-private header")
}
END {
    # reachability (transitive closure; a dozen modules): a module that reaches itself is on a
    # cycle; its floor, and that of every module that reaches a cycle, is "cycle"
    n = nm
    for (e in edge) reach[e] = 1
    for (k = 1; k <= n; k++) for (i = 1; i <= n; i++) for (j = 1; j <= n; j++)
        if ((order[i] " " order[k]) in reach && (order[k] " " order[j]) in reach) reach[order[i] " " order[j]] = 1
    for (i = 1; i <= n; i++) { m = order[i]; for (j = 1; j <= n; j++)
        if ((m " " order[j]) in reach && (order[j] " " order[j]) in reach) above[m] = 1 }
    for (i = 1; i <= n; i++) floor[order[i]] = 0
    for (it = 0; it < n; it++)              # longest path, on the acyclic part
        for (e in edge) { split(e, ab, " "); if (!(ab[1] in above) && floor[ab[1]] < floor[ab[2]] + 1) floor[ab[1]] = floor[ab[2]] + 1 }
    print "module floors measured (declared rank in the order; the modules each includes):"
    for (i = 1; i <= n; i++) {
        m = order[i]; deps = ""
        for (j = 1; j <= n; j++) if ((m " " order[j]) in edge) deps = deps " " order[j]
        printf "  %-8s rank %d  floor %-5s ->%s\n", m, rank[m], (m in above) ? "cycle" : floor[m], deps == "" ? " (nothing)" : deps
    }
    print_cycles("  cycles: none")
    print "violations (" nv + 0 "; " nallowed + 0 " in " allowfile "):"
    for (i = 1; i <= nv; i++) print lines[i]
    nstale = 0
    for (k in allowed) if (!(k in used)) { printf "  stale allowlist entry (no longer needed): %s\n", k; nstale++ }
    if (nnew) { printf "check_layers: %d violation(s) not in %s\n", nnew, allowfile; exit 1 }
    if (nstale) { printf "check_layers: %d stale entr(ies) in %s: remove them\n", nstale, allowfile; exit 1 }
    print "check_layers: includes ok"
}' <<<"$pairs" || status=1

# ---- link level: "file sym D|U" for every external symbol of the library's objects ----
if [ -z "$build" ]; then
    echo "check_layers: no build directory given: link level not checked"
    exit "$status"
fi
objdir="$build/CMakeFiles/hptrain.dir"
objs=$(cd "$objdir" 2>/dev/null && find src -name '*.c.o' | sort |
       while read -r o; do [ -f "$root/${o%.o}" ] && echo "$o"; done || true)  # stale objects: skipped
if [ -z "$objs" ]; then
    echo "check_layers: no objects under $objdir (build the library first)"; exit 1
fi
syms=$(cd "$objdir" && nm -A -P --extern-only $objs |
       awk '{ f = $1; sub(/\.o:$/, "", f); t = $3
              if (t == "U" || t == "w") print f, $2, "U"; else if (t ~ /^[A-Z]$/) print f, $2, "D" }')

awk -v allowfile="$allow" -v objdir="$objdir" -v ranks="$ranks" "$cycles_awk"'
function modof(path,   a) { split(path, a, "/"); return a[2] }
BEGIN {
    n = split(ranks, r, " ")                           # the picture, top row first
    for (i = 1; i <= n; i++) { split(r[i], kv, ":"); rank[kv[1]] = kv[2]; order[i] = kv[1] }
    while ((getline line < allowfile) > 0) {
        sub(/#.*/, "", line); gsub(/^[ \t]+|[ \t]+$/, "", line)
        if (line == "") continue
        split(line, kv, /[ \t]*->[ \t]*/)
        if (kv[2] ~ /^src\//) allowed[kv[1] " -> " kv[2]] = 1
    }
}
$3 == "D" { def[$2] = $1; next }
{ und[++nu] = $1 " " $2 }
END {
    for (i = 1; i <= nu; i++) {
        split(und[i], fs, " "); f = fs[1]; sym = fs[2]
        if (!(sym in def)) continue                  # the C library, OpenMP, oneDNN, MPI
        g = def[sym]; a = modof(f); b = modof(g)
        if (a == b) { if (f != g) fedge[f " " g] = 1; continue }
        edge[a " " b] = 1
        key = f " -> " g
        if (!(key in why)) { why[key] = sym; nk++; keys[nk] = key; ka[nk] = a; kb[nk] = b }
        else if (length(why[key]) < 60) why[key] = why[key] ", " sym
    }
    for (e in edge) reach[e] = 1
    for (k = 1; k <= n; k++) for (i = 1; i <= n; i++) for (j = 1; j <= n; j++)
        if ((order[i] " " order[k]) in reach && (order[k] " " order[j]) in reach) reach[order[i] " " order[j]] = 1
    print "link level: the modules each calls (nm over " objdir "):"
    for (i = 1; i <= n; i++) {
        m = order[i]; deps = ""
        for (j = 1; j <= n; j++) if ((m " " order[j]) in edge) deps = deps " " order[j]
        if (m != "testing" && m != "tools") printf "  %-8s rank %d ->%s\n", m, rank[m], deps == "" ? " (nothing)" : deps
    }
    print_cycles("  cycles between modules: none")
    nv = 0; nnew = 0; nallowed = 0
    for (k = 1; k <= nk; k++) {
        a = ka[k]; b = kb[k]
        if (rank[b] < rank[a]) continue                # down the order: fine
        if (keys[k] in allowed) { used[keys[k]] = 1; nallowed++; tag = "allowed" } else { nnew++; tag = "VIOLATION" }
        lines[++nv] = sprintf("  %-9s link    %s  (%s (%d) reaches %s %s (%d): %s)", tag, keys[k],
                              a, rank[a], rank[b] > rank[a] ? "up to" : "beside it to", b, rank[b],
                              why[keys[k]])
    }
    # groups of files inside one module that reach one another (the review in docs/design.md)
    nf = 0
    for (e in fedge) { split(e, ab, " "); for (x = 1; x <= 2; x++) if (!(ab[x] in fid)) { fid[ab[x]] = ++nf; fname[nf] = ab[x] } }
    for (e in fedge) { split(e, ab, " "); fr[fid[ab[1]] " " fid[ab[2]]] = 1 }
    for (k = 1; k <= nf; k++) for (i = 1; i <= nf; i++) if ((i " " k) in fr)
        for (j = 1; j <= nf; j++) if ((k " " j) in fr) fr[i " " j] = 1
    print "link level: files inside a module that reach one another (reviewed in docs/design.md):"
    ng = 0
    for (i = 1; i <= nf; i++) {
        if (!((i " " i) in fr) || (i in fdone)) continue
        grp = fname[i]; fdone[i] = 1
        for (j = 1; j <= nf; j++) if (j != i && (i " " j) in fr && (j " " i) in fr) { grp = grp " " fname[j]; fdone[j] = 1 }
        print "  " grp; ng++
    }
    if (ng == 0) print "  none"
    print "link violations (" nv "; " nallowed " in " allowfile "):"
    for (i = 1; i <= nv; i++) print lines[i]
    nstale = 0
    for (k in allowed) if (!(k in used)) { printf "  stale allowlist entry (no longer needed): %s\n", k; nstale++ }
    if (nnew) { printf "check_layers: %d link violation(s) not in %s\n", nnew, allowfile; exit 1 }
    if (nstale) { printf "check_layers: %d stale link entr(ies) in %s: remove them\n", nstale, allowfile; exit 1 }
    print "check_layers: links ok"
}' <<<"$syms" || status=1
exit "$status"
