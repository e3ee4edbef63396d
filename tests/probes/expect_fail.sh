#!/bin/sh
# expect_fail.sh PATTERN... -- COMMAND [ARG...]
# Passes if COMMAND exits with status 1 (a diagnosed failure, not a crash or
# a usage error) and its output matches every extended regular expression.
patterns_file=$(mktemp) || exit 2
trap 'rm -f "$patterns_file" "$patterns_file.out"' EXIT
# sh runs the EXIT trap on exit only: turn the usual signals into an exit so
# an interrupted run removes its files too.
trap 'exit 1' HUP INT TERM
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
    printf '%s\n' "$1" >>"$patterns_file"
    shift
done
[ "$1" = "--" ] || { echo "usage: $0 PATTERN... -- COMMAND..." >&2; exit 2; }
shift
"$@" >"$patterns_file.out" 2>&1
rc=$?
cat "$patterns_file.out"
if [ $rc -ne 1 ]; then
    echo "expect_fail: expected exit status 1 from '$*', got $rc" >&2
    exit 1
fi
fail=0
while IFS= read -r pat; do
    if ! grep -Eq -- "$pat" "$patterns_file.out"; then
        echo "expect_fail: output lacks /$pat/" >&2
        fail=1
    fi
done <"$patterns_file"
[ $fail -eq 0 ] && echo "expect_fail: failed as expected"
exit $fail
