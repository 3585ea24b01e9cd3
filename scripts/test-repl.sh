#!/usr/bin/env bash
# test-repl.sh: the REPL on a real terminal (tmux drives accel-lua in a
# pseudo-terminal): an expression prints its value as lua5.4 does
# (`1+1` -> 2, several results tab-separated, a tensor as PyTorch prints
# it), up-arrow recalls the previous entry (readline), a multi-line
# statement is one history entry, the history is saved to
# $ACCEL_LUA_HISTORY at Ctrl-D and when os.exit() ends the session; and without a terminal (`accel-lua -i < file`) the
# same entries work with plain reads. Run by scripts/run-tests.sh:
#
#   scripts/test-repl.sh [BUILD_DIR]     (default: build)
#
# Prints one line per check and ends with "N passed, N failed[, N skipped]";
# the terminal checks are skipped (counted) when tmux is missing
# (scripts/install-deps.sh installs it).
# shellcheck source=scripts/test-lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/test-lib.sh" "$@"
export HOME=$TMP/home
mkdir -p "$HOME"
SKIP=0

# Without a terminal: plain reads, prompts, the same printing.
run bash -c "printf '1+1\nfunction f(a)\n  return a * 2\nend\nf(4), \"x\"\naccel.ones(2)\n' | '$EXE' -i"
check "no terminal: 1+1 prints 2" 'has "> 2"'
check "no terminal: a multi-line function, then f(4), \"x\" prints 8<TAB>x" 'has ">> >> > 8	x"'
check "no terminal: a tensor prints as PyTorch does" 'has "tensor([1., 1.])"'
check "no terminal: no history file written" '[[ ! -e $HOME/.accel_lua_history ]]'
# Lua 5.4's REPL reads a first line "= expr" as "return expr"
run bash -c "printf '= 40+2\n=1, \"y\"\n' | '$EXE' -i"
check "no terminal: = 40+2 prints 42, =1, \"y\" prints 1<TAB>y (lua5.4's = shorthand)" 'has "> 42" && has "> 1	y"'
# An error in the loop prints as lua5.4's REPL prints it (no program name);
# the loop goes on. A script's error keeps the "accel-lua: " prefix. (A
# statement, not `error("e")`: tried as `return error("e")`, a tail call,
# LuaJIT's message would carry no position.)
run bash -c "printf 'local _ = error(\"e\")\nprint(\"after\")\n' | '$EXE' -i"
check "no terminal: an error prints as lua5.4's REPL prints it, no program name" \
    'grep -qx "> stdin:1: e" <<<"$OUT" && ! has "accel-lua: stdin" && has "stack traceback:" && has "after"'
run "$EXE" -e 'error("e")'
check "a script's error still names the program" 'has "accel-lua: (command line):1: e"'

if ! command -v tmux >/dev/null; then
    echo "skip the terminal checks: tmux is not installed (scripts/install-deps.sh)"
    SKIP=7
    echo "$PASS passed, $FAIL failed, $SKIP skipped"
    (( FAIL == 0 ))
    exit
fi

SOCK=$TMP/tmux.sock
T=(tmux -S "$SOCK")
trap '"${T[@]}" kill-server 2>/dev/null; rm -rf "$TMP"' EXIT
export ACCEL_LUA_HISTORY=$TMP/history

# screen: the pane's text. wait_for TEXT: polls the pane (5 s at most).
screen() { "${T[@]}" capture-pane -p -t repl 2>/dev/null; }
wait_for() {
    local i
    for ((i = 0; i < 50; i++)); do
        OUT=$(screen)
        [[ $OUT == *"$1"* ]] && return 0
        sleep 0.1
    done
    return 1
}
# keys KEY...: tmux key names (Enter, Up, C-d); type TEXT: literal text, then Enter.
keys() { "${T[@]}" send-keys -t repl "$@"; }
type_line() { "${T[@]}" send-keys -t repl -l "$1" && keys Enter; }

"${T[@]}" -f /dev/null new-session -d -s repl -x 100 -y 30 \
    "env HOME='$HOME' ACCEL_LUA_HISTORY='$ACCEL_LUA_HISTORY' INPUTRC=/dev/null '$EXE'"
# (capture-pane drops trailing blanks: the prompt "> " reads ">"; it may be
# drawn a moment after the banner, so the pane is polled until it shows)
wait_for "accel-lua "
for ((i = 0; i < 50; i++)); do
    [[ $(tail -n 1 <<<"$OUT") == ">" ]] && break
    sleep 0.1
    OUT=$(screen)
done
check "terminal: the banner and the prompt" 'has "accel-lua " && [[ $(tail -n 1 <<<"$OUT") == ">" ]]'
type_line "1+1"
wait_for $'> 1+1\n2'
check "terminal: 1+1 prints 2" '[[ $OUT == *$'"'"'> 1+1\n2\n'"'"'* ]]'
type_line "2*21, 'x'"
wait_for "42" # (the typed line already shows the x)
# a tab on a terminal moves to the next multiple of 8 columns
check "terminal: several results tab-separated" 'grep -qx "42      x" <<<"$OUT"'
keys Up Up Enter
# the recalled line's result: a second "> 1+1" and a second "2" (the screen already holds the first ones)
for ((i = 0; i < 50; i++)); do
    OUT=$(screen)
    [[ $(grep -c "^> 1+1$" <<<"$OUT") == 2 && $(grep -c "^2$" <<<"$OUT") == 2 ]] && break
    sleep 0.1
done
check "terminal: up-arrow twice recalls 1+1 (readline history)" \
    '[[ $(grep -c "^> 1+1$" <<<"$OUT") == 2 && $(grep -c "^2$" <<<"$OUT") == 2 ]]'
type_line "for i = 1, 2 do"
type_line "io.write(i, ';')"
type_line "end"
wait_for "1;2;"
keys Up
sleep 0.3
OUT=$(screen)
[[ -n ${SHOW_SCREEN:-} ]] && echo "$OUT"
WANT=$'1;2;> for i = 1, 2 do\nio.write(i, \';\')\nend' # the entry, recalled on one prompt
check "terminal: a multi-line statement is recalled as one entry" \
    '[[ $(tail -n 3 <<<"$OUT") == "$WANT" ]]'
keys C-u C-d
for ((i = 0; i < 50; i++)); do "${T[@]}" has-session -t repl 2>/dev/null || break; sleep 0.1; done
check "terminal: the history is saved (ACCEL_LUA_HISTORY)" \
    '[[ -f $ACCEL_LUA_HISTORY ]] && grep -qx "1+1" "$ACCEL_LUA_HISTORY" && grep -q "^io.write" "$ACCEL_LUA_HISTORY"'

# Leaving with os.exit() saves the history too (as Python's exit()).
"${T[@]}" -f /dev/null new-session -d -s repl -x 100 -y 30 \
    "env HOME='$HOME' ACCEL_LUA_HISTORY='$TMP/history_exit' INPUTRC=/dev/null '$EXE'"
wait_for "accel-lua "
type_line "x = 6 * 7"
type_line "os.exit(0)"
for ((i = 0; i < 50; i++)); do "${T[@]}" has-session -t repl 2>/dev/null || break; sleep 0.1; done
check "terminal: the history is saved when os.exit() ends the session" \
    'grep -qx "x = 6 \* 7" "$TMP/history_exit" && grep -qx "os.exit(0)" "$TMP/history_exit"'

finish
