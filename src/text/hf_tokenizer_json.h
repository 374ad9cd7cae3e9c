// Hugging Face `tokenizer.json` files holding a byte-level BPE model (GPT-2, Llama 3,
// Qwen without normalizer): read into the BPE core (bpe_tokenizer.h).
//
// What is read: model (type BPE: vocab, merges as "a b" strings or [a, b] pairs,
// ignore_merges), pre_tokenizer (ByteLevel with its GPT-2 regex, or a Sequence of a
// Split by regex with behavior Isolated and a ByteLevel without regex), added_tokens
// (recognised in the text where SpecialTokens allows). Anything that would change the
// ids and is not implemented — a normalizer, BPE dropout, byte fallback, subword
// prefixes or suffixes, another pre-tokenizer, an added token with lstrip, rstrip or
// single_word — is kInvalidArgument naming the key, never silently ignored. The
// post-processor (BOS/EOS templates) and the decoder are not applied: encode adds no
// tokens, decode gives the tokens' bytes.
#pragma once

#include <memory>
#include <string>

#include "stoker/tokenizer.h"

namespace stoker::internal {

std::unique_ptr<Tokenizer> open_hf_tokenizer_json(const std::string& path, const TokenizerOptions& options);

}  // namespace stoker::internal
