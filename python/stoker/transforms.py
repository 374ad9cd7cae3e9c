"""Image transforms, spelled like torchvision's, fused into stoker's JPEG decoder.

stoker does not run a Python function per image: the decoder crops, scales, resizes and
flips while it decodes (include/stoker/image.h). These classes only *describe* the
transform; `Loader(transform=...)` accepts

* ``"train"``: RandomResizedCrop(size) + RandomHorizontalFlip(0.5)
* ``"eval"``:  Resize(round(size / 0.875)) + CenterCrop(size)
* ``None``:    no decode (labels and indices only; isolates storage and IO)
* a list / ``Compose`` of the classes below, in one of the two supported shapes:
  ``[RandomResizedCrop(s, scale, ratio), RandomHorizontalFlip(p)]`` (flip optional) or
  ``[Resize(r), CenterCrop(s)]``
* a ``stoker.ImageTransform`` (every knob, e.g. ``allow_dct_scaling``).

Per-field transforms (``Loader(fields={...})``) take one object each:

* ``RandomResizedCrop(size, scale, ratio, flip=0.5)``: the training crop, with its flip;
* ``CenterCrop(size, resize=None)``: resize the short side to ``resize`` (default
  ``round(size / 0.875)``), then the center ``size`` x ``size``;
* ``Follow(field, interpolation="nearest", channels=1)``: exactly the crop, resize and
  flip drawn for another image field (a segmentation mask and its image).
"""

from ._stoker import FieldTransform, ImageTransform

__all__ = ["RandomResizedCrop", "RandomHorizontalFlip", "Resize", "CenterCrop", "Compose", "Follow",
           "train", "eval", "to_image_transform", "to_field_transform"]


class RandomResizedCrop:
    """RandomResizedCrop(size, scale, ratio) then a horizontal flip with probability
    `flip`. Inside a list or Compose the flip comes from RandomHorizontalFlip instead
    (torchvision's meaning)."""

    def __init__(self, size, scale=(0.08, 1.0), ratio=(3.0 / 4.0, 4.0 / 3.0), flip=0.5):
        self.size = _square(size)
        self.scale = _pair(scale, "scale")
        self.ratio = _pair(ratio, "ratio")
        self.flip = float(flip)
        if not 0 < self.scale[0] <= self.scale[1] <= 1:
            raise ValueError(f"RandomResizedCrop: scale must satisfy 0 < min <= max <= 1, got {self.scale}")
        if not 0 < self.ratio[0] <= self.ratio[1]:
            raise ValueError(f"RandomResizedCrop: ratio must satisfy 0 < min <= max, got {self.ratio}")
        if not 0 <= self.flip <= 1:
            raise ValueError(f"RandomResizedCrop: flip must be in [0, 1], got {self.flip}")

    def __repr__(self):
        return f"RandomResizedCrop({self.size}, scale={self.scale}, ratio={self.ratio}, flip={self.flip})"

    def _field_transform(self):
        f = FieldTransform()
        f.kind = FieldTransform.Kind.RANDOM_RESIZED_CROP
        f.size = self.size
        f.scale_min, f.scale_max = self.scale
        f.ratio_min, f.ratio_max = self.ratio
        f.flip_prob = self.flip
        return f


class Follow:
    """The crop, resize and flip drawn for image field `field`, applied to this one (a
    segmentation mask): ``fields={"jpg": RandomResizedCrop(224), "png": Follow("jpg")}``.
    `interpolation` "nearest" (masks: no new values) or "antialiased"; `channels` 1 (the
    stored gray level or palette index) or 3 (RGB)."""

    def __init__(self, field, interpolation="nearest", channels=1):
        if not isinstance(field, str) or not field:
            raise TypeError(f"Follow: field must be a field name (str), got {field!r}")
        if interpolation not in ("nearest", "antialiased", "bilinear"):
            raise ValueError(f"Follow: interpolation must be 'nearest' or 'antialiased', got {interpolation!r}")
        if channels not in (1, 3):
            raise ValueError(f"Follow: channels must be 1 or 3, got {channels!r}")
        self.field = field
        self.interpolation = interpolation
        self.channels = int(channels)

    def __repr__(self):
        return f"Follow({self.field!r}, interpolation={self.interpolation!r}, channels={self.channels})"

    def _field_transform(self):
        f = FieldTransform()
        f.kind = FieldTransform.Kind.FOLLOW
        f.follow = self.field
        f.interpolation = self.interpolation
        f.channels = self.channels
        return f


class RandomHorizontalFlip:
    """Mirror left-right with probability `p`; only right after a RandomResizedCrop
    (`transform=[RandomResizedCrop(224), RandomHorizontalFlip(0.5)]`), whose own `flip`
    it replaces."""

    def __init__(self, p=0.5):
        self.p = float(p)

    def __repr__(self):
        return f"RandomHorizontalFlip(p={self.p})"


class Resize:
    """Resize the short side to `size` (torchvision semantics: long side truncated)."""

    def __init__(self, size):
        if not isinstance(size, int):
            raise ValueError("stoker.transforms.Resize takes the short side as one int")
        self.size = size

    def __repr__(self):
        return f"Resize({self.size})"


class CenterCrop:
    """The center `size` x `size`. As a field transform, the short side is first resized
    to `resize` (default round(size / 0.875): Resize(256) + CenterCrop(224))."""

    def __init__(self, size, resize=None):
        self.size = _square(size)
        if resize is not None:
            if isinstance(resize, bool) or not isinstance(resize, int):
                raise TypeError(f"CenterCrop: resize must be an int, got {resize!r}")
            if resize < self.size:
                raise ValueError(f"CenterCrop: resize ({resize}) must be >= size ({self.size})")
        self.resize = resize

    def __repr__(self):
        return f"CenterCrop({self.size})" if self.resize is None else f"CenterCrop({self.size}, resize={self.resize})"

    def _field_transform(self):
        f = FieldTransform()
        f.kind = FieldTransform.Kind.CENTER_CROP
        f.size = self.size
        f.resize = self.resize or 0
        return f


class Compose:
    """A torchvision-style list: [RandomResizedCrop, RandomHorizontalFlip?] or
    [Resize, CenterCrop], fused into the decode as one transform."""

    def __init__(self, transforms):
        self.transforms = list(transforms)

    def __repr__(self):
        return "Compose(" + ", ".join(map(repr, self.transforms)) + ")"


def train(size=224, scale=(0.08, 1.0), ratio=(3.0 / 4.0, 4.0 / 3.0), flip_prob=0.5):
    """ImageTransform for training: RandomResizedCrop + RandomHorizontalFlip."""
    t = ImageTransform()
    t.kind = ImageTransform.Kind.TRAIN
    t.size = _square(size)
    t.scale_min, t.scale_max = (float(x) for x in scale)
    t.ratio_min, t.ratio_max = (float(x) for x in ratio)
    t.flip_prob = float(flip_prob)
    return t


def eval(size=224, crop_fraction=0.875):  # noqa: A001  (mirrors "eval" in Loader)
    """ImageTransform for evaluation: Resize(round(size / crop_fraction)) + CenterCrop(size)."""
    t = ImageTransform()
    t.kind = ImageTransform.Kind.EVAL
    t.size = _square(size)
    t.eval_crop_fraction = float(crop_fraction)
    return t


def to_image_transform(spec, size=224):
    """The ImageTransform a Loader's `transform` argument stands for."""
    if isinstance(spec, ImageTransform):
        return spec
    if spec is None:
        t = ImageTransform()
        t.kind = ImageTransform.Kind.NONE
        t.size = size
        return t
    if isinstance(spec, str):
        if spec == "train":
            return train(size)
        if spec == "eval":
            return eval(size)
        raise ValueError(f"transform {spec!r}: expected 'train', 'eval', None or transform objects")
    if isinstance(spec, RandomResizedCrop):
        return train(spec.size, spec.scale, spec.ratio, spec.flip)
    if isinstance(spec, CenterCrop) and spec.resize is not None:
        return eval(spec.size, spec.size / spec.resize)
    if isinstance(spec, Compose):
        spec = spec.transforms
    if not isinstance(spec, (list, tuple)):
        spec = [spec]
    kinds = [type(t) for t in spec]
    if kinds and kinds[0] is RandomResizedCrop and all(k is RandomHorizontalFlip for k in kinds[1:]) \
            and len(kinds) <= 2:
        rrc = spec[0]
        flip = spec[1].p if len(spec) == 2 else 0.0
        return train(rrc.size, rrc.scale, rrc.ratio, flip)
    if kinds == [Resize, CenterCrop]:
        resize, crop = spec
        if resize.size < crop.size:
            raise ValueError(f"{resize!r} is smaller than {crop!r}")
        return eval(crop.size, crop.size / resize.size)
    raise ValueError(
        f"unsupported transform {spec!r}: stoker fuses transforms into the decoder and supports "
        "[RandomResizedCrop, RandomHorizontalFlip?] or [Resize, CenterCrop] (or an ImageTransform)")


def to_field_transform(name, spec):
    """The FieldTransform of one entry of ``Loader(fields={name: spec})``: a transform
    object above, "train" / "eval", or None (the field as stored)."""
    if spec is None:
        f = FieldTransform()
        f.kind = FieldTransform.Kind.AS_STORED
        return f
    if isinstance(spec, str):
        if spec == "train":
            spec = RandomResizedCrop(224)
        elif spec == "eval":
            spec = CenterCrop(224)
        else:
            raise ValueError(f"fields[{name!r}]: expected 'train', 'eval', None or a transform object, got {spec!r}")
    if not hasattr(spec, "_field_transform"):
        raise TypeError(f"fields[{name!r}]: expected RandomResizedCrop, CenterCrop, Follow, VideoClip or None, got {spec!r}")
    return spec._field_transform()


def _pair(v, what):
    try:
        a, b = (float(x) for x in v)
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be a pair of numbers, got {v!r}") from None
    return (a, b)


def _square(size):
    if isinstance(size, bool):
        raise TypeError(f"size must be an int, got {size!r}")
    if isinstance(size, int):
        if size < 1:
            raise ValueError(f"size must be >= 1, got {size}")
        return size
    if isinstance(size, (tuple, list)) and len(size) == 2 and size[0] == size[1]:
        return int(size[0])
    raise ValueError(f"size {size!r}: stoker makes square images; give one int")
