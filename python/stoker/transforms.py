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
"""

from ._stoker import ImageTransform

__all__ = ["RandomResizedCrop", "RandomHorizontalFlip", "Resize", "CenterCrop", "Compose",
           "train", "eval", "to_image_transform"]


class RandomResizedCrop:
    def __init__(self, size, scale=(0.08, 1.0), ratio=(3.0 / 4.0, 4.0 / 3.0)):
        self.size = _square(size)
        self.scale = tuple(float(x) for x in scale)
        self.ratio = tuple(float(x) for x in ratio)

    def __repr__(self):
        return f"RandomResizedCrop({self.size}, scale={self.scale}, ratio={self.ratio})"


class RandomHorizontalFlip:
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
    def __init__(self, size):
        self.size = _square(size)

    def __repr__(self):
        return f"CenterCrop({self.size})"


class Compose:
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


def _square(size):
    if isinstance(size, int):
        return size
    if isinstance(size, (tuple, list)) and len(size) == 2 and size[0] == size[1]:
        return int(size[0])
    raise ValueError(f"size {size!r}: stoker makes square images; give one int")
