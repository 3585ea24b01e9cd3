#!/usr/bin/env python3
"""read-mlflow-run.py: prints the runs of one MLflow experiment as MLflow's
own Python client reads them back from a tracking server, for
tests/lua/trackers_spec.lua (which checks what the MLflow tracker sent).

    read-mlflow-run.py TRACKING_URI EXPERIMENT_NAME [--latest]

One tab-separated line per fact, runs in start order:
    experiment  <id>
    run         <run_id>  <run_name>  <status>  <start_time ms>  <end_time ms>
    param       <run_id>  <key>  <value>
    tag         <run_id>  <key>  <value>
    metric      <run_id>  <key>  <step>  <repr(value)>  <timestamp ms>
(every value of a metric's history, from get_metric_history; with --latest
only the run's latest value per key, as "latest <run_id> <key> <repr(value)>"). Values with
tabs or newlines are escaped with Python's repr. No experiment of that name:
"experiment none" and exit 0.
"""
import sys

from mlflow.tracking import MlflowClient


def text(s):
    s = str(s)
    return repr(s) if ("\t" in s or "\n" in s) else s


def main():
    uri, name = sys.argv[1], sys.argv[2]
    latest = "--latest" in sys.argv[3:]
    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(name)
    if exp is None:
        print("experiment\tnone")
        return
    print(f"experiment\t{exp.experiment_id}")
    runs = client.search_runs([exp.experiment_id], order_by=["attributes.start_time ASC"])
    for run in runs:
        info, rid = run.info, run.info.run_id
        print(f"run\t{rid}\t{text(info.run_name)}\t{info.status}\t{info.start_time}\t{info.end_time}")
        for k, v in sorted(run.data.params.items()):
            print(f"param\t{rid}\t{text(k)}\t{text(v)}")
        for k, v in sorted(run.data.tags.items()):
            print(f"tag\t{rid}\t{text(k)}\t{text(v)}")
        for key in sorted(run.data.metrics):
            if latest:
                print(f"latest\t{rid}\t{text(key)}\t{run.data.metrics[key]!r}")
                continue
            for m in client.get_metric_history(rid, key):
                print(f"metric\t{rid}\t{text(key)}\t{m.step}\t{m.value!r}\t{m.timestamp}")


if __name__ == "__main__":
    main()
