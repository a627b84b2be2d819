"""s3:// objects against moto's S3 server on 127.0.0.1: SigV4 signing
(verified by moto with IAM enforcement on), ranges, listing, 403/404, an
object rewritten mid-read, anonymous access, profiles; configured the AWS way
(AWS_* variables, shared files)."""

from __future__ import annotations

import errno
import json
import textwrap

import numpy as np
import pytest
from remote_fixtures import aws_clean, loopback_only, moto, moto_server, no_leaks, server  # noqa: F401

import gdsio
from conftest import run_python

pytest.importorskip("botocore", reason="the s3 tests need botocore (pip install 'gdsio[s3]')")
pytest.importorskip("moto", reason="the s3 tests need moto's server (pip install 'moto[server]')")


def _data(n: int, seed: int = 0) -> bytes:
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8).tobytes()


def _bucket(moto, name: str = "bkt", objects: dict[str, bytes] | None = None):
    c = moto.client()
    c.create_bucket(Bucket=name)
    for k, v in (objects or {}).items():
        c.put_object(Bucket=name, Key=k, Body=v)
    return c


def _enforce_auth(moto, bucket_allowed: str) -> tuple[str, str]:
    """An IAM user allowed to read and list one bucket only; moto then
    checks every request's signature and policy. Returns its keys."""
    from moto import settings as moto_settings

    iam = moto.client("iam")
    iam.create_user(UserName="reader")
    # AWS asks for s3:GetObject on a HEAD; moto 5.2.6 asks for "s3:HeadObject", an action AWS does not have (moto's
    # request routing names the action after the API call). Allowing both keeps the user a reader of this bucket on
    # either and changes nothing on AWS, where no request asks for s3:HeadObject.
    policy = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow",
              "Action": ["s3:GetObject", "s3:HeadObject", "s3:ListBucket"],
              "Resource": [f"arn:aws:s3:::{bucket_allowed}", f"arn:aws:s3:::{bucket_allowed}/*"]}]}
    iam.put_user_policy(UserName="reader", PolicyName="read", PolicyDocument=json.dumps(policy))
    k = iam.create_access_key(UserName="reader")["AccessKey"]
    moto_settings.INITIAL_NO_AUTH_ACTION_COUNT = 0  # from now on (the fixture restores it)
    return k["AccessKeyId"], k["SecretAccessKey"]


def test_read_ranges_and_batches(moto):
    data = _data(1_000_003)
    _bucket(moto, objects={"dir/a b+ü.bin": data})
    url = "s3://bkt/dir/a b+ü.bin"
    with gdsio.settings(remote_chunk_bytes=256 << 10, remote_concurrency=3):
        t, st = gdsio.read(url, device="cpu", return_stats=True)
        assert bytes(t.numpy()) == data
        assert st.backend == "s3" and st.path == url and st.chunks == 4 and st.requests == 4 and not st.reason
        with gdsio.File(url) as f:
            assert f.size() == len(data) and f.kind == "s3"
            a, b = np.zeros(17, np.uint8), np.zeros(300_000, np.uint8)
            st = f.read_batch([(a, 17, 999_986), (b, 300_000, 123)])
            assert bytes(a) == data[-17:] and bytes(b) == data[123:300_123] and st.backend == "s3"
            assert f.pread(a, 17, file_offset=5).result().nbytes == 17 and bytes(a) == data[5:22]


def test_missing_key_and_bucket(moto):
    _bucket(moto)
    with pytest.raises(FileNotFoundError) as e:
        gdsio.read("s3://bkt/nope", device="cpu")
    assert e.value.filename == "s3://bkt/nope" and e.value.errno == errno.ENOENT
    with pytest.raises(FileNotFoundError):
        gdsio.File("s3://no-such-bucket/x")
    with pytest.raises(IsADirectoryError):
        gdsio.File("s3://bkt/")
    with pytest.raises(ValueError, match="names no bucket"):
        gdsio.File("s3:///key")


def test_signed_requests_and_access_denied(moto, monkeypatch):
    _bucket(moto, "open", {"k.bin": b"hello"})
    _bucket(moto, "shut", {"k.bin": b"secret"})
    key, secret = _enforce_auth(moto, "open")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    assert bytes(gdsio.read("s3://open/k.bin", device="cpu").numpy()) == b"hello"  # moto checked the signature
    with pytest.raises(PermissionError) as e:
        gdsio.read("s3://shut/k.bin", device="cpu")
    assert e.value.filename == "s3://shut/k.bin" and "403" in str(e.value)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret[:-2] + "xx")  # a wrong secret: SignatureDoesNotMatch
    with pytest.raises(PermissionError) as e:
        gdsio.read("s3://open/k.bin", device="cpu")
    for text in (str(e.value), repr(e.value)):
        assert secret[:10] not in text and key not in text


def test_profile_from_shared_files(moto, monkeypatch, tmp_path):
    _bucket(moto, "open", {"k.bin": b"profiled"})
    key, secret = _enforce_auth(moto, "open")
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    creds = tmp_path / "credentials"
    creds.write_text(f"[team]\naws_access_key_id = {key}\naws_secret_access_key = {secret}\n")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(creds))
    monkeypatch.setenv("AWS_PROFILE", "team")
    assert bytes(gdsio.read("s3://open/k.bin", device="cpu").numpy()) == b"profiled"


def test_anonymous_when_no_credentials(moto, monkeypatch):
    c = _bucket(moto, "pub", {"private.bin": b"private"})
    c.put_object(Bucket="pub", Key="k.bin", Body=b"public", ACL="public-read")
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    t, st = gdsio.read("s3://pub/k.bin", device="cpu", return_stats=True)
    assert bytes(t.numpy()) == b"public" and "unsigned" in st.reason
    with pytest.raises(PermissionError, match="no AWS credentials were found"):
        gdsio.read("s3://pub/private.bin", device="cpu")


def test_session_token_is_signed_in(moto, monkeypatch):
    from gdsio.io import s3

    monkeypatch.setenv("AWS_SESSION_TOKEN", "tok-123")
    h = s3.environment().sign("GET", "http://127.0.0.1:1/b/k", {"Range": "bytes=0-1"})
    assert h["X-Amz-Security-Token"] == "tok-123" and h["Authorization"].startswith("AWS4-HMAC-SHA256")
    assert "range" in h["Authorization"].lower()  # the Range header is signed too


def test_object_rewritten_after_open(moto):
    c = _bucket(moto, objects={"m.bin": _data(100_000)})
    f = gdsio.File("s3://bkt/m.bin")
    c.put_object(Bucket="bkt", Key="m.bin", Body=_data(100_000, 1))
    with pytest.raises(OSError) as e:
        f.read_into(np.zeros(1000, np.uint8))
    assert e.value.errno == errno.ESTALE and e.value.filename == "s3://bkt/m.bin"
    f.close()


def test_loader_over_a_prefix_is_an_image_folder(moto):
    from PIL import Image
    import io

    objs = {}
    for cls, n in (("cat", 2), ("dog", 3)):
        for i in range(n):
            b = io.BytesIO()
            Image.new("RGB", (8, 6), (10 * i, 50, 200)).save(b, "PNG")
            objs[f"train/{cls}/{i}.png"] = b.getvalue()
    objs["train/README.txt"] = b"not an image"
    objs["other/cat/x.png"] = objs["train/cat/0.png"]
    _bucket(moto, objects=objs)
    loader = gdsio.Loader("s3://bkt/train/", batch_size=5, device="cpu", threads=2)
    assert loader.classes == ["cat", "dog"] and len(loader.table) == 5
    (batch,) = list(loader)
    imgs, labels = batch
    assert sorted(labels.tolist()) == [0, 0, 1, 1, 1]
    st = loader.stats()
    assert st.io_backends == {"s3": 5}, st.io_backends  # the loader says which reader ran, per file
    # A glob of URLs (unlabeled) and a list of URLs.
    table = gdsio.data.sources.scan("s3://bkt/train/*/1.png")
    assert table.files.paths == ["s3://bkt/train/cat/1.png", "s3://bkt/train/dog/1.png"]
    table = gdsio.data.sources.scan(["s3://bkt/train/dog/2.png", "s3://bkt/other/cat/x.png"])
    assert table.kind == "image" and len(table) == 2
    with pytest.raises(FileNotFoundError, match="s3://bkt/nothing/"):
        gdsio.Loader("s3://bkt/nothing/", batch_size=2, device="cpu")


def test_tensors_and_images_from_s3(moto, tmp_path):
    import io

    import torch
    from PIL import Image
    from safetensors.torch import save

    w = {"a": torch.arange(12, dtype=torch.float32).reshape(3, 4), "b": torch.ones(5, dtype=torch.int64)}
    buf = io.BytesIO()
    np.save(buf, np.arange(30, dtype=np.int16).reshape(5, 6))
    png = io.BytesIO()
    Image.new("RGB", (7, 5), (1, 2, 3)).save(png, "PNG")
    jpg = io.BytesIO()
    Image.new("RGB", (16, 8), (200, 100, 50)).save(jpg, "JPEG", quality=95)
    _bucket(moto, objects={"w.safetensors": save(w), "x.npy": buf.getvalue(), "i.png": png.getvalue(),
                           "j.jpg": jpg.getvalue()})
    got = gdsio.load_safetensors("s3://bkt/w.safetensors", device="cpu")
    assert torch.equal(got["a"], w["a"]) and torch.equal(got["b"], w["b"])
    x = gdsio.load_npy("s3://bkt/x.npy", device="cpu")
    assert torch.equal(x, torch.arange(30, dtype=torch.int16).reshape(5, 6))
    img = gdsio.image.read("s3://bkt/i.png", device="cpu")
    assert img.shape == (3, 5, 7) and img[:, 0, 0].tolist() == [1, 2, 3]
    imgs = gdsio.image.read(["s3://bkt/j.jpg", "s3://bkt/i.png"], device="cpu")
    assert imgs[0].shape == (3, 8, 16) and imgs[1].shape == (3, 5, 7)
    with pytest.raises(FileNotFoundError):
        gdsio.image.read("s3://bkt/missing.jpg", device="cpu")


def test_listing_errors(moto, monkeypatch):
    with pytest.raises(FileNotFoundError, match="no such bucket"):
        gdsio.data.sources.scan("s3://absent/prefix/")
    _bucket(moto, "shut", {"a/k.png": b"x"})
    _bucket(moto, "open")
    key, secret = _enforce_auth(moto, "open")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    with pytest.raises(PermissionError, match="access denied"):
        gdsio.data.sources.scan("s3://shut/a/")


def test_without_botocore_the_error_names_the_extra():
    code = textwrap.dedent("""
        import sys
        sys.modules["botocore"] = None
        import gdsio
        try:
            gdsio.File("s3://b/k")
        except ImportError as e:
            print("ERR", e)
        print([b.reason for b in gdsio.backends() if b.name == "s3"][0])
    """)
    r = run_python(code)
    assert "ERR reading s3:// URLs needs botocore" in r.stdout and "gdsio[s3]" in r.stdout, r.stdout + r.stderr


def test_a_redirect_from_s3_is_refused_naming_the_region(server, monkeypatch):
    """A signed request is bound to its host: S3's 301/307 (a bucket in another region) is an OSError that
    says so, never an empty object, and never followed."""
    for k, v in {"AWS_ENDPOINT_URL": server.base, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                 "AWS_REGION": "us-east-1"}.items():
        monkeypatch.setenv(k, v)
    server.put("elsewhere/k.bin", b"x" * 100)
    server.put("bkt/k.bin", b"x" * 100)
    server.redirect("bkt/k.bin", "/elsewhere/k.bin", 301, headers={"x-amz-bucket-region": "eu-west-1"})
    with pytest.raises(OSError, match=r"HTTP 301: the bucket is in region eu-west-1.*AWS_REGION=eu-west-1") as e:
        gdsio.File("s3://bkt/k.bin")
    assert e.value.filename == "s3://bkt/k.bin"
    server.redirect("bkt/k.bin", "/elsewhere/k.bin", 307, methods=("GET",))  # the HEAD answers, the GETs do not
    with pytest.raises(OSError, match=r"HTTP 307: redirected to .*another region than AWS_REGION") as e:
        gdsio.read("s3://bkt/k.bin", device="cpu")
    assert e.value.filename == "s3://bkt/k.bin"
    assert "/elsewhere/k.bin" not in server.paths
