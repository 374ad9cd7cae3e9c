// SentencePiece `.model` files (Llama 2, T5, Gemma), read and run by Debian's
// libsentencepiece behind the Tokenizer interface: its ids are SentencePiece's own.
// Special tokens are the model's control pieces ("<s>", "</s>", ...; user-defined pieces
// SentencePiece itself always recognises):
// where SpecialTokens allows them they are cut out of the text first and the runs
// between them encoded on their own. decode() is SentencePiece's (control pieces decode
// to nothing, as there). encode() and decode() are const on the processor, which
// SentencePiece keeps immutable after loading: thread-safe.
#pragma once

#include <memory>
#include <string>

#include "stoker/tokenizer.h"

namespace stoker::internal {

std::unique_ptr<Tokenizer> open_sentencepiece(const std::string& path, const TokenizerOptions& options);

}  // namespace stoker::internal
