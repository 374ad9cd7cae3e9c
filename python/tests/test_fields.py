"""The README's multi-field example, end to end: Writer -> Loader(fields=...)."""
import io

import numpy as np
import pytest
from PIL import Image

import stoker

COLOURS = [(230, 20, 20), (20, 230, 20), (20, 20, 230), (230, 230, 20)]


def pair(w, h, seed):
    """A blocky RGB image and its palette mask: each 8x8 block's class id and colour."""
    y, x = np.mgrid[0:h, 0:w]
    cls = ((x // 8) * 7 + (y // 8) * 13 + seed) % 4
    rgb = np.array(COLOURS, dtype=np.uint8)[cls]
    img, mask = io.BytesIO(), io.BytesIO()
    Image.fromarray(rgb).save(img, format="PNG")
    m = Image.fromarray(cls.astype(np.uint8), mode="P")
    m.putpalette([c for col in COLOURS for c in col])
    m.save(mask, format="PNG")
    return img.getvalue(), mask.getvalue()


@pytest.fixture(scope="module")
def seg_dataset(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("seg") / "ds")
    with stoker.Writer(path, fields={"jpg": "image", "png": "image", "txt": "text"}) as w:
        for i in range(20):
            img, mask = pair(64 + 8 * (i % 3), 48 + 8 * (i % 2), i)
            w.write({"__key__": f"scene/{i:03d}", "jpg": img, "png": mask, "txt": f"scène {i} ✓"})
    return path


def test_image_mask_and_caption_end_to_end(seg_dataset):
    loader = stoker.Loader(seg_dataset, batch_size=6, seed=1, threads=2, fields={
        "jpg": stoker.RandomResizedCrop(32, scale=(0.1, 1.0), flip=0.5),
        "png": stoker.Follow("jpg"),
    })
    palette = np.array(COLOURS, dtype=np.int32)
    seen = set()
    for b in loader:
        n = len(b["txt"])
        assert b["jpg"].shape == (n, 32, 32, 3) and b["png"].shape == (n, 32, 32, 1)
        assert all(k.startswith("scene/") for k in b["__key__"])
        for j, i in enumerate(b["index"].tolist()):
            assert b["txt"][j] == f"scène {i} ✓" and b["__key__"][j] == f"scene/{i:03d}"
            seen.add(i)
            img = b["jpg"][j].numpy().astype(np.int32)
            dist = np.abs(img[:, :, None, :] - palette[None, None]).sum(-1)
            clear = dist.min(-1) <= 30  # not an edge blend
            assert (dist.argmin(-1)[clear] == b["png"][j].numpy()[:, :, 0][clear]).all()
    assert seen == set(range(20))


def test_bad_specs_raise_value_errors_naming_the_parameter(seg_dataset):
    with pytest.raises(ValueError, match="scale"):
        stoker.RandomResizedCrop(32, scale=(0.0, 1.0))
    with pytest.raises(ValueError, match="size"):
        stoker.RandomResizedCrop(0)
    with pytest.raises(ValueError, match="'caption'"):
        stoker.Loader(seg_dataset, batch_size=2, fields={"caption": stoker.RandomResizedCrop(32)})
    with pytest.raises(ValueError, match="Follow"):
        stoker.Loader(seg_dataset, batch_size=2, fields={"png": stoker.Follow("txt")})


def test_mixture_of_image_datasets_carries_keys_and_text(seg_dataset, tmp_path):
    other = str(tmp_path / "other")
    with stoker.Writer(other, fields={"jpg": "image", "png": "image", "txt": "text"}) as w:
        for i in range(12):
            img, mask = pair(56, 48, 100 + i)
            w.write({"__key__": f"other/{i:03d}", "jpg": img, "png": mask, "txt": f"autre {i}"})
    loader = stoker.Loader([seg_dataset, other], weights=[1, 1], batch_size=5, seed=3, threads=2,
                           samples_per_epoch=40, fields={"jpg": stoker.RandomResizedCrop(32), "png": stoker.Follow("jpg")})
    counts = [0, 0]
    for b in loader:
        n = len(b["__key__"])
        assert b["jpg"].shape == (n, 32, 32, 3) and b["png"].shape == (n, 32, 32, 1) and len(b["txt"]) == n
        for j, (s, i) in enumerate(zip(b["source"].tolist(), b["index"].tolist())):
            want_key, want_txt = (f"scene/{i:03d}", f"scène {i} ✓") if s == 0 else (f"other/{i:03d}", f"autre {i}")
            assert (b["__key__"][j], b["txt"][j]) == (want_key, want_txt)
            counts[s] += 1
    assert sum(counts) == 40 and min(counts) >= 12


def test_mixture_sources_that_disagree_on_a_field_are_named(seg_dataset, tmp_path):
    other = str(tmp_path / "other")
    with stoker.Writer(other, fields={"jpg": "image", "png": "image", "txt": "bytes"}) as w:
        img, mask = pair(56, 48, 1)
        w.write({"__key__": "other/0", "jpg": img, "png": mask, "txt": b"\x00\x01"})
    with pytest.raises(stoker.InvalidArgumentError, match="'txt'") as e:
        stoker.Loader([seg_dataset, other], batch_size=5, fields={"jpg": stoker.RandomResizedCrop(32)})
    assert other in str(e.value) and seg_dataset in str(e.value)


def test_as_tuple_gives_every_field_of_a_multi_field_dataset(seg_dataset):
    loader = stoker.Loader(seg_dataset, batch_size=4, shuffle=False, threads=1, as_tuple=True,
                           fields={"jpg": stoker.CenterCrop(32), "png": stoker.Follow("jpg")})
    t = next(iter(loader))
    assert len(t) == 3  # jpg, png, txt in the schema's order
    assert tuple(t[0].shape) == (4, 32, 32, 3) and tuple(t[1].shape) == (4, 32, 32, 1)
    assert t[2][0] == "scène 0 ✓"


def test_transform_none_gives_the_images_as_stored_bytes(seg_dataset):
    b = next(iter(stoker.Loader(seg_dataset, batch_size=4, shuffle=False, threads=1, transform=None)))
    assert isinstance(b["jpg"], list) and b["jpg"][0] == stoker.read_record(seg_dataset, 0)["jpg"]


def test_mixture_sources_named_apart_mix_through_source_fields(tmp_path):
    paths = []
    for name in ("jpg", "png"):
        path = str(tmp_path / name)
        with stoker.Writer(path, fields={name: "image"}) as w:
            for i in range(6):
                w.write({"__key__": f"{name}/{i}", name: pair(32, 32, i)[0]})
        paths.append(path)
    with pytest.raises(stoker.InvalidArgumentError, match="share no output"):
        stoker.Loader(paths, batch_size=4, transform="eval", size=16, threads=1)
    loader = stoker.Loader(paths, batch_size=4, transform="eval", size=16, threads=1,
                           source_fields=[{"jpg": "image"}, {"png": "image"}])
    b = next(iter(loader))
    assert tuple(b["image"].shape) == (4, 16, 16, 3) and "source" in b
    with pytest.raises(stoker.InvalidArgumentError, match="no output 'txt'"):
        stoker.Loader(paths, batch_size=4, transform="eval", size=16, source_fields=[{"txt": "x"}, {}])
