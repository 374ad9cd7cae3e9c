// Tokenizers from Python: stoker.Tokenizer over include/stoker/tokenizer.h. Encoding
// releases the GIL (a Tokenizer is immutable and thread-safe, so Python threads may
// encode with one tokenizer at once).
#include <pybind11/stl.h>

#include "bindings.h"
#include "stoker/tokenizer.h"

namespace stoker::python {
namespace {

constexpr const char* kTokenizerDoc = R"doc(A tokenizer opened from a file: a tiktoken ranks file
(.tiktoken; cl100k_base, o200k_base, r50k_base and p50k_base files get their own split
pattern and special tokens, any other takes `pattern` and `special_tokens`), a byte-level
BPE tokenizer.json, or a SentencePiece .model. Ids equal the reference libraries'
(tiktoken, Hugging Face tokenizers, SentencePiece). Invalid UTF-8 in bytes is replaced
(U+FFFD per maximal invalid subsequence, as bytes.decode(errors="replace")).)doc";

constexpr const char* kEncodeDoc = R"doc(The ids of `text` (str, or bytes taken as UTF-8).
allowed_special: None (special-token text is ordinary text), "all", or a list of the
special tokens to recognise. Adds no BOS/EOS. The GIL is released while it runs.)doc";

SpecialTokens allowed_of(const py::object& allowed) {
  if (allowed.is_none()) return SpecialTokens::none();
  if (py::isinstance<py::str>(allowed)) {
    if (allowed.cast<std::string>() != "all")
      throw py::value_error("allowed_special: None, \"all\" or a list of special tokens");
    return SpecialTokens::every();
  }
  return SpecialTokens{false, allowed.cast<std::vector<std::string>>()};
}

}  // namespace

void init_text(py::module_& m) {
  py::class_<Tokenizer, std::shared_ptr<Tokenizer>>(m, "Tokenizer", kTokenizerDoc)
      .def(py::init([](const std::string& path, const std::string& pattern,
                       const std::map<std::string, uint32_t>& special_tokens) {
             TokenizerOptions o;
             o.pattern = pattern;
             o.special_tokens = special_tokens;
             return std::shared_ptr<Tokenizer>(open_tokenizer(path, o));
           }),
           py::arg("path"), py::kw_only(), py::arg("pattern") = "",
           py::arg("special_tokens") = std::map<std::string, uint32_t>{})
      .def(
          "encode",
          [](const Tokenizer& t, const py::object& text, const py::object& allowed) {
            const std::string s = text.cast<std::string>();  // str as UTF-8, bytes as they are
            const SpecialTokens a = allowed_of(allowed);
            std::vector<uint32_t> ids;
            {
              py::gil_scoped_release nogil;
              t.encode(s, ids, a);
            }
            return ids;
          },
          py::arg("text"), py::arg("allowed_special") = py::none(), kEncodeDoc)
      .def(
          "decode",
          [](const Tokenizer& t, const std::vector<uint32_t>& ids) { return py::bytes(t.decode(ids)); },
          py::arg("ids"), "The bytes `ids` stand for (special tokens as their text).")
      .def("special_token", &Tokenizer::special_token, py::arg("text"),
           "The id of the special token written `text`, or None.")
      .def("token_id", &Tokenizer::token_id, py::arg("text"),
           "The id of `text` as one token (special or ordinary), or None.")
      .def_property_readonly("vocab_size", &Tokenizer::vocab_size, "One more than the largest id.")
      .def_property_readonly(
          "format", [](const Tokenizer& t) { return std::string(t.format()); },
          "\"tiktoken\", \"tokenizer.json\" or \"sentencepiece\".");
}

}  // namespace stoker::python
