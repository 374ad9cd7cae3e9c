#include "format/path_hint.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <system_error>

#include "stoker/dataset.h"
#include "stoker/shard.h"
#include "util/bytes.h"

namespace stoker::internal {

namespace fs = std::filesystem;

namespace {

// Directory entries looked at per directory: enough to recognise a layout, bounded so
// a huge directory does not turn an error message into a long scan.
constexpr int kMaxScan = 256;

std::string head_of(const fs::path& p, size_t n) {
  std::string b(n, '\0');
  UniqueFd fd(::open(p.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return {};
  ssize_t got = ::pread(fd.get(), b.data(), n, 0);
  b.resize(got > 0 ? static_cast<size_t>(got) : 0);
  return b;
}

bool ends_with(const std::string& s, const char* suffix) {
  const size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

bool is_tar_name(const std::string& name) {
  for (const char* ext : {".tar", ".tar.gz", ".tgz", ".tar.zst", ".tar.xz", ".tar.bz2"})
    if (ends_with(name, ext)) return true;
  return false;
}

bool looks_like_tar(const fs::path& p) {
  std::string h = head_of(p, 512);
  return h.size() == 512 && h.compare(257, 5, "ustar") == 0;
}

bool is_image_file(const fs::path& p) {
  std::string h = head_of(p, 16);
  return image_format_of({reinterpret_cast<const uint8_t*>(h.data()), h.size()}) != ImageFormat::kUnknown;
}

// True when the directory (or, bounded, a sub-directory of it) holds an image file.
bool dir_has_images(const fs::path& dir, int depth) {
  std::error_code ec;
  int seen = 0;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end && seen < kMaxScan; it.increment(ec), ++seen) {
    if (it->is_regular_file(ec) && is_image_file(it->path())) return true;
    if (depth > 0 && it->is_directory(ec) && dir_has_images(it->path(), depth - 1)) return true;
  }
  return false;
}

std::string describe_file(const std::string& path, uint64_t size) {
  const std::string name = fs::path(path).filename().string();
  const std::string is = path + " is a file (" + std::to_string(size) + " bytes), not a dataset directory";
  if (is_tar_name(name) || looks_like_tar(path))
    return is + "; it looks like a WebDataset tar; pack it with: stoker pack wds " + path + " OUT";
  std::string h = head_of(path, 8);
  if (h == "STKSHARD") return is + "; it is a single stoker shard: open the directory that holds it and its MANIFEST";
  if (h == "MMIDIDX" + std::string(1, '\0'))
    return is + "; it looks like a Megatron-LM index; pack it with: stoker pack tokens " + path + " OUT --seq-len N";
  if (ends_with(name, ".bin"))
    return is + "; it looks like a token file; pack it with: stoker pack tokens " + path +
           " OUT --dtype uint16 --seq-len N";
  if (name == kManifestName) return is + "; it is a dataset's manifest: open the directory that holds it";
  if (is_image_file(path)) return is + "; it is a single image: stoker packs directories of them (stoker pack imagefolder DIR OUT)";
  return is;
}

std::string describe_dir(const std::string& path) {
  std::error_code ec;
  int class_dirs = 0, tars = 0, shards = 0, tmps = 0, files = 0, seen = 0, parts = 0;
  std::string first_tar;
  for (fs::directory_iterator it(path, ec), end; !ec && it != end && seen < kMaxScan; it.increment(ec), ++seen) {
    const std::string name = it->path().filename().string();
    if (it->is_directory(ec)) {
      if (dir_has_images(it->path(), 2)) ++class_dirs;
    } else if (it->is_regular_file(ec)) {
      ++files;
      if (is_tar_name(name)) {
        if (first_tar.empty()) first_tar = name;
        ++tars;
      } else if (ends_with(name, ".stk")) {
        ++shards;
      } else if (ends_with(name, ".tmp")) {
        ++tmps;
      } else if (name.starts_with(std::string(kManifestName) + ".part-") && name.find(kPendingMarker) == std::string::npos) {
        ++parts;
      }
    }
  }
  if (ec) return path + " cannot be listed: " + ec.message();
  // Only the first kMaxScan entries are looked at; say so in the counts.
  const std::string more = seen >= kMaxScan ? "+" : "";
  const std::string no = path + " is not a stoker dataset (no " + kManifestName + ")";
  if (parts > 0)
    return no + " but holds " + std::to_string(parts) + more +
           " part manifest(s) of a dataset packed in parts: run `stoker commit " + path +
           "` once every part is packed";
  if (shards > 0 || tmps > 0)
    return no + " but holds " + std::to_string(shards) + " shard file(s)" +
           (tmps ? " and " + std::to_string(tmps) + " .tmp file(s)" : std::string()) +
           ": packing did not finish; pack it again";
  if (class_dirs > 0)
    return no + "; it looks like an ImageFolder (" + std::to_string(class_dirs) + more +
           " class dirs with images); pack it with: stoker pack imagefolder " + path + " OUT";
  if (tars > 0)
    return no + "; it holds " + std::to_string(tars) + more + " tar file(s) (" + first_tar +
           ", ...), which look like WebDataset shards; pack them with: stoker pack wds " + path + "/*.tar OUT";
  if (files == 0 && seen == 0) return no + "; it is an empty directory";
  return no + "; it is a plain directory (" + std::to_string(seen) + more +
         " entries, none of them images in class directories, tars or shards)";
}

}  // namespace

std::string describe_non_dataset(const std::string& path) {
  std::error_code ec;
  fs::file_status st = fs::status(path, ec);
  if (ec || !fs::exists(st)) {
    if (ec && ec != std::errc::no_such_file_or_directory) return path + " cannot be examined: " + ec.message();
    return path + " does not exist";
  }
  if (fs::is_regular_file(st)) return describe_file(path, fs::file_size(path, ec));
  if (fs::is_directory(st)) return describe_dir(path);
  return path + " is neither a file nor a directory";
}

}  // namespace stoker::internal
