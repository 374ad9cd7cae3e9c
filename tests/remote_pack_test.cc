// Writing datasets straight into an object store: s3rver on loopback (the S3 protocol,
// access key checked), with tests/util/fault_proxy.py in front for 5xx, resets and cut
// uploads. Parts are written and committed there, and the result is read back through
// the remote reader record by record. A test whose server cannot start skips.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <list>
#include <optional>
#include <random>

#include "stoker/commit.h"
#include "stoker/dataset_store.h"
#include "stoker/error.h"
#include "stoker/remote.h"
#include "util/test_servers.h"
#include "util/test_util.h"

namespace stoker {
namespace {

using testing::Child;
using testing::free_port;
using testing::Proxy;
using testing::ScopedEnv;
using testing::TempDir;
using testing::wait_port;

// Record i: "data" = `size(i)` bytes seeded by i, "label" = i.
std::vector<uint8_t> record_bytes(int i, size_t size) {
  std::vector<uint8_t> b(size);
  std::mt19937 rng(static_cast<uint32_t>(i) * 7919u + 1);
  for (uint8_t& x : b) x = static_cast<uint8_t>(rng());
  return b;
}

Schema bytes_schema() {
  Schema s;
  s.fields = {Field{"data", FieldKind::kBytes}, Field{"label", FieldKind::kInt64}};
  return s;
}

// Writes records [first, last) through `w`.
void add_records(DatasetWriter& w, int first, int last, size_t size = 3000) {
  for (int i = first; i < last; ++i) {
    const std::vector<uint8_t> data = record_bytes(i, size + static_cast<size_t>(i % 97));
    const int64_t label = i;
    const std::span<const uint8_t> fields[] = {data, {reinterpret_cast<const uint8_t*>(&label), 8}};
    w.add(fields);
  }
}

class S3Pack : public ::testing::Test {
 protected:
  void SetUp() override {
    port_ = free_port();
    s3_ = Child({"s3rver", "-d", data_.str(), "-a", "127.0.0.1", "-p", std::to_string(port_), "--silent",
                 "--configure-bucket", "stoker-bucket"});
    if (!wait_port(port_, s3_)) GTEST_SKIP() << "s3rver (npm) could not start on 127.0.0.1";
    env_.emplace_back("AWS_ACCESS_KEY_ID", "S3RVER");
    env_.emplace_back("AWS_SECRET_ACCESS_KEY", "S3RVER");
    env_.emplace_back("AWS_REGION", "us-east-1");
    env_.emplace_back("AWS_SESSION_TOKEN", "");
    env_.emplace_back("AWS_ENDPOINT_URL", std::nullopt);  // restored at the end
    endpoint("http://127.0.0.1:" + std::to_string(port_));
  }
  void endpoint(const std::string& url) { ::setenv("AWS_ENDPOINT_URL", url.c_str(), 1); }

  // A writer's options into `url`: shards of `shard_size`, part `part` when given.
  static DatasetWriterOptions into(const std::string& url, uint64_t shard_size, PartSpec part = {}) {
    DatasetWriterOptions o;
    o.shard_size = shard_size;
    o.part = part;
    o.store = open_dataset_store(url, fast());
    return o;
  }

  static RemoteOptions fast() {
    RemoteOptions o;
    o.backoff_base = std::chrono::milliseconds(5);
    o.backoff_max = std::chrono::milliseconds(20);
    o.timeout = std::chrono::milliseconds(3000);
    o.upload_part_bytes = 5ull << 20;
    return o;
  }

  // Every record of the dataset at `url`, read through the remote reader, in order:
  // (data, label).
  std::vector<std::pair<std::vector<uint8_t>, int64_t>> read_all(const std::string& url) {
    auto store = RemoteStore::open(url, fast());
    const Manifest m = store->read_manifest();
    std::vector<std::pair<std::vector<uint8_t>, int64_t>> out;
    for (const ShardEntry& e : m.shards) {
      auto shard = RemoteShard::open(store, e);
      std::vector<uint64_t> all(shard->record_count());
      for (uint64_t i = 0; i < all.size(); ++i) all[i] = i;
      for (const Record& r : shard->read_records(all)) {
        int64_t label = 0;
        std::memcpy(&label, r.fields[1].data(), 8);
        out.emplace_back(std::vector<uint8_t>(r.fields[0].begin(), r.fields[0].end()), label);
      }
    }
    return out;
  }

  void expect_records(const std::string& url, int count, size_t size = 3000) {
    const auto got = read_all(url);
    ASSERT_EQ(got.size(), static_cast<size_t>(count));
    for (int i = 0; i < count; ++i) {
      EXPECT_EQ(got[i].second, i);
      EXPECT_EQ(got[i].first, record_bytes(i, size + static_cast<size_t>(i % 97))) << "record " << i;
    }
  }

  TempDir data_;
  int port_ = 0;
  Child s3_;
  std::list<ScopedEnv> env_;  // a list: ScopedEnv does not move
};

TEST_F(S3Pack, PartsUploadedAndCommittedReadBackAsOneDataset) {
  const std::string url = "s3://stoker-bucket/packs/ds";
  for (uint32_t p = 0; p < 3; ++p) {
    DatasetWriterOptions o = into(url, 64 << 10, PartSpec{p, 3});
    DatasetWriter w("unused", bytes_schema(), o);
    add_records(w, static_cast<int>(p) * 40, static_cast<int>(p + 1) * 40);
    w.finish();
  }
  auto store = open_dataset_store(url, fast());
  EXPECT_FALSE(store->read(kManifestName)) << "no part writes the dataset's MANIFEST";
  const CommitReport r = commit_parts(*store);
  EXPECT_EQ(r.outcome, CommitReport::Outcome::kCommitted);
  EXPECT_EQ(r.parts, 3u);
  EXPECT_EQ(r.records, 120u);
  EXPECT_TRUE(r.strays.empty());
  expect_records(url, 120);
  EXPECT_EQ(commit_parts(*store).outcome, CommitReport::Outcome::kAlreadyCommitted);
}

TEST_F(S3Pack, LargeShardsGoAsMultipartUploads) {
  const std::string url = "s3://stoker-bucket/big";
  DatasetWriterOptions o = into(url, 12ull << 20);  // 5 MiB parts: three of them per full shard
  DatasetWriter w("unused", bytes_schema(), o);
  add_records(w, 0, 200, 60000);  // ~12 MB
  const Manifest m = w.finish();
  ASSERT_GE(m.shards.size(), 1u);
  EXPECT_GT(m.shards[0].file_size, 10ull << 20);
  expect_records(url, 200, 60000);
}

TEST_F(S3Pack, UploadFaultsAreRetriedAndAPersistentOneFailsThePartWithoutAManifest) {
  Proxy proxy;
  ASSERT_TRUE(proxy.start("http://127.0.0.1:" + std::to_string(port_), {"--fail-first", "3", "--kinds", "503,reset,cut"}));
  endpoint("http://127.0.0.1:" + std::to_string(proxy.port));
  const std::string url = "s3://stoker-bucket/faulty";
  {
    DatasetWriterOptions o = into(url, 64 << 10);
    DatasetWriter w("unused", bytes_schema(), o);
    add_records(w, 0, 60);
    w.finish();
  }
  expect_records(url, 60);

  Proxy broken;
  ASSERT_TRUE(broken.start("http://127.0.0.1:" + std::to_string(port_), {"--always", "503"}));
  endpoint("http://127.0.0.1:" + std::to_string(broken.port));
  const std::string url2 = "s3://stoker-bucket/broken";
  DatasetWriterOptions o = into(url2, 64 << 10, PartSpec{0, 2});
  DatasetWriter w("unused", bytes_schema(), o);
  add_records(w, 0, 60);
  std::string msg;
  EXPECT_EQ(testing::error_code_of([&] { w.finish(); }, &msg), ErrorCode::kIoError);
  EXPECT_NE(msg.find("s3://stoker-bucket/broken/part-00000-of-00002-"), std::string::npos) << msg;
  EXPECT_NE(msg.find("HTTP 503"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("S3RVER"), std::string::npos) << "credentials in a message: " << msg;
  endpoint("http://127.0.0.1:" + std::to_string(port_));
  auto store = open_dataset_store(url2, fast());
  for (const std::string& name : store->list()) EXPECT_FALSE(name.starts_with(kManifestName)) << name;
}

TEST_F(S3Pack, AKilledPartIsNamedByCommitUntilItIsRunAgain) {
  const std::string url = "s3://stoker-bucket/killed";
  auto write_part = [&](uint32_t p, bool die) {
    DatasetWriterOptions o = into(url, 32 << 10, PartSpec{p, 2});
    DatasetWriter w("unused", bytes_schema(), o);
    add_records(w, static_cast<int>(p) * 50, static_cast<int>(p + 1) * 50);
    if (die) {
      o.store->flush();  // some shards are in the store, no part manifest yet
      ::_exit(9);
    }
    w.finish();
  };
  write_part(0, false);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) write_part(1, true);
  int status = 0;
  ::waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 9);

  auto store = open_dataset_store(url, fast());
  std::string msg;
  EXPECT_EQ(testing::error_code_of([&] { commit_parts(*store); }, &msg), ErrorCode::kNotFound);
  EXPECT_NE(msg.find("part 1/2: missing"), std::string::npos) << msg;
  EXPECT_FALSE(store->read(kManifestName));

  write_part(1, false);
  const CommitReport r = commit_parts(*store, CommitOptions{.clean = true});
  EXPECT_EQ(r.outcome, CommitReport::Outcome::kCommitted);
  EXPECT_EQ(r.records, 100u);
  expect_records(url, 100);

  // An object of a part count not committed (a run with another N) is a stray: listed,
  // and removed with clean.
  const std::string stray = "part-00002-of-00003-00000.stk";
  store->publish(stray, "not a shard", false);
  const CommitReport again = commit_parts(*store, CommitOptions{.clean = true});
  EXPECT_EQ(again.outcome, CommitReport::Outcome::kAlreadyCommitted);
  EXPECT_EQ(again.strays, std::vector<std::string>{stray});
  EXPECT_FALSE(store->read(stray));
}

TEST_F(S3Pack, AppendAddsAGenerationAndAnHttpOutputIsRefused) {
  const std::string url = "s3://stoker-bucket/grow";
  {
    DatasetWriterOptions o = into(url, 64 << 10);
    DatasetWriter w("unused", bytes_schema(), o);
    add_records(w, 0, 30);
    w.finish();
  }
  DatasetWriterOptions o = into(url, 64 << 10);
  EXPECT_EQ(testing::error_code_of([&] { DatasetWriter("unused", bytes_schema(), o); }), ErrorCode::kInvalidArgument)
      << "a second pack into a committed prefix must be refused";
  o.append = true;
  DatasetWriter w("unused", bytes_schema(), o);
  add_records(w, 30, 50);
  const Manifest m = w.finish();
  EXPECT_EQ(manifest_generation(m), 2u);
  expect_records(url, 50);

  std::string msg;
  EXPECT_EQ(testing::error_code_of([&] { open_dataset_store("http://127.0.0.1:1/ds"); }, &msg),
            ErrorCode::kInvalidArgument);
  EXPECT_NE(msg.find("read-only"), std::string::npos) << msg;
}

}  // namespace
}  // namespace stoker
