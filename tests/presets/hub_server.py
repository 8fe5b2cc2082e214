"""A Hugging Face hub on 127.0.0.1, answering as the real one does for what
huggingface_hub's `hf_hub_download` asks: HEAD and GET on
`/{repo}/resolve/{revision}/{filename}`, with `ETag`, `X-Repo-Commit`,
`Content-Length`, and `X-Error-Code` on errors. It can cut a body short,
stall, and demand a token, and it records every request.

It takes uploads as `HfApi.create_repo` and `HfApi.upload_folder` send them
for small files: `POST /api/repos/create`, then `/api/models/{repo}/preupload/
{revision}`, answered "regular" for every file, so that the files come inline
(base64) in the NDJSON body of `/api/models/{repo}/commit/{revision}` rather
than through LFS or Xet storage."""

import base64
import hashlib
import http.server
import json
import re
import threading
import urllib.parse

COMMIT = "0123456789abcdef0123456789abcdef01234567"
_PATH = re.compile(r"/(?P<repo>[^/]+(?:/[^/]+)?)/resolve/(?P<revision>[^/]+)/(?P<filename>.+)")
_API = re.compile(r"/api/models/(?P<repo>[^/]+/[^/]+)/(?P<action>preupload|commit)/(?P<revision>[^/]+)")


class HubServer:
    """`repos` maps "owner/name" to {filename: bytes}; its files are at
    revision "main", at `COMMIT`, and at every name in `revisions`."""

    def __init__(self, repos, revisions=()):
        self.repos = repos
        self.revisions = {"main", COMMIT, *revisions}
        self.requests = []  # (method, path), in order
        # filenames whose GET sends half the body, then hangs up; always from the
        # first byte, whatever Range asks, so every retry is cut at the same place
        self.truncate = set()
        # filenames whose GET sends a quarter of the body from where Range asks
        # (206, Content-Range), then hangs up: a cut download that resumes
        self.cut_resumable = set()
        self.stall = set()  # filenames whose GET sends the headers, then nothing
        self.trickle = set()  # filenames whose GET sends a byte every 0.2 s
        self.token = None  # when set, every request needs "Authorization: Bearer <token>"
        self._released = threading.Event()
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)

    @property
    def url(self):
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._released.set()  # lets stalled responses end
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def answer(self, handler, method):
        self.requests.append((method, handler.path))
        match = _PATH.fullmatch(urllib.parse.urlsplit(handler.path).path)
        if self.token and handler.headers.get("Authorization") != f"Bearer {self.token}":
            # The hub says 401 both for a private or gated repository without a
            # token and for one that does not exist.
            return self._error(handler, 401, "RepoNotFound")
        if not match or match["repo"] not in self.repos:
            return self._error(handler, 404, "RepoNotFound")
        if urllib.parse.unquote(match["revision"]) not in self.revisions:
            return self._error(handler, 404, "RevisionNotFound")
        body = self.repos[match["repo"]].get(urllib.parse.unquote(match["filename"]))
        if body is None:
            return self._error(handler, 404, "EntryNotFound", commit=True)
        filename = match["filename"]
        start = 0
        if method == "GET" and filename in self.cut_resumable:
            start = int(re.fullmatch(r"bytes=(\d+)-", handler.headers.get("Range", "bytes=0-"))[1])
        handler.send_response(206 if start else 200)
        handler.send_header("ETag", f'"{hashlib.sha256(body).hexdigest()}"')
        handler.send_header("X-Repo-Commit", COMMIT)
        if start:
            handler.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
        handler.send_header("Content-Length", str(len(body) - start))
        if method == "GET" and filename in self.truncate | self.cut_resumable:
            # Says it closes the connection after this body, cut or whole, as
            # HTTP/1.1 asks: else the client may send its next request on it
            # before it sees it closed ("Server disconnected without sending
            # a response", seen once under load).
            handler.send_header("Connection", "close")
        handler.end_headers()
        if method == "HEAD":
            return
        # A stalled or trickling body is sent whole once the server stops, so
        # that the client given up on ends quietly instead of retrying.
        if filename in self.stall:
            handler.wfile.flush()
            self._released.wait(30)
            handler.wfile.write(body)
        elif filename in self.trickle:
            for i in range(len(body)):
                handler.wfile.write(body[i:i + 1])
                handler.wfile.flush()
                if self._released.wait(0.2):
                    handler.wfile.write(body[i + 1:])
                    break
        elif filename in self.truncate:
            handler.wfile.write(body[: len(body) // 2])
            handler.wfile.flush()
            handler.close_connection = True
        elif filename in self.cut_resumable:
            handler.wfile.write(body[start:start + len(body) // 4 + 1])
            handler.wfile.flush()
            handler.close_connection = True
        else:
            handler.wfile.write(body)

    def receive(self, handler):
        """An upload request (POST)."""
        self.requests.append(("POST", handler.path))
        body = handler.rfile.read(int(handler.headers.get("Content-Length") or 0))
        if self.token and handler.headers.get("Authorization") != f"Bearer {self.token}":
            return self._error(handler, 401, "RepoNotFound")
        path = urllib.parse.urlsplit(handler.path).path
        if path == "/api/repos/create":
            request = json.loads(body)
            repo = f"{request['organization']}/{request['name']}"
            exists = repo in self.repos
            self.repos.setdefault(repo, {})
            return self._json(handler, 409 if exists else 200, {"url": f"{self.url}/{repo}"})
        match = _API.fullmatch(path)
        if not match or match["repo"] not in self.repos:
            return self._error(handler, 404, "RepoNotFound")
        if urllib.parse.unquote(match["revision"]) != "main":
            return self._error(handler, 404, "RevisionNotFound")
        if match["action"] == "preupload":
            files = json.loads(body)["files"]
            return self._json(handler, 200, {"files": [{"path": f["path"], "uploadMode": "regular",
                                                        "shouldIgnore": False} for f in files]})
        for line in body.splitlines():
            item = json.loads(line)
            if item["key"] == "file":
                assert item["value"]["encoding"] == "base64"
                self.repos[match["repo"]][item["value"]["path"]] = base64.b64decode(item["value"]["content"])
            elif item["key"] != "header":
                return self._error(handler, 400, "BadRequest")
        return self._json(handler, 200, {"commitUrl": f"{self.url}/{match['repo']}/commit/{COMMIT}",
                                         "commitOid": COMMIT})

    @staticmethod
    def _json(handler, status, value):
        body = json.dumps(value).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

    @staticmethod
    def _error(handler, status, code, commit=False):
        handler.send_response(status)
        handler.send_header("X-Error-Code", code)
        if commit:
            handler.send_header("X-Repo-Commit", COMMIT)
        handler.send_header("Content-Length", "0")
        handler.end_headers()


def _handler(hub):
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_HEAD(self):
            hub.answer(self, "HEAD")

        def do_GET(self):
            hub.answer(self, "GET")

        def do_POST(self):
            hub.receive(self)

        def log_message(self, *args):
            pass

    return Handler
