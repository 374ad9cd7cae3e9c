#include "pipeline/token_counts.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>

#include "stoker/crc32c.h"
#include "stoker/error.h"
#include "util/bytes.h"
#include "util/log.h"
#include "util/parallel_units.h"

namespace stoker::internal {

namespace {

static_assert(std::endian::native == std::endian::little, "kept counts are little-endian uint32, read in place");

constexpr const char* kMagic = "stoker-token-counts 1\n";
constexpr size_t kMaxTokenizerFile = size_t{1} << 30;
constexpr size_t kSpotChecks = 8;

std::string hex32(uint32_t v) {
  char b[9];
  std::snprintf(b, sizeof b, "%08x", v);
  return b;
}

std::string seconds_text(double s) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f s", s);
  return b;
}

uint32_t crc_of(std::string_view s) { return crc32c(s.data(), s.size()); }

// What the counts are of, one fact a line (the file's header, up to its blank line).
std::string identity(const Context& ctx, const TokenCountsOf& of) {
  const Dataset& dataset = *ctx.dataset;
  const std::string manifest = dataset.manifest().serialize();
  const std::string tokenizer = read_small_file(of.tokenizer_path, kMaxTokenizerFile);
  std::string specials;
  for (const auto& [text, id] : of.tokenizer_options.special_tokens)
    specials += std::to_string(text.size()) + ":" + text + "=" + std::to_string(id) + ";";
  std::string h = kMagic;
  h += "tokenizers revision " + std::to_string(kTokenizerRevision) + "\n";
  h += "dataset manifest " + std::to_string(manifest.size()) + " bytes crc32c " + hex32(crc_of(manifest)) + "\n";
  h += "field " + dataset.schema().fields[static_cast<size_t>(of.text_field)].name + "\n";
  h += "tokenizer " + std::filesystem::path(of.tokenizer_path).filename().string() + " " +
       std::to_string(tokenizer.size()) + " bytes crc32c " + hex32(crc_of(tokenizer)) + "\n";
  h += "pattern " + std::to_string(of.tokenizer_options.pattern.size()) + " bytes crc32c " +
       hex32(crc_of(of.tokenizer_options.pattern)) + "\n";
  h += "specials " + std::to_string(of.tokenizer_options.special_tokens.size()) + " crc32c " + hex32(crc_of(specials)) +
       "\n";
  h += "records " + std::to_string(dataset.record_count()) + "\n\n";
  return h;
}

// A file name of the header: FNV-1a, 64 bits.
std::string file_name(std::string_view header) {
  uint64_t x = 14695981039346656037ull;
  for (unsigned char c : header) x = (x ^ c) * 1099511628211ull;
  char b[32];
  std::snprintf(b, sizeof b, "%016llx.counts", static_cast<unsigned long long>(x));
  return b;
}

uint32_t count_of(const Tokenizer& tok, std::span<const uint8_t> text, std::vector<uint32_t>& ids) {
  ids.clear();
  tok.encode(std::string_view(reinterpret_cast<const char*>(text.data()), text.size()), ids);
  return static_cast<uint32_t>(std::min<size_t>(ids.size(), UINT32_MAX));
}

// A line every kEvery of a long count, for whoever watches a big dataset open.
class CountProgress {
 public:
  CountProgress(std::string what, uint64_t total) : what_(std::move(what)), total_(total) {}
  void add(uint64_t n) {
    const uint64_t done = done_ += n;
    const int64_t at = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0_).count();
    int64_t due = due_.load();
    if (at < due || !due_.compare_exchange_strong(due, at + kEvery.count())) return;
    const double frac = static_cast<double>(done) / static_cast<double>(std::max<uint64_t>(1, total_));
    char b[96];
    std::snprintf(b, sizeof b, "%llu of %llu (%.0f %%), about %.0f s left", static_cast<unsigned long long>(done),
                  static_cast<unsigned long long>(total_), 100 * frac, at / 1e9 * (1 - frac) / std::max(frac, 1e-9));
    log_info(what_ + ": counting the documents' tokens for the plan: " + b);
  }

 private:
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::nanoseconds kEvery = std::chrono::seconds(10);
  const std::string what_;
  const uint64_t total_;
  const Clock::time_point t0_ = Clock::now();
  std::atomic<uint64_t> done_{0};
  std::atomic<int64_t> due_{kEvery.count()};
};

// Records [begin, end) into counts[begin, end), on `threads` threads in chunks of
// neighbours (a tokenizer is faster on text in file order).
void count_range(const Context& ctx, const TokenCountsOf& of, uint64_t begin, uint64_t end, unsigned threads,
                 CountProgress& progress, std::vector<uint32_t>& counts) {
  constexpr uint64_t kChunk = 64;
  parallel_units<std::vector<uint32_t>>((end - begin + kChunk - 1) / kChunk, threads,
                                        [&](size_t u, std::vector<uint32_t>& ids) {
    const uint64_t i0 = begin + u * kChunk, i1 = std::min(end, i0 + kChunk);
    for (uint64_t i = i0; i < i1; ++i)
      counts[i] = count_of(*of.tokenizer, ctx.dataset->read(i).fields[static_cast<size_t>(of.text_field)], ids);
    progress.add(i1 - i0);
  });
}

std::vector<uint32_t> count_all(const Context& ctx, const TokenCountsOf& of, unsigned threads) {
  const Dataset& dataset = *ctx.dataset;
  std::vector<uint32_t> counts(dataset.record_count());
  CountProgress progress(ctx.opt ? ctx.opt->path : dataset.dir(), counts.size());
  if (!ctx.cached) count_range(ctx, of, 0, counts.size(), threads, progress, counts);
  else
    for_each_shard_at_hand(ctx, dataset.shard_count(), [&](size_t s, uint64_t first) {
      count_range(ctx, of, first, first + dataset.manifest().shards[s].records, threads, progress, counts);
    });
  return counts;
}

// Why kept counts are not these documents' (a tokenizer that changed without a new
// revision): a few documents of the first shard that has any, tokenised again. "" when
// they agree.
std::string spot_check(const Context& ctx, const TokenCountsOf& of, const std::vector<uint32_t>& counts) {
  const Dataset& dataset = *ctx.dataset;
  size_t shard = 0;
  while (shard < dataset.shard_count() && dataset.manifest().shards[shard].records == 0) ++shard;
  if (shard == dataset.shard_count()) return "";
  std::string why;
  std::vector<uint32_t> ids;
  for_each_shard_at_hand(ctx, shard + 1, [&](size_t s, uint64_t first) {
    const uint64_t n = dataset.manifest().shards[s].records;
    if (n == 0) return;
    for (size_t k = 0; k < std::min<uint64_t>(kSpotChecks, n) && why.empty(); ++k) {
      const uint64_t i = first + k * n / std::min<uint64_t>(kSpotChecks, n);
      const uint32_t c = count_of(*of.tokenizer, dataset.read(i).fields[static_cast<size_t>(of.text_field)], ids);
      if (c != counts[i])
        why = "record " + std::to_string(i) + " has " + std::to_string(c) + " tokens and the file says " +
              std::to_string(counts[i]);
    }
  });
  return why;
}

// The kept counts when `path` holds them for `header` ("why" says what is wrong
// otherwise; empty when there is no file).
std::optional<std::vector<uint32_t>> read_kept(const std::string& path, const std::string& header, uint64_t records,
                                               std::string& why) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) {
    if (errno != ENOENT && errno != ENOTDIR) why = std::string("cannot be opened: ") + std::strerror(errno);
    return std::nullopt;
  }
  struct stat st{};
  if (::fstat(fd.get(), &st) != 0) {
    why = std::string("cannot be read: ") + std::strerror(errno);
    return std::nullopt;
  }
  const uint64_t expected = header.size() + 4 * records + 4;
  if (static_cast<uint64_t>(st.st_size) != expected) {
    why = std::to_string(st.st_size) + " bytes where " + std::to_string(expected) + " were expected";
    return std::nullopt;
  }
  try {
    std::string head(header.size(), '\0');
    pread_full(fd.get(), head.data(), head.size(), 0, path);
    if (head != header) {
      why = "its header does not describe this dataset and tokenizer";
      return std::nullopt;
    }
    std::vector<uint32_t> counts(records);
    pread_full(fd.get(), counts.data(), 4 * records, header.size(), path);
    uint8_t tail[4];
    pread_full(fd.get(), tail, 4, header.size() + 4 * records, path);
    const uint32_t crc = crc32c_extend(crc_of(head), counts.data(), 4 * records);
    if (crc != get_u32(tail)) {
      why = "its CRC does not match (" + hex32(crc) + " computed, " + hex32(get_u32(tail)) + " stored)";
      return std::nullopt;
    }
    return counts;
  } catch (const std::exception& e) {
    why = e.what();
    return std::nullopt;
  }
}

// Written from the counts in place: a copy would double the open's memory on a big
// dataset.
void write_kept(const std::string& path, const std::string& header, const std::vector<uint32_t>& counts) {
  const size_t payload = 4 * counts.size();
  uint8_t tail[4];
  put_u32(tail, crc32c_extend(crc_of(header), counts.data(), payload));
  write_file_atomic(path,
                    {{reinterpret_cast<const uint8_t*>(header.data()), header.size()},
                     {reinterpret_cast<const uint8_t*>(counts.data()), payload},
                     {tail, sizeof tail}},
                    path + ".tmp-" + std::to_string(::getpid()));
}

// An flock(2) held for its life; false when the lock file cannot be made.
class DirLock {
 public:
  explicit DirLock(const std::string& path) : fd_(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644)) {
    if (!fd_) return;
    if (::flock(fd_.get(), LOCK_EX | LOCK_NB) != 0) {
      log_info(path + ": another process is counting this dataset's tokens; waiting for its file");
      while (::flock(fd_.get(), LOCK_EX) != 0)
        if (errno != EINTR) {
          fd_.reset();
          return;
        }
    }
  }
  explicit operator bool() const { return static_cast<bool>(fd_); }

 private:
  UniqueFd fd_;  // closing it releases the lock
};

}  // namespace

std::string token_counts_dir(const std::optional<std::string>& option) {
  if (option) return *option;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/stoker/token-counts";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/stoker/token-counts";
  return "";
}

TokenCounts document_token_counts(const Context& ctx, const TokenCountsOf& of, const std::string& dir) {
  const auto t0 = std::chrono::steady_clock::now();
  const unsigned threads = std::max(1u, ctx.threads);
  TokenCounts out;
  TokenCountsReport& rep = out.report;
  auto finish = [&] {
    rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const std::string what = ctx.opt ? ctx.opt->path : ctx.dataset->dir();
    if (rep.tokenised == 0 && !rep.file.empty())
      log_info(what + ": document token counts read from " + rep.file);
    else
      log_info(what + ": tokenised " + std::to_string(rep.tokenised) + " documents to plan the rows in " +
               seconds_text(rep.seconds) + " on " + std::to_string(threads) + (threads == 1 ? " thread" : " threads") +
               (rep.file.empty() ? std::string(" (counts not kept)") : "; counts kept in " + rep.file));
    return std::move(out);
  };
  auto make = [&] {
    out.counts = count_all(ctx, of, threads);
    rep.tokenised = out.counts.size();
  };
  if (dir.empty()) {
    make();
    return finish();
  }
  const std::string header = identity(ctx, of);
  const std::string path = dir + "/" + file_name(header);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  // Without the lock (a read-only directory, say) kept counts are still read; new ones
  // are made and not kept.
  DirLock lock(path + ".lock");
  const std::string unlocked_why =
      lock ? "" : (ec ? ec.message() : std::string(std::strerror(errno)));
  std::string why;
  if (auto kept = read_kept(path, header, ctx.dataset->record_count(), why)) {
    why = spot_check(ctx, of, *kept);
    if (why.empty()) {
      out.counts = std::move(*kept);
      rep.file = path;
      return finish();
    }
    why = "a spot check disagrees: " + why;
  }
  if (!why.empty()) log_warn(path + ": not used (" + why + "); tokenising the dataset again");
  make();
  if (!lock) {
    log_warn_once("token-counts:" + dir, dir + ": cannot keep document token counts there (" + unlocked_why +
                                             "); every open tokenises the dataset");
    return finish();
  }
  try {
    write_kept(path, header, out.counts);
    rep.file = path;
  } catch (const std::exception& e) {
    log_warn(std::string("document token counts not kept: ") + e.what());
  }
  return finish();
}

}  // namespace stoker::internal
