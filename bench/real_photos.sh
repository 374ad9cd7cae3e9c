#!/usr/bin/env bash
# --fast-crop on real photographs: the size it adds and the train-crop speed-up it buys.
#
# The photos are the wallpaper photographs Debian ships (mate-backgrounds, ukui-wallpapers,
# lomiri-wallpapers, lomiri-wallpapers-16.04, lomiri-wallpapers-20.04: camera JPEGs of
# 1.3 to 16 MP, baseline and progressive, 80 KB to 2 MB), the rendered artwork among them
# left out. Two sets are packed:
#   full:  the 30 files as shipped;
#   small: 8 ImageNet-like views of each (a random region, 500x375 or 375x500, saved by
#          PIL at quality 75..95), 240 images: the size of a typical training image.
# Each set is packed plainly and with --fast-crop; printed: the JPEG bytes before and
# after the rewrite (pack's own note), the shard bytes of both packs, and then
# bench/fast_crop_feed.sh's train and eval samples/s and CPU ratios.
#
# usage: bench/real_photos.sh [WORKDIR] [ROUNDS] [THREADS]
# needs: apt-get (download only; no root needed for that with a writable cache),
#        dpkg-deb, /usr/bin/python3 with PIL (python3-pil).
# env:   STOKER=path/to/stoker (default: build/stoker)
set -euo pipefail
WORK=${1:-out/real_photos}
ROUNDS=${2:-4}
THREADS=${3:-2}
here=$(cd "$(dirname "$0")/.." && pwd)
. "$(dirname "$0")/lib.sh"
export STOKER
mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)

if [[ ! -d "$WORK/set/full/photo" ]]; then
  mkdir -p "$WORK/debs" "$WORK/root"
  (cd "$WORK/debs" && apt-get download mate-backgrounds ukui-wallpapers lomiri-wallpapers lomiri-wallpapers-16.04 \
    lomiri-wallpapers-20.04)
  for d in "$WORK"/debs/*.deb; do dpkg-deb -x "$d" "$WORK/root"; done
  /usr/bin/python3 - "$WORK" <<'PY'
import glob, os, random, shutil, sys
from PIL import Image
work = sys.argv[1]
# The photographs (the rest of these packages is rendered artwork).
keep = ['Aqua', 'Blinds', 'Dune', 'FreshFlower', 'Garden', 'GreenMeadow', 'LadyBird', 'RainDrops', 'Storm',
        'TwoWings', 'Wood', 'YellowFlower', 'Bridge_by_Sander_Klootwijk', 'Dragonfly_by_Bolly',
        'Picture_0B_by_freespace', 'Picture_1A_by_freespace', 'Wine_by_Jakkub_Mede',
        'aitzgorri_by_Aitzol_Berasategi', 'analogpattern_by_Peter_Nerlich', 'free_by_Peter_Nerlich',
        'friends_by_Aitzol_Berasategi', 'greentock_by_Peter_Nerlich', 'life_by_Aitzol_Berasategi',
        'picosdeeuropa_by_Aitzol_Berasategi', 'seeding_by_Clements_Engelhardt', 'sunset_by_Aitzol_Berasategi',
        'Kleiber_by_Lukas_Baubkus', 'Infinite-Sea_by_Aury88', 'Painting-Colors_by__herobrine7gamer',
        'Fossa_by_Jasper_Roks']
found = {os.path.splitext(os.path.basename(f))[0]: f
         for f in glob.glob(work + '/root/usr/share/backgrounds/**/*.jpg', recursive=True)}
full, small = work + '/set/full/photo', work + '/set/small/photo'
os.makedirs(full, exist_ok=True)
os.makedirs(small, exist_ok=True)
r = random.Random(5)
for k in keep:
    if k not in found:
        continue
    shutil.copy(found[k], full + '/' + k + '.jpg')
    im = Image.open(found[k]).convert('RGB')
    W, H = im.size
    for i in range(8):
        s = int(min(W, H) * r.uniform(0.3, 0.7))
        portrait = r.random() < 0.25
        w, h = (int(s * 0.75), s) if portrait else (s, int(s * 0.75))
        x, y = r.randrange(0, W - w + 1), r.randrange(0, H - h + 1)
        view = im.crop((x, y, x + w, y + h)).resize((375, 500) if portrait else (500, 375), Image.LANCZOS)
        view.save('%s/%s_%d.jpg' % (small, k, i), quality=r.choice([75, 85, 90, 95]), subsampling=2)
print('photos:', len(os.listdir(full)), 'full,', len(os.listdir(small)), 'small')
PY
fi

for set in full small; do
  echo "== $set: $(ls "$WORK/set/$set/photo" | wc -l) photos, $(du -sb "$WORK/set/$set/photo" | cut -f1) bytes"
  "$STOKER" pack imagefolder "$WORK/set/$set" "$WORK/$set-plain" --overwrite --threads "$THREADS" | grep -v '^ *[0-9.]* s,'
  "$STOKER" pack imagefolder "$WORK/set/$set" "$WORK/$set-fast" --overwrite --threads "$THREADS" --fast-crop |
    grep -v '^ *[0-9.]* s,'
  plain=$(du -sb "$WORK/$set-plain" | cut -f1)
  fast=$(du -sb "$WORK/$set-fast" | cut -f1)
  awk -v p="$plain" -v f="$fast" -v s="$set" 'BEGIN {printf "%s: dataset bytes plain %d, fast-crop %d (%.3fx)\n", s, p, f, f / p}'
  bash "$here/bench/fast_crop_feed.sh" "$WORK/$set-plain" "$WORK/$set-fast" "$ROUNDS" "$THREADS"
done
