#!/usr/bin/env python3
"""read-tb-events.py: reads a TensorBoard run folder with TensorBoard's own
event readers (PyPI tensorboard) and prints what they found, one line per
value, fields separated by tabs, so tests can check accel.tracking's event
files. EventAccumulator (the classic reader):

    file_version  <version>
    scalar        <tag> <step> <value>        value as Python's repr of the float
    wall          <tag> <step> <wall_time>    the wall time of each scalar
    text          <tag> <step> <text>         text summaries (\\, newline, tab escaped)

and plugin_event_accumulator (what `tensorboard --logdir` serves, after
migrating simple_value summaries to the scalars plugin):

    served        <plugin> <tag> <step> <value>

Usage: build/pyenv/bin/python scripts/read-tb-events.py RUN_DIR
(build/pyenv comes from scripts/setup-test-python.sh). Exits 1 if the folder
holds no events TensorBoard can read.
"""
import sys

from tensorboard.backend.event_processing import event_accumulator as ea
from tensorboard.backend.event_processing import plugin_event_accumulator as pea
from tensorboard.util import tensor_util


def out(*fields):
    print("\t".join(str(f) for f in fields))


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: read-tb-events.py RUN_DIR")
    acc = ea.EventAccumulator(sys.argv[1], size_guidance={ea.SCALARS: 0, ea.TENSORS: 0})
    acc.Reload()
    tags = acc.Tags()
    if not tags.get("scalars") and not tags.get("tensors"):
        sys.exit("read-tb-events: no scalars or tensors in " + sys.argv[1])
    out("file_version", acc.file_version)
    for tag in sorted(tags["scalars"]):
        for ev in acc.Scalars(tag):
            out("scalar", tag, ev.step, repr(ev.value))
            out("wall", tag, ev.step, repr(ev.wall_time))
    for tag in sorted(tags["tensors"]):
        for ev in acc.Tensors(tag):
            text = b"".join(ev.tensor_proto.string_val).decode("utf-8")
            out("text", tag, ev.step, escape(text))
    served(sys.argv[1])


def escape(text):
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace("\t", "\\t")


def served(run_dir):
    acc = pea.EventAccumulator(run_dir, size_guidance={pea.TENSORS: 0})
    acc.Reload()
    for tag in sorted(acc.Tags()["tensors"]):
        plugin = acc.SummaryMetadata(tag).plugin_data.plugin_name
        for ev in acc.Tensors(tag):
            value = tensor_util.make_ndarray(ev.tensor_proto)
            if plugin == "scalars":
                value = repr(float(value.item()))
            else:
                value = escape(b"".join(value.reshape(-1).tolist()).decode("utf-8"))
            out("served", plugin, tag, ev.step, value)


if __name__ == "__main__":
    main()
