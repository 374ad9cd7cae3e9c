// ShardCache: whole shards in a node-local directory, shared by the processes of a node.
//
// Locks (flock(2), released by the kernel when a process dies):
//   .locks/<shard>.lock  shared: the shard is in use (a Pin or the prefetch window);
//                        exclusive: it is being downloaded or evicted.
//   .space.lock          exclusive around "count the bytes, evict, reserve room".
// A download reserves its room by creating <shard>.part at full size under .space.lock,
// so the sum of the sizes of every file the scan sees never exceeds the limit.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <thread>

#include "format/shard_layout.h"
#include "stoker/crc32c.h"
#include "stoker/error.h"
#include "stoker/remote.h"
#include "stoker/verify.h"
#include "util/bytes.h"
#include "util/unique_fd.h"

namespace stoker {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using internal::UniqueFd;

struct Held {
  UniqueFd lock;  // holds LOCK_SH on the shard's lock file
  std::string path;
};

constexpr const char* kPartSuffix = ".part";

// A directory name for a dataset location: readable tail + CRC of the whole URL.
std::string cache_key(const std::string& display) {
  std::string tail;
  for (char c : display) tail += (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.') ? c : '_';
  if (tail.size() > 48) tail = tail.substr(tail.size() - 48);
  char crc[16];
  std::snprintf(crc, sizeof crc, "%08x", crc32c(display.data(), display.size()));
  return tail + "-" + crc;
}

void flock_or_throw(int fd, int op, const std::string& path) {
  while (::flock(fd, op) != 0) {
    if (errno == EINTR) continue;
    throw errno_error("flock " + path, errno);
  }
}

bool try_flock(int fd, int op) {
  while (::flock(fd, op | LOCK_NB) != 0) {
    if (errno == EINTR) continue;
    return false;
  }
  return true;
}

}  // namespace

struct ShardCache::Impl {
  std::shared_ptr<RemoteStore> store;
  CacheOptions o;
  Manifest manifest;
  std::string dir, lock_dir, space_lock;
  std::map<std::string, size_t> by_name;
  uint64_t max_shard = 0;
  unsigned window_shards = 0;

  std::mutex mu;
  std::condition_variable cv;
  std::vector<size_t> order;
  size_t cursor = 0;
  std::map<size_t, std::shared_ptr<Held>> window;
  std::set<size_t> fetching;
  std::set<size_t> failed;  // prefetch gave up: left to acquire(), which reports why
  std::set<size_t> downloaded;  // fetched (not found in place) by a prefetch thread, not yet acquired
  bool stop = false;
  std::vector<std::thread> workers;

  std::atomic<uint64_t> hits{0}, misses{0}, downloads{0}, refetches{0}, evictions{0}, bytes_cached{0}, wait_ns{0};
  // acquire() calls waiting for room: the prefetch reserves none meanwhile, or it could
  // take each bit of room the waiter frees (by dropping the window) before the waiter
  // looks again, until the waiter gives up.
  std::atomic<int> room_wanted{0};

  std::string shard_path(size_t s) const { return dir + "/" + manifest.shards[s].name; }
  std::string lock_path(const std::string& name) const { return lock_dir + "/" + name + ".lock"; }

  UniqueFd open_lock(const std::string& name) const {
    const std::string p = lock_path(name);
    UniqueFd fd(::open(p.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
    if (!fd) throw errno_error("open lock file " + p, errno);
    return fd;
  }

  // The file under the shard's name is the manifest's shard (size and index CRC from
  // its trailer); anything else there is from an older version of the dataset.
  bool present_ok(size_t s) const {
    const ShardEntry& e = manifest.shards[s];
    UniqueFd fd(::open(shard_path(s).c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) return false;
    struct stat st{};
    if (::fstat(fd.get(), &st) != 0 || static_cast<uint64_t>(st.st_size) != e.file_size) return false;
    std::array<uint8_t, kTrailerSize> t{};
    if (::pread(fd.get(), t.data(), t.size(), static_cast<off_t>(e.file_size - kTrailerSize)) != kTrailerSize)
      return false;
    try {
      internal::Trailer tr = internal::decode_trailer(t, shard_path(s));
      return tr.index_crc == e.index_crc && tr.file_size == e.file_size;
    } catch (const Error&) {
      return false;
    }
  }

  // One scan of the directory: what is stored, what is reserved, stale parts removed.
  struct Entry {
    std::string name;
    uint64_t size;
    fs::file_time_type mtime;
  };
  uint64_t scan(std::vector<Entry>& shards, const std::string& own_part) {
    uint64_t used = 0;
    std::error_code ec;
    // A download renamed into place while the directory is read may be listed under
    // either name, both or (between the listing and the stat) under a name it no longer
    // has: each shard counts once, under the name it has now.
    std::set<std::string> counted;
    for (const auto& de : fs::directory_iterator(dir, ec)) {
      std::string name = de.path().filename().string();
      if (name == kManifestName || name[0] == '.' || !de.is_regular_file(ec)) continue;
      uint64_t size = de.file_size(ec);
      const bool part = name.size() > 5 && name.compare(name.size() - 5, 5, kPartSuffix) == 0;
      if (ec && part) {
        name.resize(name.size() - 5);
        size = fs::file_size(dir + "/" + name, ec);
        if (ec) continue;
        if (!counted.insert(name).second) continue;
        used += size;
        shards.push_back({name, size, fs::last_write_time(dir + "/" + name, ec)});
        continue;
      }
      if (ec) continue;
      if (!part && !counted.insert(name).second) continue;
      if (part) {
        if (name == own_part) continue;
        // A part whose shard lock nobody holds belongs to a process that died.
        const std::string shard = name.substr(0, name.size() - 5);
        UniqueFd lf = open_lock(shard);
        if (try_flock(lf.get(), LOCK_EX)) {
          fs::remove(de.path(), ec);
          continue;
        }
        if (!counted.insert(shard).second) continue;
        used += size;
        continue;
      }
      used += size;
      shards.push_back({name, size, de.last_write_time(ec)});
    }
    bytes_cached = used;
    return used;
  }

  // Creates <shard>.part at full size once the room is there, evicting least recently
  // used shards nobody holds. Returns an invalid fd when `wait` is false and there is no
  // room; throws kResourceExhausted after wait_for_room.
  UniqueFd reserve(size_t s, bool wait) {
    const ShardEntry& e = manifest.shards[s];
    const std::string part = e.name + kPartSuffix;
    if (!wait && room_wanted > 0) return UniqueFd();  // a shard needed now comes first
    const auto deadline = Clock::now() + o.wait_for_room;
    struct Wanting {
      std::atomic<int>& n;
      bool counted = false;
      ~Wanting() {
        if (counted) --n;
      }
    } wanting{room_wanted};
    UniqueFd space(::open(space_lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
    if (!space) throw errno_error("open " + space_lock, errno);
    for (;;) {
      flock_or_throw(space.get(), LOCK_EX, space_lock);
      std::vector<Entry> shards;
      uint64_t used = scan(shards, part);
      if (used + e.file_size > o.limit) {
        std::sort(shards.begin(), shards.end(), [](const Entry& a, const Entry& b) { return a.mtime < b.mtime; });
        for (const Entry& c : shards) {
          if (used + e.file_size <= o.limit) break;
          UniqueFd lf = open_lock(c.name);
          if (!try_flock(lf.get(), LOCK_EX)) continue;  // in use here or in another process
          std::error_code ec;
          if (fs::remove(dir + "/" + c.name, ec)) {
            used -= c.size;
            ++evictions;
          }
        }
      }
      if (used + e.file_size <= o.limit) {
        const std::string p = dir + "/" + part;
        UniqueFd fd(::open(p.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
        if (!fd) throw errno_error("create " + p, errno);
        if (::ftruncate(fd.get(), static_cast<off_t>(e.file_size)) != 0) throw errno_error("size " + p, errno);
        bytes_cached = used + e.file_size;
        ::flock(space.get(), LOCK_UN);
        return fd;
      }
      ::flock(space.get(), LOCK_UN);
      if (!wait) return UniqueFd();
      if (Clock::now() > deadline)
        throw_error(ErrorCode::kResourceExhausted,
                    "cache " + dir + ": no room for shard " + e.name + " (" + std::to_string(e.file_size) +
                        " bytes) within the limit of " + std::to_string(o.limit) + " bytes: " + std::to_string(used) +
                        " bytes are held by shards in use (pinned here or by another process sharing the cache); "
                        "raise cache_limit or release pins");
      // Our own prefetch window is the first thing to give up for a shard needed now.
      if (!wanting.counted) {
        ++room_wanted;
        wanting.counted = true;
      }
      {
        std::lock_guard<std::mutex> lock(mu);
        for (auto it = window.begin(); it != window.end();)
          it = it->first == s ? std::next(it) : window.erase(it);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  // Downloads shard s into its reserved .part, checks every CRC, renames into place.
  // The caller holds the shard's lock exclusively. Returns false when there was no room
  // and `wait` is false.
  bool fetch(size_t s, bool wait) {
    const ShardEntry& e = manifest.shards[s];
    const std::string final_path = shard_path(s), part = final_path + kPartSuffix;
    for (int round = 0;; ++round) {
      UniqueFd fd = reserve(s, wait);
      if (!fd) return false;
      struct Unlink {
        const std::string& p;
        bool armed = true;
        ~Unlink() {
          if (armed) ::unlink(p.c_str());
        }
      } cleanup{part};
      store->download(e.name, e.file_size, fd.get(), "shard " + e.name);
      ++downloads;
      VerifyReport rep = verify_shard(part, &e);
      if (rep.ok()) {
        // Durable before it is visible under the shard's name.
        if (o.fsync && ::fdatasync(fd.get()) != 0) throw errno_error("fdatasync " + part, errno);
        // Under the space lock: a scan listing the directory while the part is renamed
        // could see neither name, count too few bytes, and let a reservation past the limit.
        {
          UniqueFd space(::open(space_lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
          if (!space) throw errno_error("open " + space_lock, errno);
          flock_or_throw(space.get(), LOCK_EX, space_lock);
          if (::rename(part.c_str(), final_path.c_str()) != 0) throw errno_error("rename " + part, errno);
        }
        cleanup.armed = false;
        return true;
      }
      if (round == 0) {
        ++refetches;
        continue;
      }
      std::string what = rep.problems.front().where + ": " + rep.problems.front().reason;
      throw_error(ErrorCode::kDataLoss, store->object_url(e.name) + " (shard " + e.name + "): fetched twice, " +
                                            std::to_string(rep.problems.size()) + " problem(s) both times; first: " + what);
    }
  }

  // Shard s in place and held shared. `hit` says whether it was there already.
  // Returns null (prefetch only, wait == false) when there is no room now.
  std::shared_ptr<Held> obtain(size_t s, bool wait, bool* hit) {
    const ShardEntry& e = manifest.shards[s];
    *hit = true;
    for (int round = 0; round < 16; ++round) {
      UniqueFd fd = open_lock(e.name);
      flock_or_throw(fd.get(), LOCK_SH, lock_path(e.name));
      if (present_ok(s)) {
        ::utimensat(AT_FDCWD, shard_path(s).c_str(), nullptr, 0);  // least recently used = oldest mtime
        auto h = std::make_shared<Held>();
        h->lock = std::move(fd);
        h->path = shard_path(s);
        return h;
      }
      *hit = false;
      ::flock(fd.get(), LOCK_UN);
      // Exclusive: one download per node; the others wait here and then find it.
      flock_or_throw(fd.get(), LOCK_EX, lock_path(e.name));
      if (!present_ok(s)) {
        ::unlink(shard_path(s).c_str());  // a stale version, if any
        if (!fetch(s, wait)) return nullptr;
      }
      ::flock(fd.get(), LOCK_UN);
    }
    throw_error(ErrorCode::kResourceExhausted, "cache " + dir + ": shard " + e.name +
                                                   " was evicted again each time it arrived: the cache is too small "
                                                   "for the processes sharing it");
  }

  void prune_window_locked() {
    std::set<size_t> keep;
    for (size_t p = cursor; p < order.size() && p < cursor + window_shards; ++p) keep.insert(order[p]);
    for (auto it = window.begin(); it != window.end();) it = keep.count(it->first) ? std::next(it) : window.erase(it);
  }

  void worker() {
    std::unique_lock<std::mutex> lock(mu);
    while (!stop) {
      if (room_wanted > 0) {  // an acquire() waits for room: the window takes none now
        cv.wait_for(lock, std::chrono::milliseconds(20));
        continue;
      }
      size_t target = SIZE_MAX;
      for (size_t p = cursor; p < order.size() && p < cursor + window_shards; ++p) {
        const size_t s = order[p];
        if (!window.count(s) && !fetching.count(s) && !failed.count(s)) {
          target = s;
          break;
        }
      }
      if (target == SIZE_MAX) {
        cv.wait_for(lock, std::chrono::milliseconds(200));
        continue;
      }
      fetching.insert(target);
      lock.unlock();
      std::shared_ptr<Held> h;
      bool hit = false, gave_up = false;
      try {
        h = obtain(target, false, &hit);
      } catch (const std::exception&) {
        // acquire() fetches it again on the caller's thread and reports the error there;
        // the workers do not ask again (each try already retried as the options say).
        gave_up = true;
      }
      lock.lock();
      fetching.erase(target);
      if (gave_up) failed.insert(target);
      if (h && !hit) downloaded.insert(target);
      if (h) {
        window[target] = std::move(h);
        prune_window_locked();
      }
      cv.notify_all();
      if (!h) cv.wait_for(lock, std::chrono::milliseconds(100));  // no room (or failed): retry later
    }
  }
};

const std::string& ShardCache::Pin::path() const {
  static const std::string empty;
  return path_ ? *path_ : empty;
}

ShardCache::ShardCache(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

ShardCache::~ShardCache() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stop = true;
  }
  impl_->cv.notify_all();
  for (auto& t : impl_->workers) t.join();
}

std::shared_ptr<ShardCache> ShardCache::open(std::shared_ptr<RemoteStore> store, CacheOptions o,
                                             std::optional<Manifest> manifest) {
  if (o.dir.empty()) throw_error(ErrorCode::kInvalidArgument, "cache_dir is empty");
  if (o.fetch_threads < 1 || o.fetch_threads > 64) throw_error(ErrorCode::kInvalidArgument, "cache fetch_threads must be 1..64");
  auto impl = std::make_unique<Impl>();
  impl->store = std::move(store);
  impl->manifest = manifest ? std::move(*manifest) : impl->store->read_manifest();
  std::string largest;
  for (size_t s = 0; s < impl->manifest.shards.size(); ++s) {
    if (impl->manifest.shards[s].file_size > impl->max_shard) largest = impl->manifest.shards[s].name;
    impl->max_shard = std::max(impl->max_shard, impl->manifest.shards[s].file_size);
    impl->by_name[impl->manifest.shards[s].name] = s;
  }
  if (o.limit < impl->max_shard)
    throw_error(ErrorCode::kInvalidArgument,
                "cache_limit " + std::to_string(o.limit) + " bytes is smaller than the largest shard of " +
                    impl->store->display_url() + " (" + largest + ", " + std::to_string(impl->max_shard) +
                    " bytes): the cache must hold at least one whole shard");
  // The window never takes the room the next acquire() needs.
  const uint64_t spare = impl->max_shard ? (o.limit - impl->max_shard) / impl->max_shard : o.prefetch;
  impl->window_shards = static_cast<unsigned>(std::min<uint64_t>(o.prefetch, spare));
  impl->dir = o.dir + "/" + cache_key(impl->store->display_url());
  impl->lock_dir = impl->dir + "/.locks";
  impl->space_lock = impl->dir + "/.space.lock";
  std::error_code ec;
  fs::create_directories(impl->lock_dir, ec);
  if (ec) throw_error(ErrorCode::kIoError, "create cache directory " + impl->lock_dir + ": " + ec.message());
  // The manifest copy makes the directory a dataset for the local path. Written under
  // the space lock so concurrent openers do not interleave.
  {
    UniqueFd space(::open(impl->space_lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
    if (!space) throw errno_error("open " + impl->space_lock, errno);
    flock_or_throw(space.get(), LOCK_EX, impl->space_lock);
    bool same = false;
    try {
      same = read_manifest(impl->dir).serialize() == impl->manifest.serialize();
    } catch (const Error&) {
    }
    if (!same) write_manifest(impl->dir, impl->manifest);
    std::vector<Impl::Entry> ignored;
    impl->scan(ignored, "");  // removes parts left by killed processes
  }
  impl->o = std::move(o);
  Impl* raw = impl.get();
  std::shared_ptr<ShardCache> c(new ShardCache(std::move(impl)));
  if (raw->window_shards > 0)
    for (unsigned t = 0; t < raw->o.fetch_threads; ++t) raw->workers.emplace_back([raw] { raw->worker(); });
  return c;
}

const Manifest& ShardCache::manifest() const noexcept { return impl_->manifest; }
const std::string& ShardCache::local_dir() const noexcept { return impl_->dir; }
RemoteStore& ShardCache::store() noexcept { return *impl_->store; }

void ShardCache::prefetch(std::vector<size_t> order) {
  for (size_t s : order)
    if (s >= impl_->manifest.shards.size())
      throw_error(ErrorCode::kInvalidArgument, "prefetch: shard " + std::to_string(s) + " does not exist (dataset has " +
                                                   std::to_string(impl_->manifest.shards.size()) + ")");
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->order = std::move(order);
  impl_->cursor = 0;
  impl_->failed.clear();
  impl_->prune_window_locked();
  impl_->cv.notify_all();
}

ShardCache::Pin ShardCache::acquire(size_t s) {
  Impl& I = *impl_;
  if (s >= I.manifest.shards.size())
    throw_error(ErrorCode::kInvalidArgument, "acquire: shard " + std::to_string(s) + " does not exist (dataset has " +
                                                 std::to_string(I.manifest.shards.size()) + ")");
  std::shared_ptr<Held> h;
  bool hit = false;
  const auto t0 = Clock::now();
  bool waited = false;
  {
    std::unique_lock<std::mutex> lock(I.mu);
    // The next visit of s, looked for a little way ahead only: a shard acquired out of
    // the sequence (read again while still held, or a sequence cut short) leaves the
    // cursor where it is instead of costing a scan of the rest of a long sequence.
    const size_t horizon = std::min(I.order.size(), I.cursor + 4 * size_t{I.window_shards} + 64);
    for (size_t p = I.cursor; p < horizon; ++p)
      if (I.order[p] == s) {
        I.cursor = p + 1;
        break;
      }
    // A worker fetching s: wait for it rather than start a second download. When it
    // had to download the shard, the shard was not in place when asked for: a miss.
    waited = I.fetching.count(s) > 0;
    I.cv.wait(lock, [&] { return !I.fetching.count(s); });
    waited = I.downloaded.erase(s) > 0 && waited;
    auto it = I.window.find(s);
    if (it != I.window.end()) {
      h = it->second;
      hit = !waited;
    }
    I.prune_window_locked();
    I.failed.erase(s);
    I.cv.notify_all();
    if (!h) I.fetching.insert(s);
  }
  if (!h) {
    struct Done {
      Impl& I;
      size_t s;
      ~Done() {
        std::lock_guard<std::mutex> lock(I.mu);
        I.fetching.erase(s);
        I.cv.notify_all();
      }
    } done{I, s};
    h = I.obtain(s, true, &hit);
  }
  if (waited) hit = false;
  (hit ? I.hits : I.misses)++;
  if (!hit) {
    const uint64_t ns = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count());
    I.wait_ns += ns;
  }
  Pin pin;
  pin.path_ = &h->path;
  pin.held_ = std::move(h);
  pin.shard_ = s;
  return pin;
}

CacheStats ShardCache::stats() const {
  const Impl& I = *impl_;
  CacheStats st;
  st.hits = I.hits;
  st.misses = I.misses;
  st.downloads = I.downloads;
  st.refetches = I.refetches;
  st.evictions = I.evictions;
  st.bytes_cached = I.bytes_cached;
  st.limit = I.o.limit;
  st.wait_s = static_cast<double>(I.wait_ns.load()) / 1e9;
  st.prefetch_window = I.window_shards;
  st.remote = I.store->stats();
  return st;
}

}  // namespace stoker
