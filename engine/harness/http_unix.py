"""HTTP/1.1 over a Unix socket: how the timing parent talks to an engine served over HTTP.

A served engine (llama.cpp's `llama-server`, server_engine.py) lives in a sandbox with no
network; it listens on a socket in a folder the sandbox shares with the parent, the one way in
or out. Everything that comes back is the engine's (a PR's) words: a status other than 200, a
body over `max_bytes`, anything but one JSON object, or no answer within the timeout is a
`ServerReplyError`, never a number.
"""

from __future__ import annotations

import http.client
import json
import socket
import struct
from collections.abc import Callable
from pathlib import Path

MAX_BODY_BYTES = 16 << 20  # a completion's answer (ids, top-k log-probs) is far smaller


class ServerReplyError(Exception):
    """The server's answer cannot be used; the text says why (its own words cut short)."""


class NotTheServer(ServerReplyError):
    """The socket's other end is some other process of the box."""


class UnixConnection(http.client.HTTPConnection):
    """A keep-alive HTTP connection to a server listening on `path` (a Unix socket).

    `peer`: whether the process at the other end (its pid, from the kernel: SO_PEERCRED) is the
    server's. The socket's folder is the sandbox's to write: a link there in place of the
    socket would have this process (root, outside) talk to another server of the box (a
    container daemon's socket speaks HTTP too); a connection whose peer is not the server's is
    closed before a byte is sent."""

    def __init__(self, path: Path, timeout_s: float, peer: Callable[[int], bool]) -> None:
        super().__init__("localhost", timeout=timeout_s)
        self.path, self.peer = str(path), peer

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self.path)
            creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
            pid = struct.unpack("3i", creds)[0]
            if not self.peer(pid):
                raise NotTheServer(f"the socket's other end (pid {pid}) is not the server's")
        except BaseException:
            sock.close()
            raise
        self.sock = sock

    def send_json(self, method: str, target: str, body: dict | None = None) -> None:
        """Send one request; its answer is read by `read_json` (several connections can have
        a request in flight at once: the server works on them together)."""
        data = b"" if body is None else json.dumps(body, separators=(",", ":")).encode()
        headers = {"Content-Type": "application/json"} if body is not None else {}
        try:
            self.request(method, target, body=data or None, headers=headers)
        except (OSError, http.client.HTTPException) as e:
            self.close()
            raise ServerReplyError(f"{method} {target}: could not send ({e})") from None

    def read_json(self, what: str, max_bytes: int = MAX_BODY_BYTES) -> dict:
        """The answer to the request in flight: one JSON object, status 200."""
        try:
            resp = self.getresponse()
            body = resp.read(max_bytes + 1)
        except (OSError, http.client.HTTPException) as e:
            self.close()
            raise ServerReplyError(f"{what}: no answer ({type(e).__name__}: {e})") from None
        if len(body) > max_bytes:
            self.close()
            raise ServerReplyError(f"{what}: an answer of more than {max_bytes} bytes")
        if resp.status != 200:
            raise ServerReplyError(f"{what}: status {resp.status} ({_words(body)})")
        try:
            doc = json.loads(body)
        except ValueError:
            raise ServerReplyError(f"{what}: not JSON ({_words(body)})") from None
        if not isinstance(doc, dict):
            raise ServerReplyError(f"{what}: not a JSON object ({_words(body)})")
        return doc

    def call(self, method: str, target: str, body: dict | None = None) -> dict:
        self.send_json(method, target, body)
        return self.read_json(f"{method} {target}")


def _words(body: bytes) -> str:
    return repr(body[:200].decode("utf-8", errors="replace"))
