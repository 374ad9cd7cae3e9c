// DatasetStore over a local directory: publishing is write-then-rename (or link, which
// refuses an existing name), an upload is a rename into the directory.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <filesystem>

#include "stoker/dataset_store.h"
#include "stoker/error.h"
#include "util/bytes.h"
#include "util/unique_fd.h"

namespace stoker {

namespace {

namespace fs = std::filesystem;

class LocalDirStore final : public DatasetStore {
 public:
  explicit LocalDirStore(std::string dir) : dir_(std::move(dir)) {}

  const std::string& where() const override { return dir_; }
  bool is_remote() const override { return false; }
  const std::string& staging_dir() override { return dir_; }

  std::vector<std::string> list() override {
    std::vector<std::string> names;
    std::error_code ec;
    fs::directory_iterator it(dir_, ec);
    if (ec)
      throw_error(ec == std::errc::no_such_file_or_directory ? ErrorCode::kNotFound : ErrorCode::kIoError,
                  "open " + dir_ + ": " + ec.message());
    for (; it != fs::directory_iterator(); it.increment(ec)) {
      if (ec) throw_error(ErrorCode::kIoError, "list " + dir_ + ": " + ec.message());
      names.push_back(it->path().filename().string());
    }
    std::sort(names.begin(), names.end());
    return names;
  }

  std::optional<std::string> read(const std::string& name) override {
    const std::string path = dir_ + "/" + name;
    if (!fs::exists(path)) return std::nullopt;
    return internal::read_small_file(path, 1ull << 30);
  }

  bool publish(const std::string& name, std::string_view bytes, bool only_if_absent) override {
    const std::string path = dir_ + "/" + name;
    const std::string tmp = temp_name(path);
    if (!only_if_absent) {
      internal::write_file_atomic(path, std::string(bytes), tmp);
      return true;
    }
    {
      internal::UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
      if (!fd) throw errno_error("create " + tmp, errno);
      internal::write_full(fd.get(), bytes.data(), bytes.size(), tmp);
      if (::fsync(fd.get()) != 0) throw errno_error("fsync " + tmp, errno);
    }
    // link() fails when the name exists: of two racing publishers one wins.
    const int rc = ::link(tmp.c_str(), path.c_str());
    const int err = errno;
    ::unlink(tmp.c_str());
    if (rc != 0 && err == EEXIST) return false;
    if (rc != 0) throw errno_error("link " + tmp + " -> " + path, err);
    internal::fsync_parent_dir(path);
    return true;
  }

  bool remove(const std::string& name) override {
    std::error_code ec;
    return fs::remove(dir_ + "/" + name, ec);
  }

  void upload(const std::string& local_path, const std::string& name) override {
    const std::string to = dir_ + "/" + name;
    if (local_path != to && ::rename(local_path.c_str(), to.c_str()) != 0)
      throw errno_error("rename " + local_path + " -> " + to, errno);
  }
  void flush() override {}

  ShardHeader check_shard(const ShardEntry& s) override {
    auto r = ShardReader::open(dir_ + "/" + s.name);
    if (r->record_count() != s.records || r->file_size() != s.file_size || r->index_crc() != s.index_crc)
      throw_error(ErrorCode::kDataLoss, "shard " + s.name + " does not match its manifest (records, size or index crc)");
    return r->header();
  }

 private:
  static std::string temp_name(const std::string& path) {
    static std::atomic<uint64_t> counter{0};
    return path + kPendingMarker + "store-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
  }
  std::string dir_;
};

}  // namespace

std::shared_ptr<DatasetStore> open_local_store(const std::string& dir) { return std::make_shared<LocalDirStore>(dir); }

}  // namespace stoker
