// The web dashboard in a real browser: headless Chromium loads the page the admin API serves,
// runs its script against the live job, and what it drew is read back from the DOM; a worker
// killed for real shows up as a failure; a screenshot is kept as an artifact of the run.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "baton/baton.hpp"
#include "host/admin.test.hpp"

namespace baton {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class Trainer : public Actor {
 public:
  int ping(int x) { return x; }
  [[gnu::noinline]] int train_step(int ms) {
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    return ms;
  }
  static constexpr auto endpoints = baton::endpoints<&Trainer::ping, &Trainer::train_step>();
};

class Evaluator : public Actor {
 public:
  int ping(int x) { return x; }
  static constexpr auto endpoints = baton::endpoints<&Evaluator::ping>();
};

/// Headless Chromium on `url`, after the page's script ran for `ms` of the page's own time;
/// `what` is --dump-dom or --screenshot=FILE.
std::string chromium(const std::string& url, const std::string& what, int ms = 3000) {
  const std::string profile = ::testing::TempDir() + "chromium-" + std::to_string(::getpid());
  std::string out = shell(
      "chromium --headless --no-sandbox --disable-gpu --hide-scrollbars "
      "--window-size=1400,1000 --user-data-dir=" +
      profile + " --virtual-time-budget=" + std::to_string(ms) + " " + what + " '" + url +
      "' 2>/dev/null");
  std::filesystem::remove_all(profile);  // its profile, made for this run alone
  return out;
}

TEST(Dashboard, ShowsTheMeshesAndTheirMembersThenAWorkerKilledForRealAsAFailure) {
  ASSERT_FALSE(shell("command -v chromium").empty()) << "chromium is not installed (make deps)";
  const auto job = this_job();
  HeardFailures heard;
  auto trainers_procs = this_host().spawn_procs({{"gpus", 3}});
  auto trainers = trainers_procs.spawn<Trainer>("trainer");
  auto eval_procs = this_host().spawn_procs({{"gpus", 1}});
  auto evaluators = eval_procs.spawn<Evaluator>("evaluator");
  ASSERT_EQ(trainers.call(&Trainer::ping, 1).get().values(), (std::vector<int>{1, 1, 1}));
  (void)evaluators.call(&Evaluator::ping, 1).get();
  auto busy = trainers.at(0).call(&Trainer::train_step, 15000);
  const std::string url = job.admin_url + "/#token=" + token_of(job);

  // The page itself holds nothing of the job, and needs no token; the API it reads does.
  EXPECT_EQ(get(job, "/", "").status, 200);
  EXPECT_EQ(get(job, "/api/procs", "").status, 401);

  const std::string dom = chromium(url, "--dump-dom");
  ASSERT_THAT(dom, HasSubstr("id=\"topology\"")) << dom;
  for (std::size_t r = 0; r < 3; ++r) {
    EXPECT_THAT(dom, HasSubstr(trainers.at(r).id().proc.name)) << dom;
  }
  EXPECT_THAT(dom, HasSubstr(evaluators.at(0).id().proc.name));
  EXPECT_THAT(dom, HasSubstr(">trainer[0]</span>"));
  EXPECT_THAT(dom, HasSubstr(">evaluator[0]</span>"));
  EXPECT_THAT(dom, HasSubstr("chip busy")) << "the member inside train_step";
  EXPECT_THAT(dom, HasSubstr("Trainer::train_step</td>")) << "among the longest endpoints";
  EXPECT_THAT(dom, Not(HasSubstr("/agent[0]")));

  // A worker killed for real: the page shows its proc failed, and the failure with its cause.
  const std::string victim = trainers.at(2).id().proc.name;
  const Reply killed = request(job, "POST", "/api/kill?proc=" + victim,
                               "Authorization: Bearer " + token_of(job) + "\r\n");
  ASSERT_EQ(killed.status, 200) << killed.body;
  ASSERT_NE(heard.first(), "") << "supervision heard of no failure in 30 s";
  const std::string after = chromium(url, "--dump-dom");
  EXPECT_THAT(after, HasSubstr("class=\"proc failed\"")) << after;
  EXPECT_THAT(after, ::testing::ContainsRegex("<li>[^<]*" + victim + "[^<]*SIGKILL")) << after;

  // One actor drilled into (named in the address, as a click does): its thread's stack.
  const std::string actor = trainers.at(0).id().to_string();
  const std::string drilled = chromium(url + "&actor=" + actor, "--dump-dom");
  EXPECT_THAT(drilled, HasSubstr(actor + "</small>"));
  EXPECT_THAT(drilled, ::testing::ContainsRegex("id=\"stack\">[^<]*Trainer::train_step\\(int\\) "
                                                "\\(dashboard.test.cpp:"))
      << drilled;

  // The screenshot a person looks at, kept with the run's artifacts.
  const char* dir = std::getenv("BATON_ARTIFACTS");
  const std::filesystem::path shots = dir != nullptr ? dir : ::testing::TempDir();
  std::filesystem::create_directories(shots);
  const std::filesystem::path png = shots / "dashboard.png";
  std::filesystem::remove(png);
  std::atomic<bool> done{false};
  std::thread traffic([&] {  // some calls for the throughput chart to show
    while (!done.load()) (void)evaluators.call(&Evaluator::ping, 1).get();
  });
  (void)chromium(url + "&actor=" + actor, "--screenshot=" + png.string(), 4000);
  done.store(true);
  traffic.join();
  ASSERT_TRUE(std::filesystem::exists(png));
  EXPECT_GT(std::filesystem::file_size(png), 20000U);
  std::ifstream in(png, std::ios::binary);
  char magic[8] = {};
  in.read(magic, sizeof magic);
  EXPECT_EQ(std::string(magic + 1, 3), "PNG");
  std::printf("dashboard screenshot: %s\n", png.c_str());

  EXPECT_EQ(std::move(busy).get(), 15000);
  eval_procs.stop().get();
  trainers_procs.stop().get();
}

}  // namespace
}  // namespace baton

int main(int argc, char** argv) {
  baton::Runtime rt(argc, argv);  // a worker serves here and never returns
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
