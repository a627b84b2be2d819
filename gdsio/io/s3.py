"""S3 the standard AWS way, through botocore (the ``gdsio[s3]`` extra):
credentials, region, endpoint and profiles as every AWS SDK finds them
(``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``,
``AWS_REGION``/``AWS_DEFAULT_REGION``, ``AWS_ENDPOINT_URL``/``AWS_ENDPOINT_URL_S3``,
``AWS_PROFILE`` and the shared config files, instance and container roles).
With no credentials at all the requests go unsigned (public buckets), and
results say so.

botocore signs (SigV4) and lists; the bytes travel over gdsio.io.http, so a
GET's body lands in the destination with no copy in between. Custom
endpoints (MinIO, moto, any S3-compatible store) are addressed path-style,
AWS's own virtual-hosted style.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import threading
import urllib.parse
from typing import Any, Iterator

__all__ = ["S3Env", "environment", "list_objects", "require_botocore"]

EXTRA_HINT = "pip install 'gdsio[s3]'"


def require_botocore(what: str) -> Any:
    """botocore, or ImportError naming the extra that brings it."""
    try:
        import botocore.session
    except ImportError:
        raise ImportError(f"{what} needs botocore, which is not installed: {EXTRA_HINT}") from None
    return botocore


@dataclasses.dataclass(frozen=True)
class S3Env:
    """What the AWS configuration of this process says, resolved once per
    distinct set of ``AWS_*`` variables."""

    region: str
    endpoint: str  # scheme://host[:port], no trailing slash
    path_style: bool
    credentials: Any  # botocore Credentials (refreshable), or None: unsigned
    client: Any  # a botocore S3 client, for listing

    @property
    def anonymous(self) -> bool:
        return self.credentials is None

    def object_url(self, bucket: str, key: str) -> str:
        q = urllib.parse.quote(key, safe="/~")
        if self.path_style:
            return f"{self.endpoint}/{bucket}/{q}"
        scheme, host = self.endpoint.split("://", 1)
        return f"{scheme}://{bucket}.{host}/{q}"

    def sign(self, method: str, url: str, headers: dict[str, str]) -> dict[str, str]:
        """`headers` plus SigV4's (Authorization, X-Amz-Date, X-Amz-Content-SHA256,
        X-Amz-Security-Token), or `headers` unchanged for unsigned requests."""
        if self.credentials is None:
            return headers
        from botocore.auth import S3SigV4Auth
        from botocore.awsrequest import AWSRequest

        req = AWSRequest(method=method, url=url, headers=dict(headers))
        S3SigV4Auth(self.credentials.get_frozen_credentials(), "s3", self.region).add_auth(req)
        return {k: v for k, v in req.headers.items()}


def _dns_bucket(bucket: str) -> bool:
    # Virtual-hosted addressing needs a DNS label without dots (TLS wildcard certificates).
    return bucket.replace("-", "").isalnum() and bucket.lower() == bucket and 3 <= len(bucket) <= 63


_lock = threading.Lock()


def _resolve(aws_env: tuple[tuple[str, str], ...]) -> S3Env:
    botocore = require_botocore("reading s3:// URLs")
    from botocore import UNSIGNED
    from botocore.config import Config

    session = botocore.session.Session()
    creds = session.get_credentials()
    if creds is not None and not (creds.access_key and creds.secret_key):
        creds = None
    region = session.get_config_variable("region") or "us-east-1"
    config = Config(signature_version=UNSIGNED if creds is None else "s3v4",
                    s3={"addressing_style": "auto"}, retries={"max_attempts": 3, "mode": "standard"})
    client = session.create_client("s3", region_name=region, config=config)
    endpoint = client.meta.endpoint_url.rstrip("/")
    custom = not urllib.parse.urlsplit(endpoint).hostname.endswith("amazonaws.com")  # type: ignore[union-attr]
    if custom:  # S3-compatible stores: path-style, as botocore's own 'auto' does for them
        client = session.create_client("s3", region_name=region, config=config.merge(Config(s3={"addressing_style": "path"})))
    return S3Env(region, endpoint, custom, creds, client)


_current: dict[tuple[tuple[str, str], ...], S3Env] = {}


def environment() -> S3Env:
    """The S3 configuration in force now (re-resolved when an ``AWS_*`` variable changes)."""
    key = tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("AWS_")))
    with _lock:  # botocore sessions are not thread-safe while they load
        env = _current.get(key)
        if env is None:
            env = _resolve(key)
            forget_locked()
            _current[key] = env
        return env


def forget_locked() -> None:
    for old in _current.values():
        old.client.close()  # its kept-alive connections, now rather than at garbage collection
    _current.clear()


def forget() -> None:
    """Drops the resolved configuration (and closes its listing client's connections)."""
    with _lock:
        forget_locked()


def _after_fork_in_child() -> None:
    # The listing client's kept-alive sockets belong to the parent; the lock may have been held at the fork.
    global _lock
    _lock = threading.Lock()
    forget_locked()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def object_url(env: S3Env, bucket: str, key: str) -> str:
    path_style = env.path_style or not _dns_bucket(bucket)
    return dataclasses.replace(env, path_style=path_style).object_url(bucket, key)


def list_objects(bucket: str, prefix: str) -> Iterator[tuple[str, int]]:
    """(key, size) of every object under `prefix`, in key order (ListObjectsV2).

    Raises:
        FileNotFoundError: no such bucket. PermissionError: listing refused.
        OSError: the store could not be reached.
    """
    env = environment()
    from botocore.exceptions import BotoCoreError, ClientError

    where = f"s3://{bucket}/{prefix}"
    try:
        for page in env.client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            for obj in page.get("Contents", ()):
                yield obj["Key"], int(obj["Size"])
    except ClientError as e:
        code = e.response.get("Error", {}).get("Code", "")
        status = int(e.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
        if code in ("NoSuchBucket", "404") or status == 404:
            raise FileNotFoundError(errno.ENOENT, f"cannot list: no such bucket ({code})", where) from None
        if code in ("AccessDenied", "403") or status == 403:
            hint = "; no AWS credentials were found, so the request was unsigned" if env.anonymous else ""
            raise PermissionError(errno.EACCES, f"cannot list: access denied ({code}){hint}", where) from None
        raise OSError(errno.EIO, f"cannot list: {code or status}", where) from None
    except BotoCoreError as e:  # connection errors; their text names the endpoint, never credentials
        raise OSError(errno.EIO, f"cannot list: {e.__class__.__name__}: {e}", where) from None
