# tests/lib.sh: what the shell tests share. Source it first:  . "$(dirname "$0")/lib.sh"
# It makes $tmp (a directory removed at exit; a test that needs more cleanup sets its own trap
# and removes $tmp there), counts checks (ok; bad WHAT... prints "FAIL: WHAT"), checks a
# command's failure (expect_error), and ends a test (finish NAME: the counts, then the status).
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0
fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }

# expect_error NAME PATTERN CMD...: CMD fails with a status in $expect_rc (default "1 2"); its
# stderr has exactly one line with "error", the last, matching the extended regular expression
# PATTERN (case-insensitive unless expect_case is empty); informational lines and a memory
# breakdown may come before it. Its stdout and stderr stay in $tmp/out and $tmp/err.
expect_rc=${expect_rc:-"1 2"}
expect_case=${expect_case--i}
expect_error() {
  local name=$1 pat=$2 rc_ok=0 r; shift 2
  "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  for r in $expect_rc; do [ "$rc" -eq "$r" ] && rc_ok=1; done
  # shellcheck disable=SC2086 # $expect_case is one grep option or none
  if [ $rc_ok -eq 1 ] && [ "$(grep -c error "$tmp/err")" -eq 1 ] &&
     tail -n 1 "$tmp/err" | grep -q $expect_case -E "$pat"; then
    ok
  else
    bad "$name: status $rc, stderr: $(head -c 600 "$tmp/err")"
  fi
}

# finish NAME: prints "NAME: P passed, F failed"; the status is 0 when nothing failed.
finish() {
  echo "$1: $pass passed, $fail failed"
  [ "$fail" -eq 0 ]
}
