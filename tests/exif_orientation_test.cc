// EXIF orientation: the tag is read from what cameras write (either byte order, the tag
// among others), every one of the 8 orientations turns the pixels as PIL's
// exif_transpose would, the turn is lossless where the size allows and trimmed (and
// said so) where it does not, and pack's exif_transpose stores photos upright.
#include "decode/exif_orientation.h"

#include <gtest/gtest.h>
#include <turbojpeg.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "stoker/dataset.h"
#include "stoker/pack.h"
#include "util/test_util.h"

namespace stoker {
namespace {

using internal::jpeg_exif_orientation;
using internal::jpeg_exif_transpose;
using testing::TempDir;

void put16(std::vector<uint8_t>& b, uint32_t v, bool little) {
  if (little) {
    b.push_back(v & 0xFF);
    b.push_back((v >> 8) & 0xFF);
  } else {
    b.push_back((v >> 8) & 0xFF);
    b.push_back(v & 0xFF);
  }
}
void put32(std::vector<uint8_t>& b, uint32_t v, bool little) {
  put16(b, little ? v & 0xFFFF : v >> 16, little);
  put16(b, little ? v >> 16 : v & 0xFFFF, little);
}

// `jpeg` with an EXIF APP1 segment after SOI whose IFD0 holds a Make entry and then
// Orientation = `orientation`, in the byte order asked for.
std::vector<uint8_t> with_orientation(const std::vector<uint8_t>& jpeg, int orientation, bool little = true) {
  std::vector<uint8_t> tiff;
  tiff.push_back(little ? 'I' : 'M');
  tiff.push_back(little ? 'I' : 'M');
  put16(tiff, 42, little);
  put32(tiff, 8, little);  // IFD0 right after the header
  put16(tiff, 2, little);  // two entries
  put16(tiff, 0x010F, little);  // Make, ASCII, 4 bytes held inline
  put16(tiff, 2, little);
  put32(tiff, 4, little);
  for (char c : {'c', 'a', 'm', '\0'}) tiff.push_back(static_cast<uint8_t>(c));
  put16(tiff, 0x0112, little);  // Orientation, SHORT, 1 value
  put16(tiff, 3, little);
  put32(tiff, 1, little);
  put16(tiff, static_cast<uint32_t>(orientation), little);
  put16(tiff, 0, little);
  put32(tiff, 0, little);  // no next IFD
  std::vector<uint8_t> app1 = {0xFF, 0xE1};
  put16(app1, static_cast<uint32_t>(2 + 6 + tiff.size()), false);
  for (char c : {'E', 'x', 'i', 'f', '\0', '\0'}) app1.push_back(static_cast<uint8_t>(c));
  app1.insert(app1.end(), tiff.begin(), tiff.end());
  std::vector<uint8_t> out(jpeg.begin(), jpeg.begin() + 2);
  out.insert(out.end(), app1.begin(), app1.end());
  out.insert(out.end(), jpeg.begin() + 2, jpeg.end());
  return out;
}

struct Rgb {
  int width = 0, height = 0;
  std::vector<uint8_t> px;
  const uint8_t* at(int x, int y) const { return &px[(static_cast<size_t>(y) * width + x) * 3]; }
};

Rgb decode(const std::vector<uint8_t>& jpeg) {
  tjhandle h = tjInitDecompress();
  Rgb r;
  int sub = 0, cs = 0;
  EXPECT_EQ(tjDecompressHeader3(h, jpeg.data(), jpeg.size(), &r.width, &r.height, &sub, &cs), 0);
  r.px.resize(static_cast<size_t>(r.width) * r.height * 3);
  EXPECT_EQ(tjDecompress2(h, jpeg.data(), jpeg.size(), r.px.data(), r.width, 0, r.height, TJPF_RGB, 0), 0)
      << tjGetErrorStr2(h);
  tjDestroy(h);
  return r;
}

// The pixel of `src` that lands at (x, y) once turned upright by `orientation`, as PIL's
// ImageOps.exif_transpose turns it.
const uint8_t* upright_source(const Rgb& src, int orientation, int x, int y) {
  const int W = src.width, H = src.height;
  switch (orientation) {
    case 2: return src.at(W - 1 - x, y);
    case 3: return src.at(W - 1 - x, H - 1 - y);
    case 4: return src.at(x, H - 1 - y);
    case 5: return src.at(y, x);
    case 6: return src.at(y, H - 1 - x);
    case 7: return src.at(W - 1 - y, H - 1 - x);
    case 8: return src.at(W - 1 - y, x);
    default: return src.at(x, y);
  }
}

TEST(ExifOrientation, TheTagIsFoundInEitherByteOrderAmongOtherEntries) {
  const auto jpeg = testing::make_jpeg(64, 48, 1);
  EXPECT_EQ(jpeg_exif_orientation(jpeg), 0);
  for (bool little : {true, false})
    for (int o = 1; o <= 8; ++o) {
      const auto tagged = with_orientation(jpeg, o, little);
      size_t at = 0;
      EXPECT_EQ(jpeg_exif_orientation(tagged, &at), o) << "little " << little;
      EXPECT_EQ(tagged[at + (little ? 0 : 1)], o);
    }
  EXPECT_EQ(jpeg_exif_orientation(with_orientation(jpeg, 9)), 0);  // out of range: unreadable
  EXPECT_EQ(jpeg_exif_orientation(with_orientation(jpeg, 0)), 0);
}

TEST(ExifOrientation, AnyTruncationOrDamageReadsAsNoneAndNeverFaults) {
  const auto tagged = with_orientation(testing::make_jpeg(32, 32, 2), 6);
  const size_t app1_end = 4 + ((size_t{tagged[4]} << 8) | tagged[5]);  // SOI, marker, segment
  for (size_t n = 0; n < app1_end + 16; ++n)
    EXPECT_EQ(jpeg_exif_orientation(std::vector<uint8_t>(tagged.begin(), tagged.begin() + n)), n < app1_end ? 0 : 6)
        << n;
  std::srand(7);
  for (int trial = 0; trial < 2000; ++trial) {
    auto bad = tagged;
    bad[2 + std::rand() % 60] = static_cast<uint8_t>(std::rand());
    const int o = jpeg_exif_orientation(bad);
    EXPECT_TRUE(o >= 0 && o <= 8);
  }
}

// Sizes that are whole MCUs (4:2:0: 16 px) turn exactly: the pixels are the original's,
// moved as exif_transpose moves them (a lossless turn moves DCT blocks; the decoder's
// rounding may differ by a level or two), and the output says orientation 1.
TEST(ExifOrientation, EveryOrientationTurnsThePixelsUprightLosslessly) {
  const auto jpeg = testing::make_jpeg(64, 48, 3, 90);
  const Rgb original = decode(jpeg);
  EXPECT_TRUE(jpeg_exif_transpose(jpeg).jpeg.empty());
  EXPECT_TRUE(jpeg_exif_transpose(with_orientation(jpeg, 1)).jpeg.empty());
  for (int o = 2; o <= 8; ++o) {
    SCOPED_TRACE("orientation " + std::to_string(o));
    const auto t = jpeg_exif_transpose(with_orientation(jpeg, o, o % 2 == 0));
    ASSERT_FALSE(t.jpeg.empty());
    EXPECT_EQ(t.orientation, o);
    EXPECT_FALSE(t.trimmed);
    EXPECT_EQ(jpeg_exif_orientation(t.jpeg), 1);
    const Rgb up = decode(t.jpeg);
    const bool swaps = o >= 5;
    ASSERT_EQ(up.width, swaps ? original.height : original.width);
    ASSERT_EQ(up.height, swaps ? original.width : original.height);
    int worst = 0;
    double sum = 0;
    for (int y = 0; y < up.height; ++y)
      for (int x = 0; x < up.width; ++x)
        for (int c = 0; c < 3; ++c) {
          const int d = std::abs(int{up.at(x, y)[c]} - int{upright_source(original, o, x, y)[c]});
          worst = std::max(worst, d);
          sum += d;
        }
    EXPECT_LE(worst, 8);
    EXPECT_LT(sum / (up.width * up.height * 3.0), 0.5);
  }
}

TEST(ExifOrientation, ASizeThatCannotTurnExactlyIsTrimmedAndSaysSo) {
  const auto jpeg = testing::make_jpeg(70, 50, 4);  // 4:2:0: partial MCUs on both edges
  const auto t = jpeg_exif_transpose(with_orientation(jpeg, 6));
  ASSERT_FALSE(t.jpeg.empty());
  EXPECT_TRUE(t.trimmed);
  const Rgb up = decode(t.jpeg);
  EXPECT_GT(up.width, 50 - 16);
  EXPECT_LE(up.width, 50);
  EXPECT_EQ(up.height, 70);  // rot90 moves only the bottom edge (to the left)
}

// pack imagefolder with exif_transpose stores the portrait photo upright and counts it;
// without it the bytes are the file's.
TEST(ExifOrientation, PackStoresPhotosUprightOnlyWhenAsked) {
  TempDir dir;
  const auto plain = testing::make_jpeg(64, 48, 5);
  const auto rotated = with_orientation(plain, 6);
  std::filesystem::create_directories(dir.str("src/cat"));
  testing::write_file(dir.str("src/cat/a.jpg"), plain);
  testing::write_file(dir.str("src/cat/b.jpg"), rotated);
  ImageFolderPackOptions o;
  o.threads = 1;
  pack_imagefolder(dir.str("src"), dir.str("as_is"), o);
  o.exif_transpose = true;
  const PackSummary s = pack_imagefolder(dir.str("src"), dir.str("upright"), o);
  bool noted = false;
  for (const std::string& n : s.notes) noted |= n.find("exif transpose: 1 JPEG turned upright") != std::string::npos;
  EXPECT_TRUE(noted);
  auto image_of = [&](const std::string& ds, int i) {
    auto d = Dataset::open(dir.str(ds));
    auto rec = d->shard(0)->read_record(static_cast<uint64_t>(i));
    const int f = d->schema().find("image");
    return std::vector<uint8_t>(rec.fields[static_cast<size_t>(f)].begin(), rec.fields[static_cast<size_t>(f)].end());
  };
  EXPECT_EQ(image_of("as_is", 1), rotated);
  EXPECT_EQ(image_of("upright", 0), plain);
  const auto up = image_of("upright", 1);
  EXPECT_EQ(jpeg_exif_orientation(up), 1);
  const Rgb r = decode(up);
  EXPECT_EQ(r.width, 48);
  EXPECT_EQ(r.height, 64);
}

}  // namespace
}  // namespace stoker
