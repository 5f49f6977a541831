"""A misbehaving OpenAI-compatible server on 127.0.0.1 for client-robustness tests.

``mode`` picks what /v1/completions and /v1/chat/completions do: ``ok`` (answer "#### 7", streamed
when asked), ``500``, ``400``, ``hang`` (never answer), ``die`` (send half a stream, then drop the
connection), ``flaky`` (500 on the first attempt of each request body, then ok). ``stop()`` closes the
listening socket and every open connection, as a dead server does.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class FakeServer:
    def __init__(self, mode: str = "ok"):
        self.mode = mode
        self.hits = 0
        self.seen: set[str] = set()
        self.conns: list = []
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def setup(self):
                super().setup()
                server.conns.append(self.connection)

            def _send(self, code: int, body: dict):
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                if self.path == "/v1/models":
                    self._send(200, {"data": [{"id": "fake", "max_model_len": 1024}]})
                elif self.path == "/version":
                    self._send(200, {"version": "fake-0"})
                else:
                    self._send(404, {"error": "no"})

            def do_POST(self):
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                req = json.loads(raw)
                with server.lock:
                    server.hits += 1
                    first = raw not in server.seen
                    server.seen.add(raw)
                mode = server.mode
                if mode == "flaky":
                    mode = "500" if first else "ok"
                if mode in ("500", "400"):
                    return self._send(int(mode), {"error": mode})
                if mode == "hang":
                    time.sleep(30)
                    return
                if mode == "die":
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.end_headers()
                    self.wfile.write(b'data: {"choices": [{"text": "half"}]}\n\n')
                    self.wfile.flush()
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                chat = "messages" in req
                text = "The answer is 7.\n#### 7"
                if not req.get("stream"):
                    choice = {"message": {"content": text}} if chat else {"text": text}
                    return self._send(
                        200,
                        {
                            "choices": [choice | {"finish_reason": "stop"}],
                            "usage": {"prompt_tokens": 5, "completion_tokens": 3},
                        },
                    )
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
                self.close_connection = True
                for piece in ("The answer", " is 7.", "\n#### 7"):
                    delta = {"delta": {"content": piece}} if chat else {"text": piece}
                    self.wfile.write(f"data: {json.dumps({'choices': [delta]})}\n\n".encode())
                    self.wfile.flush()
                end = {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 3}}
                self.wfile.write(f"data: {json.dumps(end)}\n\ndata: [DONE]\n\n".encode())

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def stop(self) -> None:
        """Stop listening and cut every open connection."""
        self.httpd.shutdown()
        self.httpd.server_close()
        for conn in self.conns:
            with contextlib.suppress(OSError):
                conn.shutdown(2)
