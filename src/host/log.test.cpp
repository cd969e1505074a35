// The library's log: BATON_LOG's levels, the proc and actor each line names, and a value of
// BATON_LOG that names no level. Each test runs this binary again as a child with the
// environment it needs (BATON_TEST_LOG_CHILD says what the child does) and reads what the
// child wrote on stderr. A child that runs a job is also its own worker: it creates the Runtime
// first, which in a worker never returns.

#include "log/log.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "baton/baton.hpp"
#include "host/self_spawn.test.hpp"

namespace baton {

/// Logs a line at the level it is told, from inside an actor.
class Talker : public Actor {
 public:
  int say(const std::string& level, const std::string& text) {
    detail::log_at(*detail::parse_log_level(level), "{}", text);
    return 0;
  }
  static constexpr auto endpoints = baton::endpoints<&Talker::say>();
};

namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr const char* kChildVar = "BATON_TEST_LOG_CHILD";

/// Runs this binary as a child doing `mode`, with BATON_LOG set to `level` (unset: nullopt)
/// and `extra` added to this process's environment, and waits for it; returns its stderr.
test::SelfRun run_child(const std::string& mode, const std::optional<std::string>& level,
                        const std::vector<std::string>& extra) {
  auto env = test::environment({"BATON_LOG=", kChildVar});
  env.push_back(std::string(kChildVar) + "=" + mode);
  if (level) env.push_back("BATON_LOG=" + *level);
  env.insert(env.end(), extra.begin(), extra.end());
  return test::run_self("log-" + mode, std::move(env));
}

std::size_t count(const std::string& text, std::string_view what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(Log, LevelNamesParseBothWays) {
  for (auto level : {detail::LogLevel::debug, detail::LogLevel::info, detail::LogLevel::warn,
                     detail::LogLevel::error, detail::LogLevel::off}) {
    EXPECT_EQ(detail::parse_log_level(detail::log_level_name(level)), level);
  }
  EXPECT_EQ(detail::parse_log_level("WARN"), detail::LogLevel::warn);
  EXPECT_EQ(detail::parse_log_level("warning"), std::nullopt);
  EXPECT_EQ(detail::parse_log_level(""), std::nullopt);
}

TEST(Log, WarnHidesInfoAndShowsWarnAndError) {
  const test::SelfRun run = run_child("levels", "warn", {});
  ASSERT_TRUE(WIFEXITED(run.status) && WEXITSTATUS(run.status) == 0) << run.text;
  EXPECT_THAT(run.text, Not(HasSubstr("a debug line")));
  EXPECT_THAT(run.text, Not(HasSubstr("an info line")));
  EXPECT_THAT(run.text, HasSubstr("[baton tester] warn: a warn line\n"));
  EXPECT_THAT(run.text, HasSubstr("[baton tester] error: an error line\n"));
}

TEST(Log, EachLevelShowsItsLinesAndThoseAbove) {
  struct Case {
    std::optional<std::string> level;
    bool debug, info, warn, error;
  };
  const std::vector<Case> cases = {{std::nullopt, false, true, true, true},
                                   {"debug", true, true, true, true},
                                   {"info", false, true, true, true},
                                   {"error", false, false, false, true},
                                   {"off", false, false, false, false}};
  for (const Case& c : cases) {
    SCOPED_TRACE("BATON_LOG=" + c.level.value_or("(unset)"));
    const test::SelfRun run = run_child("levels", c.level, {});
    ASSERT_TRUE(WIFEXITED(run.status) && WEXITSTATUS(run.status) == 0) << run.text;
    EXPECT_EQ(count(run.text, "[baton tester] debug: a debug line\n"), c.debug ? 1u : 0u);
    EXPECT_EQ(count(run.text, "[baton tester] info: an info line\n"), c.info ? 1u : 0u);
    EXPECT_EQ(count(run.text, "[baton tester] warn: a warn line\n"), c.warn ? 1u : 0u);
    EXPECT_EQ(count(run.text, "[baton tester] error: an error line\n"), c.error ? 1u : 0u);
    if (!c.error) {
      EXPECT_EQ(run.text, "");
    }
  }
}

TEST(Log, AnUnknownValueWarnsOnceNamingTheAcceptedValuesAndLogsAtInfo) {
  const test::SelfRun run = run_child("levels", "loud", {});
  ASSERT_TRUE(WIFEXITED(run.status) && WEXITSTATUS(run.status) == 0) << run.text;
  EXPECT_EQ(count(run.text,
                  "[baton tester] warn: BATON_LOG=loud is not one of debug, info, warn, "
                  "error, off; logging at info\n"),
            1u)
      << run.text;
  EXPECT_EQ(count(run.text, "is not one of"), 1u) << run.text;
  EXPECT_THAT(run.text, Not(HasSubstr("a debug line")));
  EXPECT_THAT(run.text, HasSubstr("[baton tester] info: an info line\n"));
}

TEST(Log, ALineFromAnActorNamesTheProcAndTheActor) {
  const test::SelfRun run = run_child("levels", std::nullopt, {});
  ASSERT_TRUE(WIFEXITED(run.status) && WEXITSTATUS(run.status) == 0) << run.text;
  // An actor of the process's own proc by its name, one of another proc in full.
  EXPECT_THAT(run.text, HasSubstr("[baton tester mine[0]] warn: from an actor of this proc\n"));
  EXPECT_THAT(run.text, HasSubstr("[baton tester other/theirs[0]] error: from another proc's\n"));
  // Outside actors again (the same thread that called them): no actor.
  EXPECT_THAT(run.text, HasSubstr("[baton tester] info: after the actors\n"));
}

TEST(Log, AWorkersLinesNameItsProcAndActorAndItTakesTheControllersLevel) {
  const test::SelfRun run = run_child("job", "debug", {"BATON_LOG_WINDOW_MS=0"});
  ASSERT_TRUE(WIFEXITED(run.status) && WEXITSTATUS(run.status) == 0) << run.text;
  // The worker's stderr comes back through the controller, behind its mesh and rank.
  EXPECT_THAT(run.text, HasSubstr("[procs0 0] [baton procs0.0 talkers[0]] warn: from a worker\n"));
  EXPECT_THAT(run.text, HasSubstr("[procs0 0] [baton procs0.0 talkers[0]] debug: in detail\n"));
  EXPECT_THAT(run.text, HasSubstr("[baton ctl] info: from the controller\n"));
}

TEST(Log, AnUnknownValueIsWarnedAboutOnceInAWholeJob) {
  const test::SelfRun run = run_child("job", "loud", {"BATON_LOG_WINDOW_MS=0"});
  ASSERT_TRUE(WIFEXITED(run.status) && WEXITSTATUS(run.status) == 0) << run.text;
  EXPECT_EQ(count(run.text,
                  "[baton ctl] warn: BATON_LOG=loud is not one of debug, info, warn, "
                  "error, off; logging at info\n"),
            1u)
      << run.text;
  EXPECT_EQ(count(run.text, "is not one of"), 1u) << run.text;
  // The worker logs at info too.
  EXPECT_THAT(run.text, HasSubstr("[procs0 0] [baton procs0.0 talkers[0]] warn: from a worker\n"));
  EXPECT_THAT(run.text, Not(HasSubstr("in detail")));
}

}  // namespace

/// Child "levels": a line at each level, then lines from actors of two in-process procs.
int run_levels() {
  detail::set_log_proc("tester");
  detail::log_debug("a debug line");
  detail::log_info("an {} line", "info");
  detail::log_warn("a warn line");
  detail::log_error("an error line");
  {
    ProcOptions own;
    own.name = "tester";
    Proc mine(own);
    ProcOptions other_options;
    other_options.name = "other";
    Proc other(other_options);
    auto a = mine.spawn<Talker>("mine");
    auto b = other.spawn<Talker>("theirs");
    a.call(&Talker::say, std::string("warn"), std::string("from an actor of this proc")).get();
    b.call(&Talker::say, std::string("error"), std::string("from another proc's")).get();
  }
  detail::log_info("after the actors");
  return 0;
}

/// Child "job": a controller with one worker, whose actor logs.
int run_job(int argc, char** argv) {
  Runtime rt(argc, argv);  // a worker serves here and never returns
  auto procs = this_host().spawn_procs({{"ranks", 1}});
  auto talkers = procs.spawn<Talker>("talkers");
  talkers.call(&Talker::say, std::string("warn"), std::string("from a worker")).get();
  talkers.call(&Talker::say, std::string("debug"), std::string("in detail")).get();
  detail::log_info("from the controller");
  procs.stop().get();  // the worker's output is all printed by now
  return 0;
}

}  // namespace baton

int main(int argc, char** argv) {
  if (const char* mode = std::getenv(baton::kChildVar)) {
    if (std::string_view(mode) == "levels") return baton::run_levels();
    if (std::string_view(mode) == "job") return baton::run_job(argc, argv);
    return 2;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
