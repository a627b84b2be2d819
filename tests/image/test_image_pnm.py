"""Binary PNM (formats/pnm.py): every variant round-trips exactly, maxval
rescaling follows Pillow, the header follows Netpbm's rules."""

from __future__ import annotations

import io
from fractions import Fraction

import numpy as np
import pytest
import torch
from image_helpers import as_tensor, chw, pil_bytes, pil_chw, pnm_bytes, rand, rng
from PIL import Image

import gdsio
import gdsio.image as gi
from gdsio.image.formats.pnm import parse_pnm


@pytest.mark.parametrize("shape", [(1, 1), (1, 17), (13, 1), (7, 5), (64, 33)])
@pytest.mark.parametrize("channels", [1, 3])
def test_pnm_8bit_round_trip(shape, channels):
    a = rand(shape if channels == 1 else shape + (3,))
    for data in (pnm_bytes(a), pil_bytes(Image.fromarray(a), "PPM")):
        img, info = gi.decode(as_tensor(data), return_info=True)
        assert img.dtype == torch.uint8 and img.shape == (channels,) + shape
        np.testing.assert_array_equal(img.numpy(), chw(a))
        assert (info.format, info.backend, info.reason) == ("pnm", "gdsio-cpu", "")


@pytest.mark.parametrize("channels", [1, 3])
def test_pnm_16bit_is_uint16(channels):
    a = rand((9, 11) if channels == 1 else (9, 11, 3), np.uint16)
    img = gi.decode(pnm_bytes(a))
    assert img.dtype == torch.uint16
    np.testing.assert_array_equal(img.numpy(), chw(a))
    if channels == 1:  # Pillow reads 16-bit P5 as mode I, same values
        np.testing.assert_array_equal(img.numpy()[0], np.array(Image.open(io.BytesIO(pnm_bytes(a)))))


@pytest.mark.parametrize("maxval", [1, 2, 3, 5, 7, 15, 100, 127, 128, 200, 254])
@pytest.mark.parametrize("magic", ["P5", "P6"])
def test_pnm_small_maxval_matches_pillow(maxval, magic):
    # Every sample value, including values above maxval (clamped by both).
    values = np.arange(256, dtype=np.uint8)
    a = np.tile(values, 3).reshape(3, 256) if magic == "P5" else np.stack([values, values[::-1], values], -1)[None]
    data = pnm_bytes(a, maxval=maxval)
    ours = gi.decode(data)
    ref = pil_chw(Image.open(io.BytesIO(data)))
    assert ours.dtype == torch.uint8
    np.testing.assert_array_equal(ours.numpy(), ref)


@pytest.mark.parametrize("maxval", [256, 257, 1000, 1023, 4095, 32767, 65534])
def test_pnm_16bit_maxval_matches_pillow(maxval):
    a = np.concatenate([np.arange(0, min(maxval + 40, 65536)), rand(2000, np.uint16)]).astype(np.uint16)[None]
    data = pnm_bytes(a, maxval=maxval)
    ours = gi.decode(data)
    assert ours.dtype == torch.uint16
    np.testing.assert_array_equal(ours.numpy()[0], np.array(Image.open(io.BytesIO(data))))


def test_pnm_p6_16bit_maxval_rule():
    # Pillow turns 16-bit P6 into 8 bits; gdsio keeps uint16: check the rule itself.
    maxval = 1000
    a = rng.integers(0, 1100, (4, 50, 3)).astype(np.uint16)
    ours = gi.decode(pnm_bytes(a, maxval=maxval)).numpy()
    expect = np.vectorize(lambda v: 65535 if v >= maxval else round(Fraction(int(v) * 65535, maxval)))(a)
    np.testing.assert_array_equal(ours, chw(expect))


@pytest.mark.parametrize(
    "header",
    [
        b"P5\n4 3\n255\n",
        b"P5 4 3 255 ",
        b"P5\r\n4\r\n3\r\n255\r",
        b"P5\t4\t3\t255\t",
        b"P5\n# a comment\n4 # width\n# more\n3\n255\n",
        b"P5#c\n4 3\n255\n",
        b"P5\n4 3\n255# comment ending the header\n",
        b"P5\n4 3\n255#\r",
        b"P5\n\n\n  4    3 \x0b\x0c 255\n",
    ],
)


def test_pnm_header_whitespace_and_comments(header):
    a = rand((3, 4))
    h = parse_pnm(header, len(header) + 12)
    assert (h.width, h.height, h.maxval, h.data_offset) == (4, 3, 255, len(header))
    np.testing.assert_array_equal(gi.decode(header + a.tobytes()).numpy(), chw(a))


def test_pnm_trailing_bytes_are_ignored():
    a = rand((5, 6, 3))
    np.testing.assert_array_equal(gi.decode(pnm_bytes(a) + b"P6\nmore").numpy(), chw(a))


def test_pnm_big_image_uses_every_band():
    a = rand((700, 1000, 3))
    with gdsio.settings(threads=4):
        np.testing.assert_array_equal(gi.decode(pnm_bytes(a)).numpy(), chw(a))


# ---- the variants Pillow decodes: plain P1/P2/P3, bitmap P4, gray PFM (Pf)


def plain(magic: bytes, a: np.ndarray, maxval: int | None = None, sep: bytes = b" ") -> bytes:
    """A plain PNM written by hand: P1 (0 is white), P2 (H,W) or P3 (H,W,3) in decimal."""
    head = magic + b"\n%d %d\n" % (a.shape[1], a.shape[0]) + (b"%d\n" % maxval if maxval is not None else b"")
    return head + b"\n".join(sep.join(b"%d" % v for v in row.reshape(-1)) for row in a) + b"\n"


def pillow_modes(data: bytes) -> dict[str, np.ndarray]:
    """What gdsio gives in each mode, by the rules it follows for every Pillow format."""
    with Image.open(io.BytesIO(data)) as f:
        f.load()
        if f.mode in ("I", "F"):  # 16-bit and float gray: kept, RGB replicates it (no clipping convert)
            a = pil_chw(f)
            return {"UNCHANGED": a, "RGB": np.repeat(a, 3, axis=0), "GRAY": a}
        rgb = f.convert("RGB")
        return {"RGB": pil_chw(rgb), "GRAY": pil_chw(rgb.convert("L")),
                "UNCHANGED": pil_chw(f.convert("L") if f.mode == "1" else f)}


def assert_as_pillow(data: bytes, dtype=torch.uint8) -> torch.Tensor:
    want = pillow_modes(data)
    for mode in ("UNCHANGED", "RGB", "GRAY"):
        img, info = gi.decode(data, mode=mode, return_info=True)
        assert img.dtype == dtype and (info.format, info.backend) == ("pnm", "pillow"), mode
        np.testing.assert_array_equal(img.numpy(), want[mode], err_msg=mode)
    return gi.decode(data)


def test_bitmaps_p1_and_p4_are_pillows_mode_1_as_a_1bit_png_is():
    bits = rng.integers(0, 2, (7, 13)).astype(np.uint8)  # 1 is black in PBM
    p4 = b"P4\n13 7\n" + np.packbits(bits, axis=1).tobytes()
    png = pil_bytes(Image.fromarray(bits == 0), "PNG")  # the same image, 1-bit PNG
    for data in (plain(b"P1", bits), plain(b"P1", bits, sep=b""), p4):
        with Image.open(io.BytesIO(data)) as f:
            assert f.mode == "1"
        img = assert_as_pillow(data)
        np.testing.assert_array_equal(img.numpy(), np.where(bits == 0, 255, 0)[None])
        for mode in ("UNCHANGED", "RGB", "GRAY"):
            assert torch.equal(gi.decode(data, mode=mode), gi.decode(png, mode=mode)), mode


@pytest.mark.parametrize("maxval", [1, 2, 3, 7, 100, 255])
def test_plain_p2_p3_match_pillow(maxval):
    g = rng.integers(0, maxval + 1, (5, 9))
    c = rng.integers(0, maxval + 1, (4, 6, 3))
    assert_as_pillow(plain(b"P2", g, maxval))
    assert_as_pillow(plain(b"P3", c, maxval))
    if maxval == 255:  # the same pixels as the binary file: one rule for both
        np.testing.assert_array_equal(gi.decode(plain(b"P3", c, maxval)).numpy(), gi.decode(pnm_bytes(c.astype(np.uint8))).numpy())


@pytest.mark.parametrize("maxval", [256, 1000, 65535])
def test_plain_p2_above_255_is_uint16_as_p5(maxval):
    g = np.concatenate([[0, 1, maxval // 2, maxval], rng.integers(0, maxval + 1, 41)]).reshape(5, 9)
    img = assert_as_pillow(plain(b"P2", g, maxval), torch.uint16)
    assert torch.equal(img, gi.decode(pnm_bytes(g.astype(np.uint16), maxval=maxval)))


def test_plain_p3_above_255_is_pillows_8_bits_and_says_so():
    c = rng.integers(0, 1001, (3, 4, 3))
    data = plain(b"P3", c, 1000)
    assert_as_pillow(data)
    assert "plain PPM (P3) with maxval above 255: Pillow keeps 8 bits per channel" in gi.decode(data, return_info=True)[1].reason
    assert gi.decode(plain(b"P3", c % 256, 255), return_info=True)[1].reason == ""


@pytest.mark.parametrize("data", [
    b"P2 3 1 10 0 5 10",  # one line, spaces only
    b"P2\x0b3\x0c1\r10\t0 5 10",  # every whitespace character
    b"P2\n# a comment\n3 # width\n1\n10\n0 5 10\n",
    b"P2\n3 1 1#0 comment inside a token\n0 0 5 10",  # Pillow's tokens run on past a comment
    b"P2\n3 1\n10\n0 # in the samples\n5\r10",
    b"P2 +3 1 10 0 5 10",  # int() takes a sign (Pillow's reader)
    b"P2 3 1 10 00000000 5 010",  # ten characters at most
    b"P2 3 1 10 0 5 10 11 12 trailing",  # what follows the samples is ignored
    b"P1 3 1 0 1#x\n0",
])
def test_plain_header_and_sample_rules_are_pillows(data):
    assert_as_pillow(data)


@pytest.mark.parametrize("data, words", [
    (b"P2 3 1 10 0 5 11", "Channel value too large"),
    (b"P2 3 1 10 0 -5 1", "Channel value is negative"),
    (b"P2 3 1 10 0 5", "not enough image data"),
    (b"P2 3 1 0 0 0 0", "maxval must be greater than 0"),
    (b"P3 1 1 65536 0 0 0", "maxval must be greater than 0"),
    (b"P2 3 1 10 0 0x5 1", "invalid literal"),
    (b"P2 3.0 1 10 0 5 10", "invalid literal"),
    (b"P2 3 1 10 0 5 000000000010", "Token too long"),
    (b"P1 3 2 012101", "Invalid token"),
    (b"P1 3 2 01010", "not enough image data"),
    (b"P4\n10 2\n\xa0\xc0\xff", "truncated"),
    (b"P2#c\n3 1 10 0 5 10", "cannot read this PPM image's header"),  # the magic ends at whitespace
    (b"P2 0 1 10", "cannot read this PPM image's header"),
])
def test_what_pillow_refuses_is_refused_naming_the_file(tmp_path, data, words):
    with pytest.raises(Exception):  # noqa: B017 - Pillow's verdict, whatever it raises
        with Image.open(io.BytesIO(data)) as f:
            f.load()
    p = tmp_path / "bad.pgm"
    p.write_bytes(data)
    with pytest.raises(ValueError, match=words) as e:
        gi.read(p, device="cpu")
    assert str(e.value).startswith(f"{p}: ")
    with pytest.raises(ValueError, match=r"^data\[1\]: "):
        gi.decode([pnm_bytes(rand((2, 2))), data])


def test_pfm_is_float32_as_pillow_reads_it():
    f = rand((5, 7), np.float32)
    f[0, :3] = [np.inf, -0.0, 1e-40]
    for order, scale in (("<f4", b"-1.0"), (">f4", b"1.0"), ("<f4", b"-2.5")):
        data = b"Pf\n7 5\n" + scale + b"\n" + f[::-1].astype(order).tobytes()  # rows bottom-up
        img, info = gi.decode(data, return_info=True)
        assert img.dtype == torch.float32 and (info.format, info.backend) == ("pnm", "pillow")
        with Image.open(io.BytesIO(data)) as im:
            assert im.mode == "F"
            np.testing.assert_array_equal(img.numpy(), pil_chw(im))
        assert img.numpy().view(np.uint32).tolist() == f[None].view(np.uint32).tolist()
        assert torch.equal(gi.decode(data, mode="RGB"), img.expand(3, -1, -1))
        assert torch.equal(gi.decode(data, mode="GRAY"), img)
    with pytest.raises(ValueError, match="scale must be finite and non-zero"):
        gi.decode(b"Pf\n2 1\n0\n" + bytes(8))
    with pytest.raises(ValueError, match="truncated"):
        gi.decode(b"Pf\n2 1\n-1\n" + bytes(7))


@pytest.mark.parametrize("data, words", [
    (b"PF\n1 1\n-1.0\n" + bytes(12), r"colour PFM \(PF\) is not supported \(nor by Pillow\)"),
    (b"P7\nWIDTH 1\nHEIGHT 1\nDEPTH 1\nMAXVAL 255\nTUPLTYPE GRAYSCALE\nENDHDR\n\x00", r"PAM \(P7\) is not supported"),
])
def test_what_pillow_does_not_read_is_refused(data, words):
    with pytest.raises(Exception):  # noqa: B017 - Pillow's verdict
        Image.open(io.BytesIO(data)).load()
    with pytest.raises(ValueError, match=r"^data: " + words):
        gi.decode(data)


def test_plain_pnm_in_a_batch_with_binary_ones_and_from_files(tmp_path):
    a, g = rand((4, 5)), rng.integers(0, 256, (3, 6))
    imgs, infos = gi.decode([pnm_bytes(a), plain(b"P2", g, 255), pnm_bytes(a)], return_info=True)
    assert [i.backend for i in infos] == ["gdsio-cpu", "pillow", "gdsio-cpu"]
    np.testing.assert_array_equal(imgs[1].numpy(), g[None])
    (tmp_path / "x.pgm").write_bytes(plain(b"P2", g, 255))
    np.testing.assert_array_equal(gi.read(tmp_path / "x.pgm", device="cpu").numpy(), g[None])
