"""Video clips and audio windows as field transforms: ``Loader(fields={"mp4": stoker.VideoClip(16, fps=8),
"wav": stoker.AudioClip(16000, seconds=2)})``.

A video field (``pack wds`` of .mp4/.mkv/.webm/.mov/.avi members, ``stoker pack
videofolder``, or ``Writer(fields={"mp4": "video"})``) is stored with a keyframe index,
so a clip is decoded from the keyframe at or before its first frame, inside stoker's
decode threads. The batch holds ``NAME`` uint8 [B, frames, H, W, 3] (or [B, clips,
frames, H, W, 3]) and ``NAME.pts`` float64 [B, frames]: each frame's time in seconds.
"""

import math

from ._stoker import AudioClipSpec, FieldTransform, VideoClipSpec

__all__ = ["VideoClip", "AudioClip"]


class VideoClip:
    """`clips` clips of `frames` frames from a video field.

    fps: the frames played at t0 + k / fps (variable frame rates sampled by time); None:
    every `stride`-th native frame. size: an int (square) or (height, width). crop:
    "random" (a RandomResizedCrop box from `scale` and `ratio`, a flip with `flip`, and
    random clip starts, all drawn from the loader's seed, epoch and sample, one box per
    clip), "center" (the largest centred box of the output's aspect; clips spread
    evenly) or "none" (the whole frame resized). Frames are turned upright by the file's
    rotation. audio: an AudioClip(sample_rate, mono) without seconds: the file's audio
    track over each clip's span [t0, t0 + frames / fps) (needs fps), resampled, as
    ``NAME.audio`` float32 [B, C, round(frames / fps * sample_rate)] ([B, clips, C, n]),
    zeros where the track has no samples; a video without audio is an error."""

    def __init__(self, frames=16, fps=None, stride=1, clips=1, size=224, crop="random", scale=(0.08, 1.0),
                 ratio=(3.0 / 4.0, 4.0 / 3.0), flip=0.5, audio=None):
        for what, v in (("frames", frames), ("stride", stride), ("clips", clips)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"VideoClip: {what} must be an int >= 1, got {v!r}")
        if fps is not None and not (isinstance(fps, (int, float)) and math.isfinite(fps) and fps > 0):
            raise ValueError(f"VideoClip: fps must be a number > 0 or None, got {fps!r}")
        if isinstance(size, int) and not isinstance(size, bool):
            size = (size, size)
        if not (isinstance(size, (tuple, list)) and len(size) == 2 and all(isinstance(s, int) and s >= 1 for s in size)):
            raise ValueError(f"VideoClip: size must be an int or (height, width), got {size!r}")
        if crop not in ("random", "center", "none"):
            raise ValueError(f"VideoClip: crop must be 'random', 'center' or 'none', got {crop!r}")
        scale = tuple(float(x) for x in scale)
        ratio = tuple(float(x) for x in ratio)
        if not (len(scale) == 2 and 0 < scale[0] <= scale[1] <= 1):
            raise ValueError(f"VideoClip: scale must satisfy 0 < min <= max <= 1, got {scale}")
        if not (len(ratio) == 2 and 0 < ratio[0] <= ratio[1]):
            raise ValueError(f"VideoClip: ratio must satisfy 0 < min <= max, got {ratio}")
        if not 0 <= float(flip) <= 1:
            raise ValueError(f"VideoClip: flip must be in [0, 1], got {flip}")
        self.frames, self.fps, self.stride, self.clips = frames, fps, stride, clips
        self.size, self.crop, self.scale, self.ratio, self.flip = tuple(size), crop, scale, ratio, float(flip)
        if audio is not None:
            if not isinstance(audio, AudioClip) or audio.seconds is not None:
                raise ValueError(f"VideoClip: audio must be an AudioClip(sample_rate, mono) without seconds (the "
                                 f"clip's span sets them), got {audio!r}")
            if fps is None:
                raise ValueError("VideoClip: audio follows a clip's time span: it needs fps")
        self.audio = audio

    def __repr__(self):
        return (f"VideoClip(frames={self.frames}, fps={self.fps}, stride={self.stride}, clips={self.clips}, "
                f"size={self.size}, crop={self.crop!r}, scale={self.scale}, ratio={self.ratio}, flip={self.flip}"
                + (f", audio={self.audio!r})" if self.audio is not None else ")"))

    def _field_transform(self):
        v = VideoClipSpec()
        v.frames, v.stride, v.clips = self.frames, self.stride, self.clips
        v.fps = float(self.fps or 0)
        v.height, v.width = self.size
        v.crop = self.crop
        v.scale_min, v.scale_max = self.scale
        v.ratio_min, v.ratio_max = self.ratio
        v.flip_prob = self.flip
        if self.audio is not None:
            v.audio_rate, v.audio_mono = self.audio.sample_rate, self.audio.mono
        f = FieldTransform()
        f.kind = FieldTransform.Kind.VIDEO_CLIP
        f.video = v
        return f


class AudioClip:
    """An audio field resampled to `sample_rate` Hz, mono (1 channel) or not (2).

    seconds: a window of that length, its start drawn from the loader's seed, epoch and
    sample, zero-padded past the track's end: float32 [B, C, seconds * sample_rate] and
    ``NAME.start`` float64 [B] (seconds). None: whole tracks, as values float32
    [sum n_i, C] and ``NAME.offsets`` [B + 1]."""

    def __init__(self, sample_rate=16000, mono=True, seconds=None):
        if isinstance(sample_rate, bool) or not isinstance(sample_rate, int) or not 1000 <= sample_rate <= 384000:
            raise ValueError(f"AudioClip: sample_rate must be an int in 1000..384000, got {sample_rate!r}")
        if seconds is not None and not (isinstance(seconds, (int, float)) and math.isfinite(seconds) and seconds > 0):
            raise ValueError(f"AudioClip: seconds must be a number > 0 or None, got {seconds!r}")
        self.sample_rate, self.mono, self.seconds = sample_rate, bool(mono), seconds

    def __repr__(self):
        return f"AudioClip(sample_rate={self.sample_rate}, mono={self.mono}, seconds={self.seconds})"

    def _field_transform(self):
        a = AudioClipSpec()
        a.sample_rate, a.mono, a.seconds = self.sample_rate, self.mono, float(self.seconds or 0)
        f = FieldTransform()
        f.kind = FieldTransform.Kind.AUDIO_CLIP
        f.audio = a
        return f
