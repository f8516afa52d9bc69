"""A real S3-protocol server for tests: moto's standalone server on a free loopback
port, in this process's threads (``moto[server]``, a dev dependency)."""

from __future__ import annotations

import socket
import uuid

import pytest

#: Credentials the server accepts (any); the service reads them from the standard chain.
CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class S3Server:
    """``start`` it, use ``url``, ``bucket()`` for a new empty bucket, ``stop`` it."""

    def __init__(self) -> None:
        try:
            from moto.server import ThreadedMotoServer
        except ImportError as exc:  # moto without its [server] extra
            pytest.skip(f"moto[server] is not installed ({exc})")
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)

    def start(self) -> S3Server:
        self._server.start()
        return self

    def stop(self) -> None:
        self._server.stop()

    def client(self):  # type: ignore[no-untyped-def]
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.url,
            aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            region_name=CREDENTIALS["AWS_DEFAULT_REGION"],
        )

    def bucket(self) -> str:
        name = f"atelier-{uuid.uuid4().hex[:12]}"
        self.client().create_bucket(Bucket=name)
        return name
