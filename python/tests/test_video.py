"""Video fields end to end: pack (wds, Writer), VideoClip in the loader, checked against
PyAV (Debian's python3-av) and the ffmpeg CLI on videos made here with ffmpeg."""

import io
import os
import shutil
import subprocess
import tarfile

import numpy as np
import pytest

import stoker
from stoker import _stoker

pytestmark = pytest.mark.skipif(not _stoker.media_available or shutil.which("ffmpeg") is None,
                                reason="needs a build with libav and the ffmpeg CLI")
av = pytest.importorskip("av")


def ffmpeg(path, *args):
    subprocess.run(["ffmpeg", "-hide_banner", "-loglevel", "error", "-y", *args, str(path)], check=True)
    return path.read_bytes()


def make_testsrc(path, codec, rate=25, seconds=2, extra=()):
    return ffmpeg(path, "-f", "lavfi", "-i", f"testsrc=size=64x48:rate={rate}:duration={seconds}", *codec, *extra)


H264 = ("-c:v", "libx264", "-bf", "3", "-g", "12", "-pix_fmt", "yuv420p")
VP9 = ("-c:v", "libvpx-vp9", "-g", "12", "-deadline", "realtime")


def write_tar(path, samples):
    with tarfile.open(path, "w") as t:
        for key, members in samples:
            for ext, data in members.items():
                info = tarfile.TarInfo(f"{key}.{ext}")
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))
    return str(path)


def pyav_frames(data):
    """{pts seconds: rgb24 frame} of every frame, as PyAV decodes it."""
    with av.open(io.BytesIO(data)) as c:
        return {float(f.time): f.to_ndarray(format="rgb24") for f in c.decode(video=0)}


@pytest.fixture(scope="module")
def videos(tmp_path_factory):
    d = tmp_path_factory.mktemp("videos")
    return {
        "h264": make_testsrc(d / "a.mp4", H264),
        "vp9": make_testsrc(d / "b.webm", VP9),
        # Variable frame rate: 40 ms frames, then 100 ms ones.
        "vfr": ffmpeg(d / "c.mkv", "-f", "lavfi", "-i",
                      "testsrc=size=64x48:rate=25:duration=2,setpts='if(lt(N,20),N*0.04,0.8+(N-20)*0.1)/TB'",
                      "-vsync", "vfr", *H264),
    }


@pytest.fixture(scope="module")
def wds_dataset(tmp_path_factory, videos):
    d = tmp_path_factory.mktemp("wds")
    samples = [(f"s{i}", {"mp4" if name != "vp9" else "webm": data, "cls": str(i).encode()})
               for i, (name, data) in enumerate(videos.items())]
    # One field per extension: mp4 and webm are two fields, so each sample gets both.
    samples = [(k, {"mp4": videos["h264"] if k != "s2" else videos["vfr"], "webm": videos["vp9"], "cls": m["cls"]})
               for k, m in samples]
    tar = write_tar(d / "a.tar", samples)
    out = str(d / "ds")
    stoker.pack_wds([tar], out)
    return out


def test_pack_wds_maps_videos_and_keeps_the_files(wds_dataset, videos, tmp_path):
    schema = dict(item.rsplit(":", 1) for item in stoker.read_manifest(wds_dataset)["schema"].split())
    assert schema["mp4"] == "video" and schema["webm"] == "video"
    b = next(iter(stoker.Loader(wds_dataset, batch_size=3, shuffle=False)))
    assert b["mp4"][0] == videos["h264"] and b["webm"][1] == videos["vp9"]  # as stored: the files
    stoker.extract(wds_dataset, str(tmp_path / "x"))
    assert (tmp_path / "x" / "s2.mp4").read_bytes() == videos["vfr"]


@pytest.mark.parametrize("field,name", [("mp4", "h264"), ("webm", "vp9")])
def test_native_frames_equal_pyav(wds_dataset, videos, field, name):
    clip = stoker.VideoClip(frames=10, stride=3, size=(48, 64), crop="none")
    loader = stoker.Loader(wds_dataset, batch_size=2, shuffle=False, seed=5, fields={field: clip})
    ref = pyav_frames(videos[name])
    times = sorted(ref)
    for b in loader:
        frames, pts = b[field].numpy(), b[field + ".pts"].numpy()
        assert frames.shape[1:] == (10, 48, 64, 3)
        for j in range(frames.shape[0]):
            if b["__key__"][j] == "s2" and field == "mp4":
                continue
            first = times.index(min(times, key=lambda t: abs(t - pts[j][0])))
            for k in range(10):
                want = times[min(first + 3 * k, len(times) - 1)]
                assert pts[j][k] == pytest.approx(want)
                np.testing.assert_array_equal(frames[j][k], ref[want])


def test_variable_frame_rate_frames_are_those_played_at_each_time(wds_dataset, videos):
    fps = 7.0
    loader = stoker.Loader(wds_dataset, batch_size=3, shuffle=False,
                           fields={"mp4": stoker.VideoClip(frames=8, fps=fps, size=(48, 64), crop="none")})
    ref = pyav_frames(videos["vfr"])
    times = np.array(sorted(ref))
    assert len(set(np.round(np.diff(times), 3))) > 1  # the rate does vary
    # crop="none": one clip, centred: t0 = start + (duration - 1 tick - span) / 2.
    info = _stoker.probe_media(videos["vfr"])
    num, den = info["time_base"]
    span = 7 / fps * den / num
    t0 = (info["start_pts"] + 0.5 * (info["duration"] - 1 - span)) * num / den
    b = next(iter(loader))
    j = b["__key__"].index("s2")
    pts = b["mp4.pts"][j].numpy()
    for k in range(8):
        want = times[times <= t0 + k / fps + 1e-9].max()
        assert pts[k] == pytest.approx(want)
        np.testing.assert_array_equal(b["mp4"][j][k].numpy(), ref[float(want)])


def test_rotated_video_comes_upright_as_ffmpeg_turns_it(tmp_path):
    plain = make_testsrc(tmp_path / "p.mp4", H264, seconds=1)
    data = bytearray(plain)
    t = data.index(b"tkhd")
    m = t + (56 if data[t + 4] == 1 else 44)
    data[m:m + 20] = (0).to_bytes(4, "big") + (0x10000).to_bytes(4, "big") + bytes(4) + (0xFFFF0000).to_bytes(4, "big") + bytes(4)
    rotated = tmp_path / "r.mp4"
    rotated.write_bytes(bytes(data))
    assert _stoker.probe_media(bytes(data))["rotation"] == 90
    # ffmpeg turns it by its display matrix (autorotate): 48 wide, 64 high.
    raw = subprocess.run(["ffmpeg", "-hide_banner", "-loglevel", "error", "-i", str(rotated), "-f", "rawvideo",
                          "-pix_fmt", "rgb24", "-"], check=True, capture_output=True).stdout
    upright = np.frombuffer(raw, np.uint8).reshape(-1, 64, 48, 3)
    with stoker.Writer(str(tmp_path / "ds"), fields={"mp4": "video"}) as w:
        w.write({"__key__": "r", "mp4": bytes(data)})
    loader = stoker.Loader(str(tmp_path / "ds"), batch_size=1, shuffle=False,
                           fields={"mp4": stoker.VideoClip(frames=25, stride=1, size=(64, 48), crop="none")})
    got = next(iter(loader))["mp4"][0].numpy()
    assert got.shape == (25, 64, 48, 3)
    # ffmpeg's CLI scales with its own flags: equal up to rounding.
    assert np.abs(got.astype(int) - upright[:25].astype(int)).max() <= 2


def test_draws_are_deterministic_and_resume(wds_dataset):
    def run(**kw):
        return stoker.Loader(wds_dataset, batch_size=1, shuffle=True, seed=11, threads=2,
                             fields={"mp4": stoker.VideoClip(frames=4, fps=10, size=32, crop="random")}, **kw)
    a = [(b["index"].tolist(), b["mp4.pts"].numpy().copy(), b["mp4"].numpy().copy()) for b in run()]
    b = [(x["index"].tolist(), x["mp4.pts"].numpy().copy(), x["mp4"].numpy().copy()) for x in run()]
    assert len(a) == 3
    for x, y in zip(a, b):
        assert x[0] == y[0]
        np.testing.assert_array_equal(x[1], y[1])
        np.testing.assert_array_equal(x[2], y[2])
    # Another seed draws other clips.
    other = stoker.Loader(wds_dataset, batch_size=3, shuffle=False, seed=12,
                          fields={"mp4": stoker.VideoClip(frames=4, fps=10, size=32)})
    first = stoker.Loader(wds_dataset, batch_size=3, shuffle=False, seed=11,
                          fields={"mp4": stoker.VideoClip(frames=4, fps=10, size=32)})
    assert not np.array_equal(next(iter(other))["mp4.pts"].numpy(), next(iter(first))["mp4.pts"].numpy())
    # Resume after one batch: the rest comes out the same.
    l1 = run()
    it = iter(l1)
    next(it)
    state = l1.state_dict()
    l2 = run()
    l2.load_state_dict(state)
    rest = [(x["index"].tolist(), x["mp4.pts"].numpy().copy(), x["mp4"].numpy().copy()) for x in l2]
    assert len(rest) == 2
    for x, y in zip(rest, a[1:]):
        assert x[0] == y[0]
        np.testing.assert_array_equal(x[1], y[1])
        np.testing.assert_array_equal(x[2], y[2])


def test_clips_and_center_crop_shapes(wds_dataset):
    loader = stoker.Loader(wds_dataset, batch_size=2, shuffle=False,
                           fields={"webm": stoker.VideoClip(frames=3, stride=2, clips=4, size=(16, 24), crop="center")})
    b = next(iter(loader))
    assert tuple(b["webm"].shape) == (2, 4, 3, 16, 24, 3)
    assert tuple(b["webm.pts"].shape) == (2, 4, 3)
    starts = b["webm.pts"][0, :, 0].numpy()
    assert np.all(np.diff(starts) > 0)  # spread over the video
    with pytest.raises(ValueError, match="frames"):
        stoker.VideoClip(frames=0)
    with pytest.raises(stoker.InvalidArgumentError, match="VideoClip: needs a video field"):
        stoker.Loader(wds_dataset, batch_size=2, fields={"cls": stoker.VideoClip()})


def test_corrupt_video_at_train_time_is_named_or_skipped(tmp_path, videos):
    bad = bytearray(videos["h264"])
    mdat = bad.index(b"mdat")
    for i in range(mdat + 600, min(len(bad), mdat + 4000), 7):
        bad[i] ^= 0xFF
    tar = write_tar(tmp_path / "a.tar", [("good", {"mp4": videos["h264"]}), ("bad", {"mp4": bytes(bad)})])
    with pytest.raises(stoker.DataLossError, match="bad"):
        stoker.pack_wds([tar], str(tmp_path / "refused"))
    out = str(tmp_path / "ds")
    stoker.pack_wds([tar], out, check=False)  # demuxed only: the damage gets through
    clip = stoker.VideoClip(frames=50, stride=1, size=16, crop="none")
    with pytest.raises(stoker.DataLossError, match=r"source 'bad'.*field 'mp4'"):
        for _ in stoker.Loader(out, batch_size=1, shuffle=False, fields={"mp4": clip}):
            pass
    keys = [k for b in stoker.Loader(out, batch_size=1, shuffle=False, on_error="skip", fields={"mp4": clip})
            for k in b["__key__"]]
    assert keys == ["good"]


def test_audio_windows_and_whole_tracks(tmp_path):
    import wave

    rate = 8000
    pcm = (np.sin(np.arange(rate) * 2 * np.pi * 440 / rate) * 12000).astype(np.int16)
    pcm[::97] = 0  # not periodic within a window: a misplaced cut would show
    with wave.open(str(tmp_path / "a.wav"), "wb") as w:
        w.setnchannels(1), w.setsampwidth(2), w.setframerate(rate), w.writeframes(pcm.tobytes())
    wav = (tmp_path / "a.wav").read_bytes()
    flac = ffmpeg(tmp_path / "a.flac", "-i", str(tmp_path / "a.wav"))
    mp3 = ffmpeg(tmp_path / "a.mp3", "-i", str(tmp_path / "a.wav"), "-c:a", "libmp3lame")
    tar = write_tar(tmp_path / "a.tar", [(f"k{i}", {"wav": wav, "flac": flac, "mp3": mp3}) for i in range(3)])
    out = str(tmp_path / "ds")
    stoker.pack_wds([tar], out)
    schema = stoker.read_manifest(out)["schema"]
    assert "wav:audio" in schema and "flac:audio" in schema and "mp3:audio" in schema
    want = pcm.astype(np.float32) / 32768
    # Whole tracks at the native rate: the samples themselves (wav and lossless flac).
    b = next(iter(stoker.Loader(out, batch_size=3, shuffle=False, fields={
        "wav": stoker.AudioClip(rate, seconds=None), "flac": stoker.AudioClip(rate, seconds=None)})))
    for f in ("wav", "flac"):
        offs = b[f + ".offsets"].numpy()
        assert list(np.diff(offs)) == [rate] * 3
        np.testing.assert_array_equal(b[f].numpy()[offs[1]:offs[2], 0], want)
    # Windows: cut where NAME.start says, in every field, and resampled to 16 kHz: 2x the samples.
    loader = stoker.Loader(out, batch_size=3, shuffle=True, seed=4, fields={
        "wav": stoker.AudioClip(rate, seconds=0.25), "flac": stoker.AudioClip(rate, seconds=0.25),
        "mp3": stoker.AudioClip(16000, mono=False, seconds=0.25)})
    b = next(iter(loader))
    assert tuple(b["wav"].shape) == (3, 1, 2000) and tuple(b["mp3"].shape) == (3, 2, 4000)
    starts = b["wav.start"].numpy()
    assert len(set(starts.round(6))) == 3 and np.all(starts <= 0.75)
    for j in range(3):
        s = int(round(starts[j] * rate))
        np.testing.assert_array_equal(b["wav"][j, 0].numpy(), want[s:s + 2000])
        s = int(round(b["flac.start"][j].item() * rate))
        np.testing.assert_array_equal(b["flac"][j, 0].numpy(), want[s:s + 2000])
        assert np.abs(b["mp3"][j].numpy()).max() > 0.1  # sound, on both channels
        np.testing.assert_allclose(b["mp3"][j, 0].numpy(), b["mp3"][j, 1].numpy())


def test_reencode_video_is_short_gop_cfr_and_close_to_the_source(videos):
    # The VFR file at 25 fps: every frame 40 ms after the last, a keyframe every 6.
    out = stoker.reencode_video(videos["vfr"], gop=6, fps=25)
    info = _stoker.probe_media(out)
    assert info["codec"] == "h264"
    frames = [k[2] for k in info["keyframes"]] + [info["frames"]]
    assert max(np.diff(frames)) <= 6
    with av.open(io.BytesIO(out)) as c:
        times = [float(f.time) for f in c.decode(video=0)]
    np.testing.assert_allclose(np.diff(times), 0.04, atol=1e-6)
    # Each output frame is the source frame shown at its time (lossy: within a tolerance).
    ref = pyav_frames(videos["vfr"])
    src_times = np.array(sorted(ref))
    got = pyav_frames(out)
    for t in (0.0, 0.44, 1.0, 2.36):
        want = src_times[src_times <= t + 1e-9].max()
        diff = np.abs(got[min(got, key=lambda x: abs(x - t))].astype(int) - ref[float(want)].astype(int)).mean()
        assert diff < 6, (t, diff)
    small = _stoker.probe_media(stoker.reencode_video(videos["h264"], gop=4, max_side=32))
    assert (small["width"], small["height"]) == (32, 24)
    with pytest.raises(stoker.InvalidArgumentError):
        stoker.reencode_video(videos["h264"], gop=0)


def test_pack_wds_and_writer_reencode_videos(tmp_path, videos):
    tar = write_tar(tmp_path / "a.tar", [("s0", {"mp4": videos["h264"]}), ("s1", {"mp4": videos["vp9"]})])
    spec = {"gop": 5, "max_side": 32}
    s = stoker.pack_wds([tar], str(tmp_path / "wds"), video_reencode=spec)
    assert s["records"] == 2 and any("re-encoded 2 videos" in n for n in s["notes"])
    with stoker.Writer(str(tmp_path / "w"), fields={"mp4": "video"}, video_reencode=spec) as w:
        w.write({"__key__": "a", "mp4": videos["vp9"]})
    for ds in ("wds", "w"):
        assert stoker.read_manifest(str(tmp_path / ds))["meta"]["video_reencode"] == \
            "libx264 gop=5 crf=23 max_side=32 fps=source"
        loader = stoker.Loader(str(tmp_path / ds), batch_size=1, shuffle=False,
                               fields={"mp4": stoker.VideoClip(frames=8, stride=1, size=(24, 32), crop="none")})
        b = next(iter(loader))
        assert b["mp4"].shape == (1, 8, 24, 32, 3)
        np.testing.assert_allclose(np.diff(b["mp4.pts"][0].numpy()), 0.04, atol=1e-6)
    with pytest.raises(ValueError):
        stoker.pack_wds([tar], str(tmp_path / "bad"), video_reencode={"gop": 5, "size": 3})


def test_audio_follows_the_clip_span(tmp_path, videos):
    # The audio track is a ramp: the sample at time t is t / 10 (PCM, 8 kHz, as stored),
    # so a window tells where it starts.
    data = ffmpeg(tmp_path / "ramp.mkv", "-f", "lavfi", "-i", "testsrc=size=64x48:rate=25:duration=2",
                  "-f", "lavfi", "-i", "aevalsrc=t/10:s=8000:d=2", *H264, "-c:a", "pcm_s16le")
    with stoker.Writer(str(tmp_path / "ds"), fields={"mkv": "video"}) as w:
        for k in range(4):
            w.write({"__key__": f"v{k}", "mkv": data})
        w.write({"__key__": "silent", "mkv": videos["h264"]})
    clip = stoker.VideoClip(frames=8, fps=10, size=32, clips=2, audio=stoker.AudioClip(8000))
    loader = stoker.Loader(str(tmp_path / "ds"), batch_size=4, shuffle=False, seed=3, fields={"mkv": clip})
    b = next(iter(loader))
    audio, pts = b["mkv.audio"].numpy(), b["mkv.pts"].numpy()
    assert audio.shape == (4, 2, 1, 6400)  # 8 frames at 10 fps: 0.8 s at 8 kHz
    for j in range(4):
        for c in range(2):
            a = audio[j, c, 0]
            t0 = a[0] * 10
            # t0 lies between the first frame shown and the next frame (25 fps source).
            assert pts[j, c, 0] - 1e-3 <= t0 < pts[j, c, 0] + 0.04 + 1e-3, (t0, pts[j, c, 0])
            live = a[: int((2.0 - t0) * 8000) - 8]  # the ramp, up to the track's end
            np.testing.assert_allclose(live, t0 / 10 + np.arange(len(live)) / 80000, atol=2e-4)
    with pytest.raises(ValueError):
        stoker.VideoClip(frames=8, audio=stoker.AudioClip(8000))  # needs fps
    bad = stoker.Loader(str(tmp_path / "ds"), batch_size=5, shuffle=False, fields={"mkv": clip})
    with pytest.raises(stoker.DataLossError, match="no audio track"):
        next(iter(bad))
