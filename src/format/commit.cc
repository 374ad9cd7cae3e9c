#include "stoker/commit.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <set>

#include "stoker/dataset_store.h"
#include "stoker/error.h"

namespace stoker {

namespace {

// Meta keys that count something in a part's own input: the dataset's value is the sum.
bool is_summed_meta(const std::string& key) {
  return key == "tokens" || key == "rows" || key == "documents" || key == "tokens_dropped";
}

struct DirListing {
  std::map<uint32_t, std::vector<std::pair<PartSpec, std::string>>> manifests;  // by count: (part, file)
  std::map<std::string, size_t> pending_by_prefix;  // "part-IIIII-of-NNNNN" -> pending files
  std::vector<std::string> files;
};

// "MANIFEST.part-IIIII-of-NNNNN" -> the part (count 0 when the name is not one).
PartSpec part_of_manifest_name(const std::string& name) {
  const std::string head = std::string(kManifestName) + ".part-";
  unsigned i = 0, n = 0;
  char tail = 0;
  if (!name.starts_with(head) || name.size() != head.size() + 14 ||
      std::sscanf(name.c_str() + head.size(), "%5u-of-%5u%c", &i, &n, &tail) != 2 || n == 0 || i >= n || n > kMaxParts)
    return {};
  return PartSpec{i, n};
}

DirListing list_dir(DatasetStore& store) {
  DirListing l;
  try {
    l.files = store.list();
  } catch (const Error& e) {
    throw_error(e.code(), std::string("commit: ") + e.what());
  }
  for (const std::string& name : l.files) {
    if (const size_t p = name.find(kPendingMarker); p != std::string::npos) {
      if (name.starts_with("part-") && name.size() > 19) ++l.pending_by_prefix[name.substr(0, 19)];
      else if (PartSpec ps = part_of_manifest_name(name.substr(0, p)); ps.enabled())
        ++l.pending_by_prefix[part_shard_prefix(ps)];
      continue;
    }
    if (PartSpec ps = part_of_manifest_name(name); ps.enabled()) l.manifests[ps.count].emplace_back(ps, name);
  }
  return l;
}

std::string join(const std::vector<std::string>& lines) {
  std::string s;
  for (const std::string& l : lines) s += "\n  " + l;
  return s;
}

Manifest merge(DatasetStore& store, const DirListing& l, bool check_shards) {
  const std::string& dir = store.where();
  if (l.manifests.empty())
    throw_error(ErrorCode::kNotFound, "commit: " + dir + " holds no part manifests (" + kManifestName +
                                          ".part-IIIII-of-NNNNN); pack parts into it with --part I/N first");
  if (l.manifests.size() > 1) {
    std::string counts;
    for (const auto& [n, ms] : l.manifests) counts += " " + std::to_string(ms.size()) + " of " + std::to_string(n) + ";";
    throw_error(ErrorCode::kInvalidArgument, "commit: " + dir + " holds parts of different part counts (" + counts +
                                                 " ) : remove the part manifests of the count not meant");
  }
  const uint32_t n = l.manifests.begin()->first;
  std::vector<std::string> present(n);
  for (const auto& [ps, name] : l.manifests.begin()->second) present[ps.index] = name;

  std::vector<std::string> problems;
  std::vector<Manifest> parts(n);
  bool missing = false;
  for (uint32_t i = 0; i < n; ++i) {
    const PartSpec ps{i, n};
    const std::string prefix = part_shard_prefix(ps);
    auto pend = l.pending_by_prefix.find(prefix);
    const size_t pending = pend == l.pending_by_prefix.end() ? 0 : pend->second;
    std::string why;
    if (present[i].empty()) {
      missing = true;
      why = "part " + ps.to_string() + ": missing (no " + part_manifest_name(ps) + ")";
      if (pending)
        why += "; " + std::to_string(pending) + " pending file" + (pending == 1 ? "" : "s") +
               " of a writer that was killed or is still running";
      problems.push_back(why);
      continue;
    }
    try {
      const std::optional<std::string> text = store.read(present[i]);
      if (!text) throw_error(ErrorCode::kNotFound, dir + "/" + present[i] + ": gone while committing");
      parts[i] = Manifest::parse(*text, dir + "/" + present[i]);
    } catch (const Error& e) {
      missing = true;
      problems.push_back("part " + ps.to_string() + ": incomplete: " + e.what());
      continue;
    }
    auto it = parts[i].meta.find("part");
    if (it == parts[i].meta.end() || it->second != ps.to_string())
      problems.push_back("part " + ps.to_string() + ": its manifest says part '" +
                         (it == parts[i].meta.end() ? std::string() : it->second) + "'");
  }
  if (!problems.empty() && missing)
    throw_error(ErrorCode::kNotFound, "commit: " + dir + ": not every part is complete; nothing was committed:" +
                                          join(problems));

  Manifest m;
  const Manifest& first = parts[0];
  m.version = first.version;
  m.schema = first.schema;
  m.class_names = first.class_names;
  std::map<std::string, uint64_t> sums;
  for (uint32_t i = 0; i < n; ++i) {
    const Manifest& p = parts[i];
    const std::string who = "part " + PartSpec{i, n}.to_string();
    if (p.version != first.version)
      problems.push_back(who + ": format version " + std::to_string(p.version) + ", part 0 has " + std::to_string(first.version));
    if (!(p.schema == first.schema))
      problems.push_back(who + ": schema " + p.schema.to_string() + " differs from part 0's " + first.schema.to_string());
    if (p.class_names != first.class_names) problems.push_back(who + ": class names differ from part 0's");
    std::set<std::string> keys;
    for (const auto& [k, v] : p.meta) keys.insert(k);
    for (const auto& [k, v] : first.meta) keys.insert(k);
    for (const std::string& k : keys) {
      if (k == "part") continue;
      auto a = p.meta.find(k), b = first.meta.find(k);
      if (is_summed_meta(k) && a != p.meta.end()) {
        uint64_t v = 0;
        if (a->second.empty() || a->second.find_first_not_of("0123456789") != std::string::npos || a->second.size() > 19)
          problems.push_back(who + ": meta " + k + " '" + a->second + "' is not a count");
        else
          v = std::stoull(a->second);
        sums[k] += v;
        if (b == first.meta.end()) problems.push_back(who + ": meta " + k + " that part 0 lacks");
        continue;
      }
      if (a == p.meta.end() || b == first.meta.end() || a->second != b->second)
        problems.push_back(who + ": meta " + k + " = '" + (a == p.meta.end() ? "(none)" : a->second) + "', part 0 has '" +
                           (b == first.meta.end() ? "(none)" : b->second) + "' (packed with other options?)");
    }
    for (const ShardEntry& s : p.shards) {
      if (!s.name.starts_with(part_shard_prefix(PartSpec{i, n}) + "-")) {
        problems.push_back(who + ": names shard " + s.name + ", which is not of its naming");
        continue;
      }
      if (check_shards) {
        try {
          const ShardHeader h = store.check_shard(s);
          if (h.version != p.version || !(h.schema == p.schema))
            problems.push_back(who + ": shard " + s.name + " has another version or schema than its part manifest");
        } catch (const Error& e) {
          problems.push_back(who + ": shard " + s.name + ": " + e.what());
        }
      }
      m.shards.push_back(s);
    }
  }
  if (!problems.empty())
    throw_error(ErrorCode::kDataLoss, "commit: " + dir + ": the parts do not make one dataset; nothing was committed:" +
                                          join(problems));
  for (const auto& [k, v] : first.meta)
    if (k != "part") m.meta[k] = is_summed_meta(k) ? std::to_string(sums[k]) : v;
  m.meta["parts"] = std::to_string(n);
  return m;
}

std::vector<std::string> strays(const DirListing& l, const Manifest& committed) {
  std::set<std::string> live;
  for (const ShardEntry& s : committed.shards) live.insert(s.name);
  std::vector<std::string> out;
  for (const std::string& name : l.files)
    if ((name.ends_with(".stk") || name.find(kPendingMarker) != std::string::npos) && !live.count(name))
      out.push_back(name);
  return out;
}

}  // namespace

Manifest merge_parts(DatasetStore& store, bool check_shards) { return merge(store, list_dir(store), check_shards); }

Manifest merge_parts(const std::string& dir, bool check_shards) { return merge_parts(*open_local_store(dir), check_shards); }

CommitReport commit_parts(const std::string& dir, const CommitOptions& options) {
  return commit_parts(*open_local_store(dir), options);
}

CommitReport commit_parts(DatasetStore& store, const CommitOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::string& dir = store.where();
  CommitReport report;
  const DirListing l = list_dir(store);
  Manifest merged;
  if (const std::optional<std::string> text = store.read(kManifestName)) {
    const Manifest current = Manifest::parse(*text, dir + "/" + kManifestName);
    try {
      merged = merge(store, l, false);
    } catch (const Error& e) {
      throw_error(e.code(), dir + " is already committed (" + kManifestName + ", " +
                                std::to_string(current.total_records()) +
                                " records), but its parts no longer merge into it: " + e.what());
    }
    if (merged.serialize() != current.serialize())
      throw_error(ErrorCode::kInvalidArgument, dir + " already holds a committed " + kManifestName +
                                                   " that differs from the merge of its parts; nothing was changed");
    report.outcome = CommitReport::Outcome::kAlreadyCommitted;
  } else {
    merged = merge(store, l, true);
    if (!store.publish(kManifestName, merged.serialize(), true)) report.outcome = CommitReport::Outcome::kCommitLostRace;
  }
  report.parts = static_cast<uint32_t>(std::stoul(merged.meta.at("parts")));
  report.shards = merged.shards.size();
  report.records = merged.total_records();
  report.bytes = merged.total_bytes();
  report.strays = strays(l, merged);
  if (options.clean && report.outcome != CommitReport::Outcome::kCommitLostRace) {
    for (const std::string& name : report.strays) store.remove(name);
    report.strays_removed = true;
  }
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return report;
}

}  // namespace stoker
