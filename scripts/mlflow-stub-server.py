#!/usr/bin/env python3
"""mlflow-stub-server.py: a few-line stand-in for an MLflow tracking server,
for tests/lua/trackers_spec.lua to see the exact requests the MLflow tracker
sends (headers included), without the mlflow package.

    mlflow-stub-server.py LOG_FILE

Listens on a free loopback port and prints it (one line, flushed). Each
request is appended to LOG_FILE as one JSON line:
{"method", "path", "authorization", "content_type", "body"}. The answers:
experiments/get-by-name -> experiment 7; runs/create -> run "stub-run";
anything else under /api/2.0/mlflow/ -> {}; other paths -> 404.
"""
import json
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer

LOG = sys.argv[1]


class Handler(BaseHTTPRequestHandler):
    def answer(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n).decode() if n else None
        with open(LOG, "a") as f:
            f.write(json.dumps({"method": self.command, "path": self.path,
                                "authorization": self.headers.get("Authorization"),
                                "content_type": self.headers.get("Content-Type"), "body": body}) + "\n")
        if self.path.startswith("/api/2.0/mlflow/experiments/get-by-name"):
            out = {"experiment": {"experiment_id": "7", "name": "stub"}}
        elif self.path == "/api/2.0/mlflow/runs/create":
            out = {"run": {"info": {"run_id": "stub-run", "experiment_id": "7", "run_name": "stub-name"}}}
        elif self.path.startswith("/api/2.0/mlflow/"):
            out = {}
        else:
            self.send_response(404)
            self.end_headers()
            return
        data = json.dumps(out).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = answer

    def log_message(self, *args):
        pass


server = HTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
