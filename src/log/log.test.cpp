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

extern char** environ;

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

/// How a child ended and what it wrote on stderr.
struct ChildRun {
  int status = -1;
  std::string err;
};

/// Runs this binary as a child doing `mode`, with BATON_LOG set to `level` (unset: nullopt)
/// and `extra` added to this process's environment, and waits for it.
void run_child(const std::string& mode, const std::optional<std::string>& level,
               const std::vector<std::string>& extra, ChildRun& out) {
  int err[2];
  ASSERT_EQ(::pipe2(err, O_CLOEXEC), 0);
  posix_spawn_file_actions_t actions;
  ::posix_spawn_file_actions_init(&actions);
  ::posix_spawn_file_actions_adddup2(&actions, err[1], STDERR_FILENO);
  std::vector<std::string> env_s;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view entry(*e);
    if (entry.rfind("BATON_LOG=", 0) == 0 || entry.rfind(kChildVar, 0) == 0) continue;
    env_s.emplace_back(entry);
  }
  env_s.push_back(std::string(kChildVar) + "=" + mode);
  if (level) env_s.push_back("BATON_LOG=" + *level);
  env_s.insert(env_s.end(), extra.begin(), extra.end());
  std::vector<char*> envp;
  envp.reserve(env_s.size() + 1);
  for (auto& e : env_s) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::string self = "log-" + mode;
  char* child_argv[] = {self.data(), nullptr};
  pid_t child = -1;
  ASSERT_EQ(::posix_spawn(&child, "/proc/self/exe", &actions, nullptr, child_argv, envp.data()), 0);
  ::posix_spawn_file_actions_destroy(&actions);
  ::close(err[1]);
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(err[0], buf, sizeof buf);
    if (n <= 0) break;
    out.err.append(buf, static_cast<std::size_t>(n));
  }
  ::close(err[0]);
  ASSERT_EQ(::waitpid(child, &out.status, 0), child);
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
  ChildRun run;
  ASSERT_NO_FATAL_FAILURE(run_child("levels", "warn", {}, run));
  ASSERT_TRUE(WIFEXITED(run.status) && WEXITSTATUS(run.status) == 0) << run.err;
  EXPECT_THAT(run.err, Not(HasSubstr("a debug line")));
  EXPECT_THAT(run.err, Not(HasSubstr("an info line")));
  EXPECT_THAT(run.err, HasSubstr("[baton tester] warn: a warn line\n"));
  EXPECT_THAT(run.err, HasSubstr("[baton tester] error: an error line\n"));
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
    ChildRun run;
    ASSERT_NO_FATAL_FAILURE(run_child("levels", c.level, {}, run));
    ASSERT_TRUE(WIFEXITED(run.status) && WEXITSTATUS(run.status) == 0) << run.err;
    EXPECT_EQ(count(run.err, "[baton tester] debug: a debug line\n"), c.debug ? 1u : 0u);
    EXPECT_EQ(count(run.err, "[baton tester] info: an info line\n"), c.info ? 1u : 0u);
    EXPECT_EQ(count(run.err, "[baton tester] warn: a warn line\n"), c.warn ? 1u : 0u);
    EXPECT_EQ(count(run.err, "[baton tester] error: an error line\n"), c.error ? 1u : 0u);
    if (!c.error) {
      EXPECT_EQ(run.err, "");
    }
  }
}

TEST(Log, AnUnknownValueWarnsOnceNamingTheAcceptedValuesAndLogsAtInfo) {
  ChildRun run;
  ASSERT_NO_FATAL_FAILURE(run_child("levels", "loud", {}, run));
  ASSERT_TRUE(WIFEXITED(run.status) && WEXITSTATUS(run.status) == 0) << run.err;
  EXPECT_EQ(count(run.err,
                  "[baton tester] warn: BATON_LOG=loud is not one of debug, info, warn, "
                  "error, off; logging at info\n"),
            1u)
      << run.err;
  EXPECT_EQ(count(run.err, "is not one of"), 1u) << run.err;
  EXPECT_THAT(run.err, Not(HasSubstr("a debug line")));
  EXPECT_THAT(run.err, HasSubstr("[baton tester] info: an info line\n"));
}

TEST(Log, ALineFromAnActorNamesTheProcAndTheActor) {
  ChildRun run;
  ASSERT_NO_FATAL_FAILURE(run_child("levels", std::nullopt, {}, run));
  ASSERT_TRUE(WIFEXITED(run.status) && WEXITSTATUS(run.status) == 0) << run.err;
  // An actor of the process's own proc by its name, one of another proc in full.
  EXPECT_THAT(run.err, HasSubstr("[baton tester mine[0]] warn: from an actor of this proc\n"));
  EXPECT_THAT(run.err, HasSubstr("[baton tester other/theirs[0]] error: from another proc's\n"));
  // Outside actors again (the same thread that called them): no actor.
  EXPECT_THAT(run.err, HasSubstr("[baton tester] info: after the actors\n"));
}

TEST(Log, AWorkersLinesNameItsProcAndActorAndItTakesTheControllersLevel) {
  ChildRun run;
  ASSERT_NO_FATAL_FAILURE(run_child("job", "debug", {"BATON_LOG_WINDOW_MS=0"}, run));
  ASSERT_TRUE(WIFEXITED(run.status) && WEXITSTATUS(run.status) == 0) << run.err;
  // The worker's stderr comes back through the controller, behind its mesh and rank.
  EXPECT_THAT(run.err, HasSubstr("[procs0 0] [baton procs0.0 talkers[0]] warn: from a worker\n"));
  EXPECT_THAT(run.err, HasSubstr("[procs0 0] [baton procs0.0 talkers[0]] debug: in detail\n"));
  EXPECT_THAT(run.err, HasSubstr("[baton ctl] info: from the controller\n"));
}

TEST(Log, AnUnknownValueIsWarnedAboutOnceInAWholeJob) {
  ChildRun run;
  ASSERT_NO_FATAL_FAILURE(run_child("job", "loud", {"BATON_LOG_WINDOW_MS=0"}, run));
  ASSERT_TRUE(WIFEXITED(run.status) && WEXITSTATUS(run.status) == 0) << run.err;
  EXPECT_EQ(count(run.err,
                  "[baton ctl] warn: BATON_LOG=loud is not one of debug, info, warn, "
                  "error, off; logging at info\n"),
            1u)
      << run.err;
  EXPECT_EQ(count(run.err, "is not one of"), 1u) << run.err;
  // The worker logs at info too.
  EXPECT_THAT(run.err, HasSubstr("[procs0 0] [baton procs0.0 talkers[0]] warn: from a worker\n"));
  EXPECT_THAT(run.err, Not(HasSubstr("in detail")));
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
