#!/usr/bin/python3
"""A fault-injecting HTTP proxy for the remote-dataset tests (loopback only).

Forwards GET, PUT, POST, DELETE and HEAD (headers verbatim, Host included, so S3
signatures still verify) to --upstream and breaks them on purpose:
  --fail-first N --kinds K1,K2  the first N requests of each path get fault
                                 K[i % len] in turn: 503, 429, reset (connection closed
                                 before a status line), cut (half the body, then close),
                                 stall (half the body, then silence for --stall-s);
                                 a request with a body (an upload) that gets cut has
                                 half its body read, then the connection closed
  --always KIND                  every request to a shard (*.stk) gets KIND
  --corrupt-first N              the first N answers of each (path, Range) get one byte
                                 flipped
  --slow                         bodies trickle out in 16 KiB pieces, 2 ms apart
  --rate B                       B bytes/s over all bodies, shared in 16 KiB pieces in
                                 the order they come (no body starves)
Prints "PORT <n>" once listening on 127.0.0.1. GET /__stats answers a JSON object
{path: requests} and POST-less GET /__reset clears it. Exits when stdin closes.
"""
import argparse
import http.client
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlparse

args = None
lock = threading.Lock()
seen = {}      # (path, range) -> requests so far
per_path = {}  # path -> requests
pacer = {"next": time.monotonic()}


def take(n):
    """Blocks until n bytes may go out at the --rate. Each call books the next n / rate
    seconds of the link in call order (a burst of up to 0.1 s of rate when idle), so the
    bodies in flight share the rate chunk by chunk, first come first served, as flows
    on a shared link do, and none starves."""
    if not args.rate:
        return
    with lock:
        now = time.monotonic()
        start = max(pacer["next"], now - 0.1)
        pacer["next"] = start + n / args.rate
    if start > now:
        time.sleep(start - now)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def send_json(self, obj):
        body = json.dumps(obj).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_PUT(self):
        self.do_GET()

    def do_POST(self):
        self.do_GET()

    def do_DELETE(self):
        self.do_GET()

    def do_HEAD(self):
        self.do_GET()

    def do_GET(self):
        path = self.path.split("?")[0]
        if path == "/__stats":
            with lock:
                return self.send_json(dict(per_path))
        if path == "/__reset":
            with lock:
                seen.clear()
                per_path.clear()
            return self.send_json({})
        key = (path, self.headers.get("Range", ""))
        with lock:
            n = seen.get(key, 0)
            seen[key] = n + 1
            per_path[path] = per_path.get(path, 0) + 1
            n_path = per_path[path] - 1
        fault = None
        if args.always and path.endswith(".stk"):
            fault = args.always
        elif n_path < args.fail_first and args.kinds:
            fault = args.kinds[n_path % len(args.kinds)]
        corrupt = n < args.corrupt_first and path.endswith(".stk")

        length = int(self.headers.get("Content-Length", "0") or 0)
        if fault == "reset":
            self.close_connection = True
            self.connection.shutdown(2)
            return
        if fault == "cut" and length:
            self.rfile.read(length // 2)
            self.close_connection = True
            self.connection.shutdown(2)
            return
        sent = self.rfile.read(length) if length else None
        if fault in ("503", "429", "500"):
            body = b"<Error><Code>SlowDown</Code><Message>injected</Message></Error>"
            self.send_response(int(fault))
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return

        up = urlparse(args.upstream)
        conn = http.client.HTTPConnection(up.hostname, up.port, timeout=30)
        conn.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
        for k, v in self.headers.items():
            conn.putheader(k, v)
        conn.endheaders(sent)
        resp = conn.getresponse()
        body = resp.read() if self.command != "HEAD" else b""
        conn.close()
        if corrupt and body and resp.status in (200, 206):
            b = bytearray(body)
            b[len(b) // 2] ^= 0xFF
            body = bytes(b)
        self.send_response(resp.status)
        for k, v in resp.getheaders():
            if k.lower() not in ("content-length", "connection", "transfer-encoding", "date", "server"):
                self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if fault in ("cut", "stall"):
            self.wfile.write(body[: len(body) // 2])
            self.wfile.flush()
            if fault == "stall":
                time.sleep(args.stall_s)
            self.close_connection = True
            self.connection.shutdown(2)
            return
        piece = 16384 if (args.slow or args.rate) else len(body) or 1
        for i in range(0, len(body), piece):
            chunk = body[i : i + piece]
            take(len(chunk))
            self.wfile.write(chunk)
            if args.slow:
                time.sleep(0.002)


def main():
    global args
    p = argparse.ArgumentParser()
    p.add_argument("--upstream", required=True)
    p.add_argument("--fail-first", type=int, default=0)
    p.add_argument("--kinds", type=lambda s: [k for k in s.split(",") if k], default=[])
    p.add_argument("--always", default="")
    p.add_argument("--corrupt-first", type=int, default=0)
    p.add_argument("--slow", action="store_true")
    p.add_argument("--rate", type=float, default=0)
    p.add_argument("--stall-s", type=float, default=5)
    args = p.parse_args()
    # A loader opens tens of connections at once; socketserver's backlog of 5 would
    # leave the rest half-open, their requests unanswered until a client timeout.
    ThreadingHTTPServer.request_queue_size = 256
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    print("PORT", srv.server_address[1], flush=True)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    # The test holds our stdin; when it goes (test done or crashed) we go too.
    sys.stdin.read()
    srv.shutdown()


if __name__ == "__main__":
    main()
