#!/usr/bin/env bash
# test-progress-launch.sh: accel.progress and the examples' banners under
# `accel-lua launch --num_processes 2` (mpirun hands every rank pipes; launch
# tells the ranks whether its own stdout / stderr is a terminal). Checks:
#   - on a pseudo-terminal (scripts/run-on-pty.py, 77 columns, output
#     post-processing off so every \r is a redraw): carriage-return redraws
#     from rank 0 only, no bar of rank 1, the last redraw as wide as the
#     terminal; the same for a bar on stdout (fully buffered in a rank, so
#     each redraw must be flushed)
#   - a redraw (no newline) gets through mpirun promptly: a half-done bar is
#     on the terminal while rank 0 still waits 2 s before finishing
#   - a rank 0 error after a redraw (no newline before it) is still named by
#     launch as the job's cause
#   - output to a file: plain lines from rank 0 only, no \r (on stdout too,
#     where Open MPI gives the ranks a pseudo-terminal of its own)
#   - --log_dir --redirects 2: rank 0's stderr.log (no terminal) gets plain
#     lines; --tee 2: the console still gets the redraws
#   - examples/regression.lua and examples/custom_module.lua print their
#     banner once under launch
# Run by scripts/run-tests.sh:   scripts/test-progress-launch.sh [BUILD_DIR]
# Prints one line per check and ends with "N passed, N failed".
# shellcheck source=scripts/test-lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/test-lib.sh" "$@"
export HOME=$TMP/home
unset XDG_CACHE_HOME ACCEL_LUA_CONFIG ACCEL_LUA_MPIRUN ACCEL_LUA_NUM_THREADS OMP_NUM_THREADS
unset ACCEL_LUA_STDOUT_TTY ACCEL_LUA_STDERR_TTY ACCEL_LUA_COLUMNS
[[ -n ${ASAN_OPTIONS:-} ]] && export ASAN_OPTIONS="$ASAN_OPTIONS:fast_unwind_on_malloc=0"

PTY=$ROOT/scripts/run-on-pty.py
# a bar named "rankR"; args: stdout|stderr, wait (2 s half done), fail
BAR=$ROOT/tests/lua/helpers/progress_bar.lua

LAUNCH=("$EXE" launch --cpu --num_processes 2)
PTYOUT=$TMP/pty.out

# on_pty MARKER CMD...: runs CMD on a 77-column pseudo-terminal; OUT: what
# it printed, T_SEEN / T_END / RC from run-on-pty.py (RC 99 if it failed).
on_pty() {
    local marker=$1 res
    shift
    rm -f "$PTYOUT"
    res=$(python3 "$PTY" 77 "$marker" "$PTYOUT" "$@")
    read -r T_SEEN T_END RC <<<"$res"
    [[ -n $RC && -f $PTYOUT ]] || RC=99 T_SEEN=-1 T_END=-1
    OUT=$(cat "$PTYOUT" 2>/dev/null)
}

# redraws: the number of carriage returns in OUT; redraw_lines: what follows
# each \r up to the next \r or \n, one per line.
redraws() { tr -cd '\r' <<<"$OUT" | wc -c; }
redraw_lines() { tr '\n' '\r' <<<"${OUT#*$'\r'}" | tr '\r' '\n' | grep -v '^$' | grep -v '^\['; }
# The last redraw's text (between the last \r and the erase-line code).
last_redraw() { local s=${OUT##*$'\r'}; s=${s%%$'\e'\[K*}; printf '%s' "$s"; }

for stream in stderr stdout; do
    on_pty "" "${LAUNCH[@]}" "$BAR" "$stream"
    check "launch on a terminal, bar on $stream: exit 0" '(( RC == 0 ))'
    check "launch on a terminal, bar on $stream: at least 10 redraws in place" '(( $(redraws) >= 10 ))'
    check "launch on a terminal, bar on $stream: every redraw is rank 0's" \
        '! redraw_lines | grep -qv "^rank0: "'
    check "launch on a terminal, bar on $stream: no bar of rank 1" '! has rank1'
    check "launch on a terminal, bar on $stream: the last redraw is 77 columns wide and done" \
        '[[ $(last_redraw | python3 -c "import sys; print(len(sys.stdin.read()))") == 77 && $(last_redraw) == "rank0: 100%|"* ]]'
done

# "| 5/10 [" is in the terminal form only: the half-done bar, before rank 0's
# 2 s wait; the job ends no earlier than 2 s later.
on_pty "| 5/10 [" "${LAUNCH[@]}" "$BAR" stdout wait
check "a redraw (no newline) reaches the terminal while the rank still runs" \
    "python3 -c 'import sys; s, e = float(sys.argv[1]), float(sys.argv[2]); sys.exit(not (s >= 0 and e - s >= 1.5))' $T_SEEN $T_END"

on_pty "" "${LAUNCH[@]}" "$BAR" stderr nowait fail
check "an error right after a redraw is named as the job's cause" \
    '(( RC != 0 )) && has "rank 0 failed first: " && has "boom after a redraw"'

# Open MPI gives each rank a pseudo-terminal for stdout even when mpirun's
# output goes to a file: the bar must still be plain there.
for stream in stderr stdout; do
    run "${LAUNCH[@]}" "$BAR" "$stream"
    check "launch to a file, bar on $stream: exit 0, no carriage return" \
        '(( RC == 0 )) && [[ $OUT != *$'"'"'\r'"'"'* ]]'
    check "launch to a file, bar on $stream: plain lines from rank 0 (50% and 100%)" \
        'has "rank0: 50% 5/10 [" && has "rank0: 100% 10/10 ["'
    check "launch to a file, bar on $stream: nothing from rank 1" '! has rank1'
done

# --log_dir with --redirects 2: rank 0's stderr goes to its file only, which
# is no terminal (plain lines there); with --tee 2 the console still shows
# the redraws.
on_pty "" "${LAUNCH[@]}" --log_dir "$TMP/logs" --redirects 2 "$BAR" stderr
LOG=$TMP/logs/attempt_0/rank_0/stderr.log
check "--redirects 2 on a terminal: rank 0's stderr.log has plain lines, no carriage return" \
    '(( RC == 0 )) && grep -q "^rank0: 100% 10/10 \[" "$LOG" && ! grep -q $'"'"'\r'"'"' "$LOG"'
on_pty "" "${LAUNCH[@]}" --log_dir "$TMP/logs" --tee 2 "$BAR" stderr
check "--tee 2 on a terminal: rank 0 still redraws in place on the console" \
    '(( RC == 0 && $(redraws) >= 10 )) && ! has rank1'

# count TEXT: how many lines of OUT contain TEXT.
count() { grep -cF -- "$1" <<<"$OUT"; }

run "${LAUNCH[@]}" examples/regression.lua 50
check "examples/regression.lua under launch: its lines print once" \
    '(( RC == 0 )) && [[ $(count "learned w = ") == 1 && $(count "step   50") == 1 ]]'

run "${LAUNCH[@]}" examples/custom_module.lua "$TMP/custom" 1
check "examples/custom_module.lua under launch: the model and the epoch line print once" \
    '(( RC == 0 )) && [[ $(count "Net(") == 1 && $(count "epoch 1 ") == 1 ]]'

finish
