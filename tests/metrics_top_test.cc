// `stoker top` against a live loader (`stoker bench feed --metrics-port`), in a real
// terminal under tmux: the screen shows the stages and the verdict, q ends it with exit
// 0; nothing listening is exit 1 naming the endpoint; an endpoint that closes while
// watched ends it with a message, not a crash. Skips, saying so, without tmux.
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "util/datasets.h"
#include "util/test_util.h"

namespace stoker {
namespace {

using testing::TempDir;

std::string tool() { return testing::test_tool(STOKER_TOOL); }

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

int sh(const std::string& cmd) {
  const int status = std::system(cmd.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// A port nothing listens on now (bound, read, released).
unsigned free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

// Polls `done` every 100 ms for up to `seconds`.
template <class F>
bool within(double seconds, F done) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return done();
}

// A tmux session of its own (its own server socket), killed on destruction.
class Tmux {
 public:
  explicit Tmux(const TempDir& dir) : socket_(dir.str("tmux.sock")) {}
  ~Tmux() { sh(tmux() + " kill-server >/dev/null 2>&1"); }
  std::string tmux() const { return "tmux -S " + socket_; }
  int start(const std::string& cmd) const {
    return sh(tmux() + " new-session -d -s top -x 160 -y 50 '" + cmd + "'");
  }
  std::string screen() const {
    TempDir d;
    sh(tmux() + " capture-pane -p -t top > " + d.str("screen") + " 2>/dev/null");
    return slurp(d.str("screen"));
  }
  void keys(const std::string& k) const { sh(tmux() + " send-keys -t top " + k); }

 private:
  std::string socket_;
};

class TopTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (sh("command -v tmux >/dev/null 2>&1") != 0) GTEST_SKIP() << "tmux is not installed (.ci/install-deps adds it)";
    testing::write_image_dataset(dir_.str("ds"), {.count = 96});
  }
  // bench feed of dir_/`ds` in the background on `port`, for `seconds`; its pid file under dir_.
  void feed(unsigned port, double seconds, const std::string& threads = "1", const std::string& ds = "ds") {
    ASSERT_EQ(sh(tool() + " bench feed " + dir_.str(ds) + " --size 32 --batch 8 --epochs 100000 --threads " + threads +
                 " --limit-records 8 --limit-seconds 0.1 --max-seconds " + std::to_string(seconds) +
                 " --metrics-port " + std::to_string(port) + " >" + dir_.str("feed.out") + " 2>&1 </dev/null & echo $! > " +
                 dir_.str("feed.pid")),
              0);
    ASSERT_TRUE(within(20, [&] { return sh("curl -sf -o /dev/null http://127.0.0.1:" + std::to_string(port) + "/metrics") == 0; }))
        << slurp(dir_.str("feed.out"));
  }
  TempDir dir_;
};

TEST_F(TopTest, ShowsTheStagesOfALiveLoaderAndQuitsOnQ) {
  const unsigned port = free_port();
  feed(port, 60);
  Tmux t(dir_);
  const std::string done = dir_.str("top.rc");
  ASSERT_EQ(t.start(tool() + " top 127.0.0.1:" + std::to_string(port) + "; echo $? > " + done + "; sleep 60"), 0);
  std::string screen;
  EXPECT_TRUE(within(15, [&] {
    screen = t.screen();
    return screen.find("(last ") != std::string::npos;  // a second frame: rates over an interval
  })) << screen;
  EXPECT_NE(screen.find("loader 0"), std::string::npos) << screen;
  EXPECT_NE(screen.find("  io "), std::string::npos) << screen;
  EXPECT_NE(screen.find("  decode "), std::string::npos) << screen;
  EXPECT_NE(screen.find("  consumer "), std::string::npos) << screen;
  EXPECT_NE(screen.find("  verdict "), std::string::npos) << screen;
  EXPECT_NE(screen.find("decode threads 1"), std::string::npos) << screen;
  t.keys("q");
  EXPECT_TRUE(within(5, [&] { return !slurp(done).empty(); })) << t.screen();
  EXPECT_EQ(slurp(done), "0\n");
  sh("kill $(cat " + dir_.str("feed.pid") + ") 2>/dev/null");
}

// Under threads="auto" the view shows the tuner's knobs and its last change with the reason.
TEST_F(TopTest, ShowsTheTunersKnobsAndLastChange) {
  // Epochs of tens of milliseconds: 96 images make epochs of a few, and on a loaded
  // machine each one's start-up (its threads, their first reads) left the tuner no
  // interval to judge within the wait below.
  testing::write_image_dataset(dir_.str("many"), {.count = 1536});
  const unsigned port = free_port();
  feed(port, 30, "auto", "many");
  const std::string url = "http://127.0.0.1:" + std::to_string(port) + "/metrics";
  // A small feed: the tuner's first move comes after about 1.2 s of feed.
  EXPECT_TRUE(within(15, [&] {
    return sh("curl -sf " + url + " | grep -q '^stoker_tune_changes_total{.*} [1-9]'") == 0;
  }));
  const std::string out = dir_.str("top.out");
  ASSERT_EQ(sh(tool() + " top 127.0.0.1:" + std::to_string(port) + " --once > " + out + " 2>&1"), 0) << slurp(out);
  const std::string screen = slurp(out);
  EXPECT_NE(screen.find("  auto      threads "), std::string::npos) << screen;
  EXPECT_NE(screen.find("last change: batch "), std::string::npos) << screen;
  // The knob, its values and the reason: whichever the tuner moved first (threads, or
  // the IO queue depth when reads waited for room).
  EXPECT_TRUE(screen.find("): threads ") != std::string::npos || screen.find("): queue_depth ") != std::string::npos ||
              screen.find("): slots ") != std::string::npos)
      << screen;
  sh("kill $(cat " + dir_.str("feed.pid") + ") 2>/dev/null");
}

TEST_F(TopTest, AnEndpointThatClosesEndsItWithAMessage) {
  const unsigned port = free_port();
  feed(port, 3);
  Tmux t(dir_);
  const std::string done = dir_.str("top.rc"), err = dir_.str("top.err");
  ASSERT_EQ(t.start(tool() + " top " + std::to_string(port) + " 2>" + err + "; echo $? > " + done + "; sleep 60"), 0);
  EXPECT_TRUE(within(20, [&] { return !slurp(done).empty(); })) << t.screen();
  EXPECT_EQ(slurp(done), "0\n");
  EXPECT_NE(slurp(err).find("stoker top: the endpoint went away: "), std::string::npos) << slurp(err);
}

TEST_F(TopTest, NothingListeningIsAnErrorNamingTheEndpoint) {
  const unsigned port = free_port();
  TempDir d;
  EXPECT_EQ(sh(tool() + " top " + std::to_string(port) + " </dev/null >/dev/null 2>" + d.str("err")), 1);
  EXPECT_NE(slurp(d.str("err")).find("nothing listens on 127.0.0.1:" + std::to_string(port)), std::string::npos)
      << slurp(d.str("err"));
}

}  // namespace
}  // namespace stoker
