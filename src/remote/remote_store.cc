// RemoteStore (objects of one dataset location) and RemoteShard (records by ranged GET).
#include <algorithm>

#include "format/shard_layout.h"
#include "remote/remote_internal.h"
#include "stoker/crc32c.h"
#include "stoker/error.h"

namespace stoker {

namespace {

class CurlStore final : public RemoteStore {
 public:
  CurlStore(internal::Location loc, RemoteOptions o) : fetcher_(std::move(loc), std::move(o)) {}

  const std::string& display_url() const override { return fetcher_.location().display; }
  std::string object_url(const std::string& name) const override { return fetcher_.location().display + "/" + name; }
  const RemoteOptions& options() const override { return fetcher_.options(); }
  RemoteStats stats() const override { return fetcher_.stats(); }

  std::string get(const std::string& name) override {
    std::string out;
    std::vector<internal::Part> parts(1);
    parts[0] = make_part(name, "");
    parts[0].whole = true;
    parts[0].out = &out;
    fetcher_.run(parts);
    return out;
  }

  void read(const std::string& name, uint64_t offset, std::span<uint8_t> dst, const std::string& what) override {
    std::vector<internal::Part> parts;
    split(name, what, offset, dst.size(), dst.data(), -1, parts);
    fetcher_.run(parts);
  }

  void read_many(std::span<const Range> ranges) override {
    std::vector<internal::Part> parts;
    for (const Range& r : ranges) {
      const size_t first = parts.size();
      split(r.name, r.what, r.offset, r.dst.size(), r.dst.data(), -1, parts);
      if (!r.on_done || parts.size() == first) continue;
      // Done when its last part is.
      auto left = std::make_shared<size_t>(parts.size() - first);
      for (size_t i = first; i < parts.size(); ++i)
        parts[i].on_done = [left, done = r.on_done] {
          if (--*left == 0) done();
        };
    }
    fetcher_.run(parts);
  }

  void download(const std::string& name, uint64_t size, int fd, const std::string& what) override {
    std::vector<internal::Part> parts;
    split(name, what, 0, size, nullptr, fd, parts);
    if (!fetcher_.range_known && parts.size() > 1) {
      // The first part alone until the server has shown whether it honours Range: one
      // that does not answers every part with the object from byte 0 (each part would
      // fetch everything before it), so the rest then comes by one GET.
      std::vector<internal::Part> first(parts.begin(), parts.begin() + 1);
      fetcher_.run(first);
      parts.erase(parts.begin());
    }
    if (fetcher_.range_ignored && !parts.empty()) {
      const uint64_t from = parts.front().offset;
      parts.assign(1, whole_from(name, what, from, size - from, fd));
    }
    fetcher_.run(parts);
  }

  bool serves_ranges(const std::string& name) override {
    if (!fetcher_.range_known) {
      // 16 bytes (every shard's header is longer): some servers mishandle "bytes=0-0".
      uint8_t head[16];
      read(name, 0, std::span<uint8_t>(head, sizeof head), "a probe for Range support");
    }
    return !fetcher_.range_ignored;
  }

  Manifest read_manifest() override {
    return Manifest::parse(get(kManifestName), object_url(kManifestName));
  }

 private:
  internal::Part make_part(const std::string& name, const std::string& what) const {
    internal::Part p;
    p.url = fetcher_.location().base + "/" + name;
    p.shown = object_url(name);
    p.what = what;
    return p;
  }

  // Bytes [offset, offset + length) of `name` into `fd` by one GET without a Range header.
  internal::Part whole_from(const std::string& name, const std::string& what, uint64_t offset, uint64_t length,
                            int fd) const {
    internal::Part p = make_part(name, what);
    p.offset = offset;
    p.length = length;
    p.fd = fd;
    p.no_range = true;
    return p;
  }

  void split(const std::string& name, const std::string& what, uint64_t offset, uint64_t length, uint8_t* mem, int fd,
             std::vector<internal::Part>& parts) const {
    const uint64_t step = options().part_bytes;
    for (uint64_t done = 0; done < length; done += step) {
      internal::Part p = make_part(name, what);
      p.offset = offset + done;
      p.length = std::min(step, length - done);
      p.mem = mem ? mem + done : nullptr;
      p.fd = fd;
      parts.push_back(std::move(p));
    }
  }

  internal::Fetcher fetcher_;
};

}  // namespace

std::shared_ptr<RemoteStore> RemoteStore::open(const std::string& url, RemoteOptions o) {
  if (o.connections < 1 || o.connections > 256)
    throw_error(ErrorCode::kInvalidArgument, "remote connections must be 1..256, got " + std::to_string(o.connections));
  if (o.part_bytes < (64u << 10))
    throw_error(ErrorCode::kInvalidArgument, "remote part size must be at least 64 KiB");
  if (o.timeout < std::chrono::seconds(1))
    throw_error(ErrorCode::kInvalidArgument, "remote timeout must be at least 1 s, got " +
                                                 std::to_string(o.timeout.count()) + " ms");
  if (o.max_attempts < 1 || o.max_attempts > 100)
    throw_error(ErrorCode::kInvalidArgument, "remote max_attempts must be 1..100");
  if (o.backoff_base.count() < 0 || o.backoff_max < o.backoff_base)
    throw_error(ErrorCode::kInvalidArgument, "remote backoff: need 0 <= base <= max");
  return std::make_shared<CurlStore>(internal::parse_location(url, o.aws_profile), std::move(o));
}

// ---- RemoteShard ---------------------------------------------------------------------

std::shared_ptr<const RemoteShard> RemoteShard::open(std::shared_ptr<RemoteStore> store, const ShardEntry& entry,
                                                     ShardReaderOptions options) {
  std::shared_ptr<RemoteShard> r(new RemoteShard());
  r->store_ = std::move(store);
  r->entry_ = entry;
  r->options_ = options;
  // Bytes that fail a checksum are fetched once more (something between us and the
  // store may have served a bad copy), then reported.
  try {
    r->load();
  } catch (const Error& e) {
    if (e.code() != ErrorCode::kDataLoss) throw;
    r->load();
  }
  return r;
}

void RemoteShard::load() {
  RemoteShard* r = this;
  const ShardEntry& entry = entry_;
  const ShardReaderOptions& options = options_;
  const std::string where = r->store_->object_url(entry.name);
  const std::string what = "shard " + entry.name;
  const uint64_t size = entry.file_size;
  if (size < kHeaderBlock + kTrailerSize)
    throw_error(ErrorCode::kDataLoss, where + ": the manifest's size " + std::to_string(size) + " is too small for a shard");
  std::vector<uint8_t> block(kHeaderBlock);
  std::array<uint8_t, kTrailerSize> tb{};
  std::vector<RemoteStore::Range> first = {{entry.name, 0, block, what, {}},
                                           {entry.name, size - kTrailerSize, tb, what, {}}};
  r->store_->read_many(first);
  const uint32_t header_size = internal::peek_header_size(block, where);
  if (header_size > size - kTrailerSize)
    throw_error(ErrorCode::kDataLoss, where + ": header: size " + std::to_string(header_size) + " runs past the end of the file");
  if (header_size > block.size()) {
    block.resize(header_size);
    r->store_->read(entry.name, kHeaderBlock, std::span<uint8_t>(block).subspan(kHeaderBlock), what);
  }
  r->header_ = internal::decode_header(block, where);
  internal::Trailer t = internal::decode_trailer(tb, where);
  if (t.file_size != size)
    throw_error(ErrorCode::kDataLoss, where + ": trailer: file is " + std::to_string(t.file_size) +
                                          " bytes but the manifest says " + std::to_string(size));
  if (t.header_crc != internal::get_u32(&block[header_size - 4]))
    throw_error(ErrorCode::kDataLoss, where + ": trailer: header checksum copy does not match the header");
  if (t.entry_size != internal::entry_size(r->header_.schema) || t.index_offset < header_size ||
      t.index_offset > size - kTrailerSize || t.index_size != size - kTrailerSize - t.index_offset ||
      t.index_size % t.entry_size != 0 || t.record_count != t.index_size / t.entry_size)
    throw_error(ErrorCode::kDataLoss, where + ": trailer: index does not fit the file");
  if (t.index_crc != entry.index_crc)
    throw_error(ErrorCode::kDataLoss, where + ": index checksum differs from the manifest's (shard replaced?)");
  std::vector<uint8_t> index(t.index_size);
  for (int round = 0;; ++round) {
    r->store_->read(entry.name, t.index_offset, index, what);
    if (crc32c(index.data(), index.size()) == t.index_crc) break;
    if (round == 1) throw_error(ErrorCode::kDataLoss, where + ": index: checksum mismatch (fetched twice)");
  }
  r->locations_ = internal::decode_index(index, r->header_.schema, t.record_count, header_size, t.index_offset,
                                         r->header_.align, options.max_record_bytes, where);
  if (r->locations_.size() != entry.records)
    throw_error(ErrorCode::kDataLoss, where + ": shard has " + std::to_string(r->locations_.size()) +
                                          " records, the manifest says " + std::to_string(entry.records));
}

std::vector<Record> RemoteShard::read_records(std::span<const uint64_t> indices) const {
  const std::string where = store_->object_url(entry_.name);
  std::vector<std::vector<uint8_t>> stored(indices.size());
  auto fetch = [&](const std::vector<size_t>& which) {
    std::vector<RemoteStore::Range> ranges;
    for (size_t k : which) {
      const uint64_t i = indices[k];
      if (i >= locations_.size())
        throw_error(ErrorCode::kInvalidArgument, where + ": record " + std::to_string(i) + " does not exist");
      stored[k].resize(locations_[i].stored_size);
      ranges.push_back({entry_.name, locations_[i].offset, stored[k], "shard " + entry_.name + " record " + std::to_string(i), {}});
    }
    store_->read_many(ranges);
  };
  std::vector<size_t> all(indices.size());
  for (size_t k = 0; k < all.size(); ++k) all[k] = k;
  fetch(all);
  // A record whose CRC fails is fetched once more (a proxy or a cache in between may
  // have served a bad copy), then reported.
  std::vector<size_t> bad;
  for (size_t k = 0; k < indices.size(); ++k)
    if (crc32c(stored[k].data(), stored[k].size()) != locations_[indices[k]].crc) bad.push_back(k);
  if (!bad.empty()) fetch(bad);
  std::vector<Record> out;
  out.reserve(indices.size());
  for (size_t k = 0; k < indices.size(); ++k)
    out.push_back(unpack_record(header_.schema, locations_[indices[k]], stored[k],
                                where + ": record " + std::to_string(indices[k]), options_.max_record_bytes));
  return out;
}

Record RemoteShard::read_record(uint64_t i) const {
  const uint64_t one[1] = {i};
  return std::move(read_records(one)[0]);
}

}  // namespace stoker
