#include "text/regex_splitter.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "stoker/error.h"

namespace stoker::internal {

namespace {

// Per-thread PCRE2 match state: match data (one pair of offsets is all split() reads)
// and a JIT stack larger than the default 32 KiB, so that long runs of a repeated
// group do not fail the match.
class MatchState {
 public:
  MatchState()
      : data_(pcre2_match_data_create(1, nullptr)),
        context_(pcre2_match_context_create(nullptr)),
        jit_stack_(pcre2_jit_stack_create(32 * 1024, 4 * 1024 * 1024, nullptr)) {
    if (!data_ || !context_) throw_error(ErrorCode::kResourceExhausted, "PCRE2: out of memory for match data");
    if (jit_stack_) pcre2_jit_stack_assign(context_, nullptr, jit_stack_);
  }
  ~MatchState() {
    pcre2_jit_stack_free(jit_stack_);
    pcre2_match_context_free(context_);
    pcre2_match_data_free(data_);
  }
  MatchState(const MatchState&) = delete;
  MatchState& operator=(const MatchState&) = delete;
  pcre2_match_data* data() { return data_; }
  pcre2_match_context* context() { return context_; }

 private:
  pcre2_match_data* data_;
  pcre2_match_context* context_;
  pcre2_jit_stack* jit_stack_;
};

MatchState& thread_match_state() {
  thread_local MatchState state;
  return state;
}

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  if (pcre2_get_error_message(code, buf, sizeof buf) < 0) return "PCRE2 error " + std::to_string(code);
  return reinterpret_cast<const char*>(buf);
}

size_t utf8_char_length(uint8_t lead) {
  if (lead < 0x80) return 1;
  if (lead < 0xE0) return 2;
  if (lead < 0xF0) return 3;
  return 4;
}

}  // namespace

std::string RegexSplitter::white_space_compatible(const std::string& pattern) {
  std::string out;
  out.reserve(pattern.size() + 16);
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char e = pattern[++i];
      if (e == 's')
        out += in_class ? "\\s\\x{85}" : "[\\s\\x{85}]";
      else if (e == 'S' && !in_class)
        out += "[^\\s\\x{85}]";
      else
        (out += '\\') += e;
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal, not the class's end.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];
      continue;
    }
    if (c == ']' && in_class) in_class = false;
    out += c;
  }
  return out;
}

RegexSplitter::RegexSplitter(const std::string& pattern, const std::string& source) : source_(source) {
  const std::string p = white_space_compatible(pattern);
  int err = 0;
  PCRE2_SIZE offset = 0;
  code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(p.data()), p.size(), PCRE2_UTF | PCRE2_UCP, &err, &offset,
                        nullptr);
  if (!code_)
    throw_error(ErrorCode::kInvalidArgument, source + ": split pattern does not compile: " + pcre2_message(err) +
                                                 " at offset " + std::to_string(offset) + " of " + pattern);
  // Without a JIT (some platforms, or W^X policies) the interpreter gives the same matches.
  jit_ = pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE) == 0;
}

RegexSplitter::~RegexSplitter() { pcre2_code_free(code_); }

void RegexSplitter::split(std::string_view text, bool keep_gaps, std::vector<PieceRange>& out) const {
  MatchState& st = thread_match_state();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  const size_t n = text.size();
  const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(st.data());
  size_t pos = 0, gap = 0;
  while (pos < n) {
    // The text was made valid UTF-8 by the caller: PCRE2 need not check it again.
    const int rc = jit_ ? pcre2_jit_match(code_, subject, n, pos, PCRE2_NO_UTF_CHECK, st.data(), st.context())
                        : pcre2_match(code_, subject, n, pos, PCRE2_NO_UTF_CHECK, st.data(), st.context());
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0)
      throw_error(ErrorCode::kResourceExhausted,
                  source_ + ": split pattern failed on the text at byte " + std::to_string(pos) + ": " + pcre2_message(rc));
    const size_t s = ov[0], e = ov[1];
    if (e == s) {  // an empty match: step over one character and search again
      pos = s + utf8_char_length(static_cast<uint8_t>(text[s]));
      continue;
    }
    if (keep_gaps && s > gap) out.emplace_back(static_cast<uint32_t>(gap), static_cast<uint32_t>(s));
    out.emplace_back(static_cast<uint32_t>(s), static_cast<uint32_t>(e));
    pos = gap = e;
  }
  if (keep_gaps && gap < n) out.emplace_back(static_cast<uint32_t>(gap), static_cast<uint32_t>(n));
}

}  // namespace stoker::internal
