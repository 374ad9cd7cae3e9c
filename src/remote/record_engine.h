// An IoEngine whose files are the objects of a remote dataset: each read is a ranged GET
// (RemoteStore::read_many), so records are fetched one by one without their shards ever
// landing in the cache. The loader reads through it when a global shuffle touches more
// shards than the cache holds (LoaderOptions::remote_reads): whole-shard caching would
// then fetch about a shard per record read.
//
// add_file() takes an object name of the dataset (a shard's name in the manifest) and
// knows its size from `sizes`. Reads go out in batches on a few worker threads, each
// batch one read_many call (its ranges in flight together, retried as RemoteOptions
// says); a batch that fails is tried again read by read, so that a persistent failure
// fails only the reads it concerns, each with the error naming URL, shard and status.
// Not O_DIRECT: callers read exact ranges (direct() is false).
//
// Threading: as every IoEngine, one caller thread; the workers are the engine's own.
// The time that caller blocks in reap() for completions that have not arrived is added
// to `*wait_ns` (the loader's fetch wait: its readers waiting on the network).
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "stoker/io.h"
#include "stoker/remote.h"

namespace stoker::internal {

std::unique_ptr<IoEngine> make_remote_record_engine(std::shared_ptr<RemoteStore> store,
                                                    std::map<std::string, uint64_t> sizes, unsigned queue_depth,
                                                    std::shared_ptr<std::atomic<uint64_t>> wait_ns);

}  // namespace stoker::internal
