#!/usr/bin/env bash
# test-cli-help.sh: every accel-lua subcommand answers --help and -h (usage,
# flags, an example; exit 0, nothing on stderr), and a mistyped command name
# that is no file says "unknown command 'X', did you mean Y?" (exit 2),
# while an existing file of that name, a .lua name and options still go to
# the interpreter. The subcommands are read from `accel-lua --help`, so a
# new one is checked without editing this file. Run by scripts/run-tests.sh:
#
#   scripts/test-cli-help.sh [BUILD_DIR]     (default: build)
#
# Prints one line per check and ends with "N passed, N failed".
# shellcheck source=scripts/test-lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/test-lib.sh" "$@"
export HOME=$TMP/home
unset ACCEL_LUA_CONFIG

# The command names listed under "Commands:" in the program's own help.
mapfile -t COMMANDS < <("$EXE" --help | sed -n '/^Commands:/,$p' | awk 'NR > 1 {print $1}')
check "accel-lua --help lists the subcommands" '(( ${#COMMANDS[@]} >= 5 ))'

# help_ok NAME WORDS...: `accel-lua WORDS` exits 0 with a usage line naming
# the command (and its form, e.g. config default), at least one flag, an
# "Example:" section using that form, and an empty stderr.
help_ok() {
    local name=$1 err
    shift
    OUT=$("$EXE" "$@" 2>"$TMP/err")
    RC=$?
    err=$(<"$TMP/err")
    local first=$1 words="$*"
    check "$name" '(( RC == 0 )) && [[ -z $err ]] && has "usage: accel-lua $first" &&
        has "  --" && has "Example:" && [[ ${OUT#*Example:} == *"accel-lua ${words% -*}"* ]]'
}

for c in "${COMMANDS[@]}"; do
    help_ok "$c --help" "$c" --help
    help_ok "$c -h" "$c" -h
done
for c in default update; do
    help_ok "config $c --help" config "$c" --help
    help_ok "config $c -h" config "$c" -h
done
# Help asked for after other arguments, as argparse takes it anywhere.
later_help_ok() {
    local name=$1 err
    shift
    local first=$1
    OUT=$("$EXE" "$@" 2>"$TMP/err")
    RC=$?
    err=$(<"$TMP/err")
    check "$name" '(( RC == 0 )) && [[ -z $err ]] && has "usage: accel-lua $first"'
}
later_help_ok "env --config_file x.yaml --help" env --config_file "$TMP/x.yaml" --help
later_help_ok "test --config_file x.yaml -h" test --config_file "$TMP/x.yaml" -h
later_help_ok "config --config_file x.yaml --help" config --config_file "$TMP/x.yaml" --help
later_help_ok "config default --config_file x.yaml -h" config default --config_file "$TMP/x.yaml" -h
later_help_ok "merge-weights CKPT OUT --help" merge-weights ckpt out --help
later_help_ok "estimate-memory --model gpt2 -h" estimate-memory --model gpt2 -h
later_help_ok "estimate-memory --bogus --help" estimate-memory --bogus --help
later_help_ok "merge-weights --bogus -h" merge-weights --bogus -h
later_help_ok "launch --num_processes 2 --help" launch --num_processes 2 --help
check "help after other flags writes no config" '[[ ! -e $TMP/x.yaml ]]'

# merge-weights reads its flags as the other subcommands do: dashes or
# underscores, --name=value, a flag without its value named.
printf '%s\n' 'local accel = require("accel")' \
    'local acc = accel.Accelerator{deepspeed_plugin = {zero_stage = 2}}' \
    'local m = accel.nn.Linear(3, 2)' \
    'acc:prepare(m, accel.optim.SGD(m:parameters(), {lr = 0.1}))' \
    'acc:save_state(arg[1])' >"$TMP/save.lua"
run "$EXE" "$TMP/save.lua" "$TMP/ck"
run "$EXE" merge-weights "$TMP/ck" "$TMP/merged" --remove-checkpoint-dir --model=1
check "merge-weights --remove-checkpoint-dir --model=1: merged, the checkpoint removed" \
    '(( RC == 0 )) && [[ -f $TMP/merged/model.safetensors && ! -e $TMP/ck ]]'
run "$EXE" merge-weights "$TMP/ck" "$TMP/merged" --model
check "merge-weights --model without a value: named (exit 2)" \
    '(( RC == 2 )) && has "merge-weights: missing value: --model"'
run "$EXE" merge-weights "$TMP/ck" "$TMP/merged" --model=0
check "merge-weights --model=0: a positive integer is needed (exit 2)" \
    '(( RC == 2 )) && has "--model needs a positive integer, got 0"'

# Usage errors of the subcommands written in Lua as docs/cli.md has them:
# "accel-lua NAME: unknown flag: --bogus", then the usage lines only (on
# stderr, exit 2; not the whole help).
MERGE_USAGE="usage: accel-lua merge-weights CHECKPOINT_DIR OUTPUT [--model N] [--remove_checkpoint_dir]"
usage_error_ok() {
    local name=$1 want=$2 usage=$3
    shift 3
    OUT=$("$EXE" "$@" 2>&1 >/dev/null)
    RC=$?
    check "$name" '(( RC == 2 )) && [[ $OUT == "$want"$'"'"'\n'"'"'"$usage"* ]] && ! has "Example:"'
}
usage_error_ok "merge-weights --bogus: unknown flag, the usage lines" \
    "accel-lua merge-weights: unknown flag: --bogus" "$MERGE_USAGE" merge-weights ck out --bogus
usage_error_ok "merge-weights with one argument: the message, the usage lines" \
    "accel-lua merge-weights: expected CHECKPOINT_DIR and OUTPUT, got 1 argument(s): ck" "$MERGE_USAGE" \
    merge-weights ck
check "  ... and nothing more than the usage line" '[[ $OUT == *"$MERGE_USAGE" ]]'
EST_USAGE="usage: accel-lua estimate-memory SCRIPT.lua | --model gpt2"
usage_error_ok "estimate-memory --bogus: unknown flag, the usage lines" \
    "accel-lua estimate-memory: unknown flag: --bogus" "$EST_USAGE" estimate-memory --model gpt2 --bogus
usage_error_ok "estimate-memory --batch_size without a value: missing value, the usage lines" \
    "accel-lua estimate-memory: missing value: --batch_size" "$EST_USAGE" estimate-memory --model gpt2 --batch_size

# Boolean flags take true/false (and launch's other words) after them or
# after =, as launch's do; another word after = is refused naming it.
run "$EXE" "$TMP/save.lua" "$TMP/ck"
run "$EXE" merge-weights "$TMP/ck" "$TMP/merged2" --remove_checkpoint_dir false
check "merge-weights --remove_checkpoint_dir false: merged, the checkpoint kept" \
    '(( RC == 0 )) && [[ -f $TMP/merged2/model.safetensors && -d $TMP/ck ]]'
run "$EXE" merge-weights "$TMP/ck" "$TMP/merged3" --remove_checkpoint_dir=no
check "merge-weights --remove_checkpoint_dir=no: the checkpoint kept" \
    '(( RC == 0 )) && [[ -f $TMP/merged3/model.safetensors && -d $TMP/ck ]]'
run "$EXE" merge-weights "$TMP/ck" "$TMP/merged4" --remove_checkpoint_dir=maybe
check "merge-weights --remove_checkpoint_dir=maybe: not a boolean (exit 2)" \
    '(( RC == 2 )) && has "--remove_checkpoint_dir: '"'"'maybe'"'"' is not a boolean (true or false)" && [[ ! -e $TMP/merged4 ]]'
run "$EXE" merge-weights "$TMP/ck" "$TMP/merged4" --remove_checkpoint_dir TRUE
check "merge-weights --remove_checkpoint_dir TRUE: merged, the checkpoint removed" \
    '(( RC == 0 )) && [[ -f $TMP/merged4/model.safetensors && ! -e $TMP/ck ]]'

# An OUTPUT that names an existing file where a folder is needed: exit 2,
# named, before anything is written.
run "$EXE" "$TMP/save.lua" "$TMP/ck"
: >"$TMP/afile"
run "$EXE" merge-weights "$TMP/ck" "$TMP/afile"
check "merge-weights CKPT FILE: OUTPUT is an existing file (exit 2)" \
    '(( RC == 2 )) && has "OUTPUT $TMP/afile is an existing file, not a folder (name a folder, or a path ending in .safetensors)" && ! has mkdirs'
run "$EXE" merge-weights "$TMP/ck" "$TMP/afile/m.safetensors"
check "merge-weights CKPT FILE/m.safetensors: the file in the way is named (exit 2)" \
    '(( RC == 2 )) && has "OUTPUT $TMP/afile/m.safetensors: $TMP/afile is an existing file, not a folder"'
mkdir -p "$TMP/dir.safetensors"
run "$EXE" merge-weights "$TMP/ck" "$TMP/dir.safetensors"
check "merge-weights CKPT DIR.safetensors (a folder): named (exit 2)" \
    '(( RC == 2 )) && has "OUTPUT $TMP/dir.safetensors is an existing folder, not a file"'

run "$EXE" config default --help
check "config default --help describes defaults, writes nothing" \
    'has "defaults" && [[ ! -e $HOME/.cache/accel-lua/default_config.yaml ]]'

# Mistyped command names.
run "$EXE" lauch train.lua
check "lauch: did you mean launch (exit 2)" \
    '(( RC == 2 )) && [[ $OUT == "accel-lua: unknown command '"'"'lauch'"'"', did you mean launch?" ]]'
run "$EXE" confg
check "confg: did you mean config" '(( RC == 2 )) && has "did you mean config?"'
run "$EXE" merge-weight a b
check "merge-weight: did you mean merge-weights" '(( RC == 2 )) && has "did you mean merge-weights?"'
run "$EXE" zzzqqq
check "a far word: unknown command, no file (exit 2)" \
    '(( RC == 2 )) && has "unknown command '"'"'zzzqqq'"'"', and no file of that name"'
printf 'print("ran " .. arg[0])\n' >"$TMP/lauch"
(cd "$TMP" && run "$EXE" lauch && check "an existing file named lauch runs as a script" \
    '(( RC == 0 )) && has "ran lauch"')
run "$EXE" lauch.lua
check "lauch.lua (no such file) is the interpreter's error" \
    '(( RC == 1 )) && has "cannot open lauch.lua" && ! has "unknown command"'
run "$EXE" -e 'print(1+1)'
check "options still run" '(( RC == 0 )) && [[ $OUT == 2 ]]'

finish
