// Ctrl-C for long-running commands (pack, extract): SIGINT/SIGTERM set a flag that the
// library polls between records (PackOptions::cancel), so the command stops cleanly,
// removes its partial output and says what happened, exiting with 128 + the signal
// number (130 for Ctrl-C). A second signal gets the default action (kills at once).
#pragma once

#include <signal.h>

#include <atomic>
#include <cstdio>
#include <functional>
#include <string>

#include "stoker/error.h"

namespace stoker::cli {

namespace interrupt_detail {
inline std::atomic<bool> requested{false};
inline volatile sig_atomic_t signal_seen = 0;
extern "C" inline void on_signal(int sig) {
  requested.store(true, std::memory_order_relaxed);
  signal_seen = sig;
  ::signal(sig, SIG_DFL);  // the next one is not caught
}
}  // namespace interrupt_detail

/// Runs `fn` with SIGINT and SIGTERM turned into the flag it is given; a kCancelled
/// error it throws becomes "stoker: interrupted (SIGINT): <message>" on stderr and the
/// exit code 128 + signal. Other errors pass through.
inline int run_interruptible(const std::function<int(const std::atomic<bool>*)>& fn) {
  namespace d = interrupt_detail;
  struct sigaction sa{}, old_int{}, old_term{};
  sa.sa_handler = d::on_signal;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, &old_int);
  ::sigaction(SIGTERM, &sa, &old_term);
  struct Restore {
    struct sigaction &i, &t;
    ~Restore() {
      ::sigaction(SIGINT, &i, nullptr);
      ::sigaction(SIGTERM, &t, nullptr);
    }
  } restore{old_int, old_term};
  try {
    return fn(&d::requested);
  } catch (const Error& e) {
    if (e.code() != ErrorCode::kCancelled || !d::requested.load()) throw;
    const int sig = d::signal_seen ? static_cast<int>(d::signal_seen) : SIGINT;
    std::fprintf(stderr, "stoker: interrupted (%s): %s\n", sig == SIGTERM ? "SIGTERM" : "SIGINT", e.what());
    return 128 + sig;
  }
}

}  // namespace stoker::cli
