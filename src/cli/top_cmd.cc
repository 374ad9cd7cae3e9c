// `stoker top [HOST:]PORT`: a live view of the loaders behind a metrics endpoint
// (LoaderOptions::metrics_port, stoker/metrics.h), redrawn every second: per loader its
// stages' rates with busy and wait as bars, the consumer's wait, the network stage, the
// verdict with its evidence and next step, and the knob values. Rates and fractions are
// over the last interval (the counters' differences); the first frame shows the run's.
// q or Ctrl-C ends it (exit 0); nothing listening is exit 1 with a message; an endpoint
// that closes while watched ends it with a message (exit 0: the loader's process ended).
#include <poll.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "cli.h"
#include "interrupt.h"
#include "metrics_scrape.h"

namespace stoker::cli {
namespace {

struct TopArgs {
  std::string endpoint;
  double interval = 1.0;
  bool once = false;
};

// The terminal in the state a live view needs: keys without Enter and unechoed, the
// cursor hidden, the alternate screen; all put back on destruction.
class LiveTerminal {
 public:
  LiveTerminal() {
    if (!::isatty(STDIN_FILENO) || ::tcgetattr(STDIN_FILENO, &saved_) != 0) return;
    termios raw = saved_;
    raw.c_lflag &= static_cast<tcflag_t>(~(ICANON | ECHO));
    raw.c_cc[VMIN] = 0;
    raw.c_cc[VTIME] = 0;
    keys_ = ::tcsetattr(STDIN_FILENO, TCSANOW, &raw) == 0;
    if (::isatty(STDOUT_FILENO)) {
      screen_ = true;
      std::fputs("\x1b[?1049h\x1b[?25l", stdout);
      std::fflush(stdout);
    }
  }
  ~LiveTerminal() {
    if (screen_) std::fputs("\x1b[?25h\x1b[?1049l", stdout);
    std::fflush(stdout);
    if (keys_) ::tcsetattr(STDIN_FILENO, TCSANOW, &saved_);
  }
  LiveTerminal(const LiveTerminal&) = delete;
  LiveTerminal& operator=(const LiveTerminal&) = delete;
  bool screen() const noexcept { return screen_; }

 private:
  termios saved_{};
  bool keys_ = false, screen_ = false;
};

// One loader's series of a scrape, by name.
struct LoaderView {
  std::map<std::string, double> numbers;
  std::map<std::string, std::string> texts;  // a text gauge's own label: bottleneck -> "decode"
  std::string rank, dataset;
  std::optional<double> get(const std::string& name) const {
    const auto it = numbers.find(name);
    return it == numbers.end() ? std::nullopt : std::optional<double>(it->second);
  }
  double at(const std::string& name) const { return get(name).value_or(0); }
  std::string text(const std::string& name) const {
    const auto it = texts.find(name);
    return it == texts.end() ? "" : it->second;
  }
};

std::map<int, LoaderView> by_loader(const std::vector<MetricSeries>& series) {
  std::map<int, LoaderView> out;
  for (const auto& s : series) {
    const auto l = s.labels.find("loader");
    if (l == s.labels.end()) continue;
    LoaderView& v = out[std::atoi(l->second.c_str())];
    v.numbers[s.name] = s.value;
    const std::string own = s.name.substr(std::min(s.name.size(), sizeof "stoker_" - 1));
    if (const auto t = s.labels.find(own); t != s.labels.end()) v.texts[own] = t->second;
    // A text in a group (tune.last_change) is labelled with its last part only.
    for (const auto& [key, value] : s.labels)
      if (key != "loader" && key != "rank" && key != "dataset" && own.size() > key.size() &&
          own.compare(own.size() - key.size(), key.size(), key) == 0 && own[own.size() - key.size() - 1] == '_')
        v.texts[own] = value;
    if (const auto r = s.labels.find("rank"); r != s.labels.end()) v.rank = r->second;
    if (const auto d = s.labels.find("dataset"); d != s.labels.end()) v.dataset = d->second;
  }
  return out;
}

std::string bar(double frac, int width = 24) {
  frac = std::clamp(frac, 0.0, 1.0);
  const int full = static_cast<int>(frac * width + 0.5);
  char pct[16];
  std::snprintf(pct, sizeof pct, " %3.0f%%", 100 * frac);
  return "[" + std::string(full, '#') + std::string(width - full, '.') + "]" + pct;
}

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

// The figures of one loader over the interval since `before` (dt seconds), or over its
// run when there is no `before`.
std::string render_loader(int id, const LoaderView& now, const LoaderView* before, double dt) {
  const auto delta = [&](const std::string& name) {
    const double d = now.at(name) - (before ? before->at(name) : 0);
    return std::max(0.0, d);
  };
  const double span = before ? dt : now.at("stoker_wall_seconds_total");
  const auto rate = [&](const std::string& name) { return span > 0 ? delta(name) / span : 0.0; };
  const auto stage_frac = [&](const std::string& stage, const std::string& what) {
    const double threads = now.at("stoker_" + stage + "_threads");
    return threads > 0 && span > 0 ? delta("stoker_" + stage + "_" + what + "_seconds_total") / (threads * span) : 0.0;
  };
  std::string o = "loader " + std::to_string(id) + "  rank " + now.rank + "  " + now.dataset +
                  (before ? fmt("   (last %.1f s)", dt) : "   (run so far)") + "\n";
  o += "  feed      " + fmt("%9.0f samples/s", rate("stoker_samples_total")) +
       fmt("  %7.1f batches/s", rate("stoker_batches_total")) +
       "  read " + format_bytes(rate("stoker_read_bytes_total")) + "/s" +
       fmt("  skipped %.0f", now.at("stoker_skipped_total")) + "\n";
  o += "  stage          rate     busy                               wait\n";
  o += "  io        " + fmt("%7.0f rec/s ", rate("stoker_io_items_total")) + bar(stage_frac("io", "busy")) + "   " +
       bar(stage_frac("io", "wait"), 12) + "\n";
  o += "  decode    " + fmt("%7.0f smp/s ", rate("stoker_decode_items_total")) + bar(stage_frac("decode", "busy")) +
       "   " + bar(stage_frac("decode", "wait"), 12) + "\n";
  o += "  consumer  waited for batches  " + bar(span > 0 ? delta("stoker_consumer_wait_seconds_total") / span : 0) + "\n";
  if (now.get("stoker_network_fetched_bytes_total")) {
    o += "  network   fetched " + format_bytes(rate("stoker_network_fetched_bytes_total")) + "/s" +
         fmt(", %.1f requests/s", rate("stoker_network_requests_total"));
    if (const auto hr = now.get("stoker_network_hit_rate")) o += fmt(", cache hit rate %.0f%%", 100 * *hr);
    o += "\n";
  }
  o += "  verdict   " + now.text("bottleneck") + " bound\n";
  if (!now.text("evidence").empty()) o += "            evidence: " + now.text("evidence") + "\n";
  if (!now.text("advice").empty()) o += "            next: " + now.text("advice") + "\n";
  o += "  knobs     " + fmt("decode threads %.0f", now.at("stoker_decode_threads")) +
       fmt(" · io threads %.0f", now.at("stoker_io_threads")) + fmt(" · slots %.0f", now.at("stoker_slots")) +
       " · io engine " + now.text("io_engine") + (now.at("stoker_io_direct") > 0 ? " (O_DIRECT)" : "") + "\n";
  if (now.at("stoker_tune_enabled") > 0) {
    o += "  auto      " + fmt("threads %.0f", now.at("stoker_tune_threads")) + fmt(" of %.0f", now.at("stoker_tune_threads_max")) +
         fmt(" · slots %.0f", now.at("stoker_tune_slots")) + fmt(" of %.0f", now.at("stoker_tune_slots_max")) +
         fmt(" · io queue %.0f", now.at("stoker_tune_queue_depth")) + fmt(" of %.0f", now.at("stoker_tune_queue_depth_max")) +
         (now.at("stoker_tune_settled") > 0 ? " · settled" : " · tuning") +
         fmt(" · %.0f changes\n", now.at("stoker_tune_changes_total"));
    const std::string last = now.text("tune_last_change");
    o += "            last change: " + (last.empty() ? std::string("none yet") : last) + "\n";
  }
  return o;
}

std::string render(const std::string& where, const std::map<int, LoaderView>& now,
                   const std::map<int, LoaderView>* before, double dt) {
  std::string o = "stoker top  " + where + "   q quits\n\n";
  if (now.empty()) o += "no loader on this endpoint yet\n";
  for (const auto& [id, view] : now) {
    const LoaderView* prev = nullptr;
    if (before)
      if (const auto it = before->find(id); it != before->end()) prev = &it->second;
    o += render_loader(id, view, prev, dt) + "\n";
  }
  return o;
}

// Waits up to `ms` for a key; true when it was q (or Q).
bool quit_key(int ms, bool& keys_open) {
  if (!keys_open) {
    pollfd none{};
    ::poll(&none, 0, ms);
    return false;
  }
  pollfd p{STDIN_FILENO, POLLIN, 0};
  if (::poll(&p, 1, ms) <= 0) return false;
  char c = 0;
  const ssize_t n = ::read(STDIN_FILENO, &c, 1);
  if (n == 0) keys_open = false;  // stdin at its end (not a terminal): no keys to read
  return n == 1 && (c == 'q' || c == 'Q');
}

int run_top(const TopArgs& a, const std::atomic<bool>* stop) {
  std::string host = "127.0.0.1", port = a.endpoint;
  if (const size_t colon = a.endpoint.rfind(':'); colon != std::string::npos) {
    host = a.endpoint.substr(0, colon);
    port = a.endpoint.substr(colon + 1);
    if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  }
  if (port.empty() || port.find_first_not_of("0123456789") != std::string::npos)
    throw UsageError("top: '" + a.endpoint + "' is not [HOST:]PORT");
  const std::string where = host + ":" + port;
  const int timeout_ms = std::max(1000, static_cast<int>(a.interval * 1000));
  auto fetch = [&] { return by_loader(parse_exposition(fetch_metrics(host, port, timeout_ms))); };
  std::map<int, LoaderView> now;
  try {
    now = fetch();
  } catch (const ScrapeError& e) {
    std::fprintf(stderr, "stoker top: %s\n", e.what());
    return 1;
  }
  if (a.once) {
    std::fputs(render(where, now, nullptr, 0).c_str(), stdout);
    return 0;
  }
  std::optional<std::string> ended;
  {
    LiveTerminal term;
    bool keys_open = true;
    std::map<int, LoaderView> before;
    auto t_before = std::chrono::steady_clock::now();
    bool have_before = false;
    for (;;) {
      const auto t_now = std::chrono::steady_clock::now();
      const double dt = std::chrono::duration<double>(t_now - t_before).count();
      const std::string frame = render(where, now, have_before ? &before : nullptr, dt);
      std::fputs(term.screen() ? ("\x1b[H\x1b[2J" + frame).c_str() : frame.c_str(), stdout);
      std::fflush(stdout);
      before = std::move(now);
      t_before = t_now;
      have_before = true;
      const auto next = t_now + std::chrono::milliseconds(static_cast<int64_t>(a.interval * 1000));
      bool quit = false;
      while (!quit && !stop->load() && std::chrono::steady_clock::now() < next) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(next - std::chrono::steady_clock::now());
        quit = quit_key(static_cast<int>(std::max<int64_t>(1, left.count())), keys_open);
      }
      if (quit || stop->load()) break;
      try {
        now = fetch();
      } catch (const ScrapeError& e) {
        ended = e.what();
        break;
      }
    }
  }
  if (ended) std::fprintf(stderr, "stoker top: the endpoint went away: %s (the loader's process ended?)\n", ended->c_str());
  return 0;
}

void setup(CLI::App& tool) {
  auto a = std::make_shared<TopArgs>();
  CLI::App* c = tool.add_subcommand(
      "top", "A live view of the loaders behind a metrics endpoint (metrics_port=, STOKER_METRICS_PORT, bench feed "
             "--metrics-port): stage rates, busy and wait, the verdict, the knobs; q or Ctrl-C quits.");
  c->add_option("ENDPOINT", a->endpoint, "[HOST:]PORT (HOST default 127.0.0.1)")->required();
  c->add_option("--interval", a->interval, "seconds between refreshes")->check(positive())->capture_default_str();
  c->add_flag("--once", a->once, "print one view (the run's figures) and exit");
  on_run(c, [a] { return run_interruptible([&](const std::atomic<bool>* stop) { return run_top(*a, stop); }); });
}

}  // namespace

STOKER_COMMAND("top", setup);

}  // namespace stoker::cli
