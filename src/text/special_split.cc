#include "text/special_split.h"

#include "stoker/error.h"

namespace stoker::internal {

void split_at_specials(std::string_view text, const std::map<std::string, uint32_t>& specials,
                       const SpecialTokens& allowed, const std::string& source,
                       const std::function<void(std::string_view)>& ordinary, std::vector<uint32_t>& out) {
  std::vector<const std::pair<const std::string, uint32_t>*> cand;
  if (allowed.all) {
    for (const auto& s : specials) cand.push_back(&s);
  } else {
    for (const std::string& name : allowed.names) {
      auto it = specials.find(name);
      if (it == specials.end()) throw_error(ErrorCode::kInvalidArgument, source + ": \"" + name + "\" is not a special token");
      cand.push_back(&*it);
    }
  }
  if (cand.empty()) {
    ordinary(text);
    return;
  }
  // The next occurrence of each allowed special, searched again only once passed: the
  // text is scanned once per special, whatever the number of occurrences.
  constexpr size_t npos = std::string_view::npos;
  std::vector<size_t> next(cand.size());
  for (size_t k = 0; k < cand.size(); ++k) next[k] = text.find(cand[k]->first);
  size_t pos = 0;
  for (;;) {
    size_t at = npos, which = 0;
    for (size_t k = 0; k < cand.size(); ++k) {
      if (next[k] != npos && next[k] < pos) next[k] = text.find(cand[k]->first, pos);
      if (next[k] == npos) continue;
      if (next[k] < at || (next[k] == at && cand[k]->first.size() > cand[which]->first.size())) at = next[k], which = k;
    }
    if (at == npos) break;
    ordinary(text.substr(pos, at - pos));
    out.push_back(cand[which]->second);
    pos = at + cand[which]->first.size();
  }
  ordinary(text.substr(pos));
}

}  // namespace stoker::internal
