// Every document's token count, which the plan of text tokenised in the loader needs
// (LoaderOptions::tokenizer): read from a file kept by an earlier run with the same
// dataset and tokenizer, or counted by tokenising the dataset once and then kept.
//
// A kept file is <dir>/<16 hex digits>.counts. Its header says what the counts are of:
// the dataset (its manifest's bytes and CRC, which cover every shard's index CRC, so
// every record's CRC), the text field, the tokenizer file (name, size, CRC), the pattern
// and special tokens given with it, and the tokenizers' revision
// (stoker::kTokenizerRevision). The name is a hash of the header; the file ends with a
// CRC of all of it. A file is taken only when its header is the expected one, its size
// and CRC are right, and a few documents tokenised again agree with it; otherwise a
// warning names the file and the reason, and the counts are made again and replace it.
//
// Ranks of one node open together: an flock(2) of <name>.lock is held while a process
// reads or makes the file, so one tokenises and the others wait and read its file. The
// file is written to a temporary name and renamed. A directory where the lock cannot be
// made (read-only, say) still has its files read; counts that must be made there are a
// warning, and not kept.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "pipeline/producer.h"
#include "stoker/tokenizer.h"

namespace stoker::internal {

/// What the counts are of, besides the dataset (Context::dataset).
struct TokenCountsOf {
  int text_field = -1;
  const Tokenizer* tokenizer = nullptr;
  std::string tokenizer_path;  ///< the file open_tokenizer read
  TokenizerOptions tokenizer_options;
};

/// How an open's counts came.
struct TokenCountsReport {
  std::string file;        ///< the kept file; "" when none is kept
  uint64_t tokenised = 0;  ///< documents tokenised to make them (0: read from `file`)
  double seconds = 0;      ///< spent making or reading them
};

struct TokenCounts {
  /// Per record, in record order: the tokenizer's ids of the text alone (no BOS, no EOS).
  std::vector<uint32_t> counts;
  TokenCountsReport report;
};

/// The directory LoaderOptions::token_counts_dir names: itself when set ("" keeps no
/// file); unset, $XDG_CACHE_HOME/stoker/token-counts, else ~/.cache/stoker/token-counts,
/// else "" (no home).
std::string token_counts_dir(const std::optional<std::string>& option);

/// The counts of every record of ctx.dataset, as the top says, tokenised on ctx.threads
/// threads when they must be made (a URL dataset's shards brought into its cache one at
/// a time). Throws what reading a record or tokenising throws.
TokenCounts document_token_counts(const Context& ctx, const TokenCountsOf& of, const std::string& dir);

}  // namespace stoker::internal
