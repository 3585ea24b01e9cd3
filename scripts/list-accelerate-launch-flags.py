#!/usr/bin/env python3
"""list-accelerate-launch-flags.py: every flag of `accelerate launch`, read
from Accelerate's own source (src/accelerate/commands/launch.py, the
add_argument calls of launch_command_parser), one per line as

    FLAG VALUE      (VALUE: 1 if the flag takes a value, 0 for a switch)

scripts/test-cli.sh checks each against `accel-lua launch`: supported, or
refused with a message naming it. Regenerate the committed list with

    scripts/list-accelerate-launch-flags.py PATH/TO/launch.py COMMIT \
        > tests/fixtures/accelerate_launch_flags.txt
"""
import ast
import sys

SWITCH_ACTIONS = {"store_true", "store_false", "help", "count"}


def flags(source):
    tree = ast.parse(source)
    parser_fn = next(n for n in ast.walk(tree)
                     if isinstance(n, ast.FunctionDef) and n.name == "launch_command_parser")
    for call in ast.walk(parser_fn):
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                and call.func.attr == "add_argument"):
            continue
        names = [a.value for a in call.args
                 if isinstance(a, ast.Constant) and str(a.value).startswith("-")]
        if not names:
            continue  # the positional training_script and its arguments
        action = next((k.value.value for k in call.keywords
                       if k.arg == "action" and isinstance(k.value, ast.Constant)), None)
        takes_value = 0 if action in SWITCH_ACTIONS else 1
        yield call.lineno, names, takes_value


def main():
    path, commit = sys.argv[1], sys.argv[2]
    with open(path, encoding="utf-8") as f:
        rows = sorted(flags(f.read()))
    print(f"# accelerate launch flags, from huggingface/accelerate {commit}")
    print("# src/accelerate/commands/launch.py; made by scripts/list-accelerate-launch-flags.py")
    for _, names, takes_value in rows:
        for name in names:
            print(name, takes_value)


main()
