// Looking inside a running job through the admin API and the `baton` command: every thread's
// stack with the actor it runs, the workers' last lines, a proc killed as a crash would, and
// `baton top` driven in a real terminal (tmux).

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <map>
#include <mutex>
#include <numeric>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "baton/baton.hpp"
#include "host/admin.test.hpp"
#include "log/log.hpp"
#include "mesh/stall.hpp"

namespace baton {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class Worker : public Actor {
 public:
  int echo(int x) { return x; }
  /// Works inside a function of its own, as a slow step of training does, until a Releaser of
  /// its proc lets it go (or `ms` milliseconds at most).
  [[gnu::noinline]] int crunch_numbers(int ms) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    while (!released().load() && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));  // the work it does
    }
    return ms;
  }
  static std::atomic<bool>& released() {
    static std::atomic<bool> flag{false};  // the worker process's
    return flag;
  }
  /// Writes `n` lines on stdout and one warning on stderr.
  int chatter(int n) {
    for (int i = 0; i < n; ++i) std::printf("step %d of %d\n", i, n);
    std::fflush(stdout);
    detail::log_warn("loss went up at step {}", n);
    return n;
  }
  /// crunch_numbers(ms) on the member of rank `slow` of its mesh; the others return at once.
  int crunch_on(int slow, int ms) {
    return static_cast<int>(context().rank) == slow ? crunch_numbers(ms) : 0;
  }
  static constexpr auto endpoints = baton::endpoints<&Worker::echo, &Worker::crunch_numbers,
                                                     &Worker::chatter, &Worker::crunch_on>();
};

/// Gathers a mesh's replies from inside its own endpoint, in a worker of its own.
class Gatherer : public Actor {
 public:
  Task<int> gather(ActorMesh<Worker> mesh, int slow, int ms) {
    const ValueMesh<int> v = co_await mesh.call(&Worker::crunch_on, slow, ms);
    co_return std::accumulate(v.values().begin(), v.values().end(), 0);
  }
  static constexpr auto endpoints = baton::endpoints<&Gatherer::gather>();
};

/// Lets a Worker of its proc out of crunch_numbers.
class Releaser : public Actor {
 public:
  int release() {
    Worker::released().store(true);
    return 1;
  }
  static constexpr auto endpoints = baton::endpoints<&Releaser::release>();
};

/// Calls `next` from inside its own endpoint: a chain controller → relay → worker.
class Relay : public Actor {
 public:
  Task<int> relay(ActorRef<Worker> next, int x) {
    const int got = co_await next.call(&Worker::echo, x);
    co_return got + 1;
  }
  static constexpr auto endpoints = baton::endpoints<&Relay::relay>();
};

/// Asks until `done(reply)` or 20 s: the API reads a live job, which moves on its own.
Reply get_until(const internal::RunningJob& job, const std::string& path,
                const std::function<bool(const Reply&)>& done) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  Reply r;
  do {
    r = get(job, path);
  } while (!done(r) && std::chrono::steady_clock::now() < until);
  return r;
}

/// How many times `pattern` matches in `text`.
std::ptrdiff_t count_of(const std::string& text, const std::string& pattern) {
  const std::regex re(pattern);
  return std::distance(std::sregex_iterator(text.begin(), text.end(), re), std::sregex_iterator());
}

std::string proc_name(const ActorMesh<Worker>& mesh, std::size_t rank) {
  return mesh.at(rank).id().proc.name;
}

TEST(Stacks, TheThreadInsideALongEndpointShowsItsFunctionAndWhichActorItRuns) {
  const auto job = this_job();
  auto procs = this_host().spawn_procs({{"gpus", 2}});
  auto workers = procs.spawn<Worker>("worker");
  ASSERT_EQ(workers.call(&Worker::echo, 1).get().values(), (std::vector<int>{1, 1}));
  const std::string busy_proc = proc_name(workers, 1);
  const std::string actor = busy_proc + "/worker[0]";
  auto releasers = procs.spawn<Releaser>("releaser");
  auto busy = workers.at(1).call(&Worker::crunch_numbers, 120000);
  // Until the thread is labelled with its actor: a thread is labelled only when its endpoint ran
  // from before the first stack was taken until after the last, so a stack taken as the call
  // was starting shows the function but not yet the actor.
  const Reply r = get_until(job, "/api/stacks?proc=" + busy_proc, [](const Reply& x) {
    return x.body.find("Worker::crunch_numbers for ") != std::string::npos;
  });
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_THAT(r.body, HasSubstr("\"proc\": \"" + busy_proc + "\""));
  EXPECT_THAT(r.body, HasSubstr(actor + ": endpoint "));
  EXPECT_THAT(r.body, HasSubstr("Worker::crunch_numbers for "));
  EXPECT_THAT(r.body, HasSubstr("Worker::crunch_numbers(int) (inspect.test.cpp:"));
  // One actor: only the thread that runs it.
  const Reply one = get(job, "/api/stacks?actor=" + actor);
  ASSERT_EQ(one.status, 200) << one.body;
  EXPECT_EQ(count_of(one.body, "\"tid\""), 1) << one.body;
  // Every proc: the controller and both workers.
  const Reply all = get(job, "/api/stacks");
  for (const std::string& p : {proc_name(workers, 0), busy_proc}) {
    EXPECT_THAT(all.body, HasSubstr("\"proc\": \"" + p + "\"")) << all.body;
  }
  // The command prints the same as text, the actor's thread marked.
  const auto text = baton_cli({"--job", std::to_string(::getpid()), "stack", actor});
  EXPECT_EQ(text.status, 0) << text.text;
  EXPECT_THAT(text.text, HasSubstr("runs " + actor + ": endpoint"));
  EXPECT_THAT(text.text, HasSubstr("  #"));
  EXPECT_THAT(text.text, HasSubstr("Worker::crunch_numbers(int) (inspect.test.cpp:"));
  (void)releasers.at(1).call(&Releaser::release).get();
  EXPECT_EQ(std::move(busy).get(), 120000);
  // Idle now: it runs on no thread, and says so (once its thread is back from sending the
  // reply, which may have come before the handler returned).
  const Reply idle = get_until(job, "/api/stacks?actor=" + actor, [](const Reply& x) {
    return x.body.find("runs on no thread now") != std::string::npos;
  });
  EXPECT_THAT(idle.body, HasSubstr("runs on no thread now")) << idle.body;
  procs.stop().get();
}

TEST(Stacks, AnActorOrProcThatDoesNotExistIsRefusedNamingTheOnesThatDo) {
  const auto job = this_job();
  auto procs = this_host().spawn_procs({{"gpus", 1}});
  auto workers = procs.spawn<Worker>("worker");
  (void)workers.call(&Worker::echo, 1).get();
  const std::string p = proc_name(workers, 0);
  const Reply no_actor = get(job, "/api/stacks?actor=" + p + "/nobody%5B0%5D");
  EXPECT_EQ(no_actor.status, 404);
  EXPECT_THAT(no_actor.body, HasSubstr("no actor " + p + "/nobody[0]"));
  EXPECT_THAT(no_actor.body, HasSubstr(p + "/worker[0]"));
  const Reply no_proc = get(job, "/api/stacks?proc=nowhere.3");
  EXPECT_EQ(no_proc.status, 404);
  EXPECT_THAT(no_proc.body, HasSubstr("no proc nowhere.3 in this job; its procs: "));
  EXPECT_THAT(no_proc.body, HasSubstr(p));
  const auto cli =
      baton_cli({"--job", std::to_string(::getpid()), "stack", p + "/nobody[0]"}, STDERR_FILENO);
  EXPECT_EQ(WEXITSTATUS(cli.status), 1);
  EXPECT_THAT(cli.text, HasSubstr("no actor " + p + "/nobody[0]"));
  procs.stop().get();
}

TEST(Logs, TheWorkersLastLinesByProcAndLevelAndOnlyTheNewOnes) {
  const auto job = this_job();
  auto procs = this_host().spawn_procs({{"gpus", 2}});
  auto workers = procs.spawn<Worker>("worker");
  (void)workers.at(0).call(&Worker::chatter, 3).get();
  (void)workers.at(1).call(&Worker::chatter, 2).get();
  Runtime::get().flush_output();  // what the workers wrote has been read
  const std::string p0 = proc_name(workers, 0);
  const Reply r = get(job, "/api/logs?proc=" + p0);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_THAT(r.body, HasSubstr("\"text\": \"step 2 of 3\""));
  EXPECT_THAT(r.body, HasSubstr("\"stream\": \"stdout\""));
  EXPECT_THAT(r.body, Not(HasSubstr("of 2\"")));  // the other proc's
  const Reply warn = get(job, "/api/logs?level=warn");
  EXPECT_THAT(warn.body, HasSubstr("loss went up at step 3"));
  EXPECT_THAT(warn.body, HasSubstr("loss went up at step 2"));
  EXPECT_THAT(warn.body, HasSubstr("\"level\": \"warn\""));
  EXPECT_THAT(warn.body, Not(HasSubstr("step 0 of")));
  // Only what came after a line already seen.
  const std::string seen = [&] {
    const std::regex seq("\"seq\": ([0-9]+)");
    std::string s;
    for (auto it = std::sregex_iterator(r.body.begin(), r.body.end(), seq);
         it != std::sregex_iterator(); ++it) {
      s = (*it)[1];
    }
    return s;
  }();
  ASSERT_FALSE(seen.empty()) << r.body;
  (void)workers.at(0).call(&Worker::chatter, 1).get();
  Runtime::get().flush_output();
  const Reply newer = get(job, "/api/logs?proc=" + p0 + "&since=" + seen);
  EXPECT_THAT(newer.body, HasSubstr("step 0 of 1"));
  EXPECT_THAT(newer.body, Not(HasSubstr("of 3\"")));
  const Reply bad = get(job, "/api/logs?level=loud");
  EXPECT_EQ(bad.status, 400);
  EXPECT_THAT(bad.body, HasSubstr("not one of debug, info, warn, error"));
  const auto cli =
      baton_cli({"--job", std::to_string(::getpid()), "logs", "--proc", p0, "-n", "2"});
  EXPECT_EQ(cli.status, 0);
  EXPECT_THAT(cli.text, HasSubstr("[" + p0 + "] step 0 of 1"));
  EXPECT_EQ(std::count(cli.text.begin(), cli.text.end(), '\n'), 2) << cli.text;
  procs.stop().get();
}

TEST(Kill, AProcKilledThroughTheCommandIsAFailureSupervisionHearsOf) {
  const auto job = this_job();
  HeardFailures heard;
  auto procs = this_host().spawn_procs({{"gpus", 2}});
  auto workers = procs.spawn<Worker>("worker");
  (void)workers.call(&Worker::echo, 1).get();
  const std::string victim = proc_name(workers, 1);
  const auto killed = baton_cli({"--job", std::to_string(::getpid()), "kill", victim});
  EXPECT_EQ(killed.status, 0) << killed.text;
  EXPECT_THAT(killed.text, HasSubstr("killed " + victim + " (SIGKILL to pid "));
  const std::string failure = heard.first();
  ASSERT_NE(failure, "") << "supervision heard of no failure in 30 s";
  EXPECT_THAT(failure, HasSubstr(victim));
  EXPECT_THAT(failure, HasSubstr("SIGKILL"));
  const Reply after = get_until(job, "/api/procs", [](const Reply& x) {
    return x.body.find("\"state\": \"failed\"") != std::string::npos;
  });
  EXPECT_THAT(after.body, HasSubstr("\"state\": \"failed\"")) << after.body;
  // Killing it again, or a proc that never was, says what can be killed.
  const auto again =
      baton_cli({"--job", std::to_string(::getpid()), "kill", victim}, STDERR_FILENO);
  EXPECT_EQ(WEXITSTATUS(again.status), 1);
  EXPECT_THAT(again.text, HasSubstr("has already ended"));
  const Reply none = request(job, "POST", "/api/kill?proc=nowhere.0",
                             "Authorization: Bearer " + token_of(job) + "\r\n");
  EXPECT_EQ(none.status, 404);
  EXPECT_THAT(none.body, HasSubstr(proc_name(workers, 0)));
  const Reply unnamed =
      request(job, "POST", "/api/kill", "Authorization: Bearer " + token_of(job) + "\r\n");
  EXPECT_EQ(unnamed.status, 400);
  EXPECT_THAT(unnamed.body, HasSubstr("name the proc to kill: POST /api/kill?proc=NAME"));
  const Reply by_get = get(job, "/api/kill?proc=" + proc_name(workers, 0));
  EXPECT_EQ(by_get.status, 405);  // a GET never kills
  procs.stop().get();
}

TEST(Trace, SpansNestAndEveryFlowJoinsACallersSpanToTheSpanThatDeliveredIt) {
  const auto job = this_job();
  auto procs = this_host().spawn_procs({{"gpus", 2}});
  auto workers = procs.spawn<Worker>("worker");
  auto relays = procs.spawn<Relay>("relay");
  (void)workers.call(&Worker::echo, 1).get();
  (void)relays.at(0).call(&Relay::relay, workers.at(1), 1).get();
  const std::string auth = "Authorization: Bearer " + token_of(job) + "\r\n";
  ASSERT_EQ(request(job, "POST", "/api/trace/start", auth).status, 200);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(relays.at(0).call(&Relay::relay, workers.at(1), i).get(), i + 1);
  }
  const Reply r = request(job, "POST", "/api/trace/stop", auth);
  ASSERT_EQ(r.status, 200) << r.body;
  const auto trace = nlohmann::json::parse(r.body);
  const auto& events = trace.at("traceEvents");
  int relay_pid = 0;
  for (const auto& e : events) {
    if (e.value("name", "") == "process_name" && e.at("args").at("name") == proc_name(workers, 0)) {
      relay_pid = e.at("pid").get<int>();
    }
  }
  ASSERT_NE(relay_pid, 0) << "each proc is named";
  struct Span {
    double ts, end;
    std::string name;
  };
  std::map<std::pair<int, int>, std::vector<Span>> spans;  // by pid, tid
  int relay_spans = 0;
  int echo_spans = 0;
  for (const auto& e : events) {
    if (e.at("ph") != "X") continue;
    const std::string name = e.at("name");
    spans[{e.at("pid"), e.at("tid")}].push_back(
        {e.at("ts").get<double>(), e.at("ts").get<double>() + e.at("dur").get<double>(), name});
    if (e.at("cat") == "endpoint" && name.ends_with("Relay::relay")) {
      ++relay_spans;
      EXPECT_EQ(e.at("args").at("actor"), proc_name(workers, 0) + "/relay[0]");
      EXPECT_EQ(e.at("pid").get<int>(), relay_pid);
    }
    if (e.at("cat") == "endpoint" && name.ends_with("Worker::echo")) ++echo_spans;
  }
  EXPECT_EQ(relay_spans, 3);
  EXPECT_EQ(echo_spans, 3);
  // On each thread, two spans are apart or one holds the other.
  for (auto& [thread, list] : spans) {
    for (const auto& a : list) {
      for (const auto& b : list) {
        const bool apart = a.end <= b.ts || b.end <= a.ts;
        const bool nested = (a.ts <= b.ts && b.end <= a.end) || (b.ts <= a.ts && a.end <= b.end);
        EXPECT_TRUE(apart || nested) << a.name << " and " << b.name << " overlap";
      }
    }
  }
  // Every flow: one start and one end, each inside a span of its own thread.
  auto within = [&spans](const nlohmann::json& e) -> const Span* {
    for (const auto& s : spans[{e.at("pid"), e.at("tid")}]) {
      if (s.ts <= e.at("ts").get<double>() && e.at("ts").get<double>() <= s.end) return &s;
    }
    return nullptr;
  };
  std::map<std::uint64_t, std::pair<const Span*, const Span*>> flows;
  for (const auto& e : events) {
    if (e.at("ph") != "s" && e.at("ph") != "f") continue;
    const Span* in = within(e);
    ASSERT_NE(in, nullptr) << "a flow outside any span: " << e.dump();
    auto& f = flows[e.at("id").get<std::uint64_t>()];
    (e.at("ph") == "s" ? f.first : f.second) = in;
  }
  int relay_to_worker = 0;
  int controller_to_relay = 0;
  for (const auto& [id, ends] : flows) {
    ASSERT_NE(ends.first, nullptr) << "flow " << id << " has no start";
    ASSERT_NE(ends.second, nullptr) << "flow " << id << " has no end";
    if (!ends.first->name.ends_with("Relay::relay") || ends.second->name != "deliver call")
      continue;
    if (ends.first->name.starts_with("send ")) {
      ++controller_to_relay;  // the controller's call, sent from no endpoint: a span of its own
    } else {
      ++relay_to_worker;  // the relay's call, out of its endpoint into the worker's process
    }
  }
  EXPECT_GE(flows.size(), 9U) << "controller → relay → its endpoint → worker → its endpoint";
  EXPECT_EQ(controller_to_relay, 3);
  EXPECT_EQ(relay_to_worker, 3);
  procs.stop().get();
}

TEST(Stalls, AnEndpointRunningLongerThanStallAfterIsLoggedOnceWithItsStackAndMarked) {
  const auto job = this_job();
  auto procs = this_host().spawn_procs({{"gpus", 1}});
  auto workers = procs.spawn<Worker>("worker");
  (void)workers.call(&Worker::echo, 1).get();
  const std::string p = proc_name(workers, 0);
  const std::string actor = p + "/worker[0]";
  auto releasers = procs.spawn<Releaser>("releaser");
  auto busy = workers.at(0).call(&Worker::crunch_numbers, 120000);
  const std::string logs = "/api/logs?level=warn&proc=" + p;
  const Reply logged = get_until(job, logs, [](const Reply& x) {
    return x.body.find("(inspect.test.cpp:") != std::string::npos;  // its stack's lines too
  });
  EXPECT_THAT(logged.body, HasSubstr(actor + " has been in endpoint "));
  EXPECT_THAT(logged.body, HasSubstr("Worker::crunch_numbers for "));
  EXPECT_THAT(logged.body, HasSubstr("longer than BATON_STALL_AFTER=2 s"));
  EXPECT_THAT(logged.body, HasSubstr("Worker::crunch_numbers(int) (inspect.test.cpp:"));
  // Marked where people look: the API, and so baton ls and top.
  const Reply marked = get(job, "/api/actors");
  EXPECT_THAT(marked.body, HasSubstr("\"stalled\": true")) << marked.body;
  (void)releasers.at(0).call(&Releaser::release).get();
  EXPECT_EQ(std::move(busy).get(), 120000);
  Runtime::get().flush_output();
  const Reply after = get(job, logs);
  EXPECT_EQ(count_of(after.body, "/worker\\[0\\] has been in endpoint"), 1)
      << "logged once, not at every look: " << after.body;
  EXPECT_THAT(get(job, "/api/actors").body, Not(HasSubstr("\"stalled\": true")));
  procs.stop().get();
}

TEST(Stalls, AGatherWaitingLongerThanStallAfterNamesTheMembersItWaitsFor) {
  const auto job = this_job();
  auto procs = this_host().spawn_procs({{"gpus", 3}});
  auto workers = procs.spawn<Worker>("gathered");
  auto releasers = procs.spawn<Releaser>("releaser");
  auto callers = this_host().spawn_procs({{"gpus", 1}});
  auto gatherer = callers.spawn<Gatherer>("gatherer");
  // The gather's root is the gatherer's proc: its stall watch names rank 1, the one still busy.
  auto result = gatherer.at(0).call(&Gatherer::gather, workers, 1, 120000);
  const std::string logs = "/api/logs?level=warn&proc=" + gatherer.at(0).id().proc.name;
  const Reply logged = get_until(job, logs, [](const Reply& x) {
    return x.body.find("members has waited") != std::string::npos;
  });
  EXPECT_THAT(logged.body, HasSubstr("Worker::crunch_on call to 3 members has waited "));
  EXPECT_THAT(logged.body,
              HasSubstr("for 1 member: rank 1 (" + proc_name(workers, 1) + "/gathered[0], in "));
  EXPECT_THAT(logged.body, HasSubstr("Worker::crunch_on for "));
  EXPECT_THAT(logged.body, Not(HasSubstr("rank 0 (")));
  EXPECT_THAT(logged.body, Not(HasSubstr("rank 2 (")));
  EXPECT_THAT(logged.body, HasSubstr("longer than BATON_STALL_AFTER=2 s"));
  (void)releasers.at(1).call(&Releaser::release).get();
  EXPECT_EQ(std::move(result).get(), 120000);
  Runtime::get().flush_output();
  EXPECT_EQ(count_of(get(job, logs).body, "members has waited"), 1) << "logged once";
  callers.stop().get();
  procs.stop().get();
}

TEST(Stalls, BatonStallAfterSaysWhatItTakes) {
  ::setenv("BATON_STALL_AFTER", "soon", 1);
  try {
    (void)detail::stall_after_from_env();
    ADD_FAILURE() << "a value that is not seconds was taken";
  } catch (const UsageError& e) {
    EXPECT_THAT(e.what(), HasSubstr("is not a number of seconds"));
  }
  ::setenv("BATON_STALL_AFTER", "off", 1);
  EXPECT_EQ(detail::stall_after_from_env(), std::nullopt);
  ::setenv("BATON_STALL_AFTER", "0.5", 1);
  EXPECT_EQ(detail::stall_after_from_env(), std::chrono::milliseconds(500));
  ::unsetenv("BATON_STALL_AFTER");
  EXPECT_EQ(detail::stall_after_from_env(), std::chrono::seconds(60));
  ::setenv("BATON_STALL_AFTER", "2", 1);  // this binary's, for the tests above
}

TEST(Top, ShowsTheProcsAndActorsInARealTerminalAndQuitsOnQ) {
  ASSERT_FALSE(shell("command -v tmux").empty()) << "tmux is not installed (make deps)";
  auto procs = this_host().spawn_procs({{"gpus", 2}});
  auto workers = procs.spawn<Worker>("worker");
  (void)workers.call(&Worker::echo, 1).get();
  auto releasers = procs.spawn<Releaser>("releaser");
  auto busy = workers.at(0).call(&Worker::crunch_numbers, 120000);
  const std::string session = "baton-top-test-" + std::to_string(::getpid());
  const std::string status_file = ::testing::TempDir() + session + ".status";
  std::remove(status_file.c_str());
  // When top ends, the session writes its status and signals the channel the test waits on.
  shell("tmux new-session -d -s " + session + " -x 160 -y 40 '" + BATON_CLI_BIN + " --job " +
        std::to_string(::getpid()) + " top --interval 0.2; echo $? > " + status_file +
        "; tmux wait-for -S " + session + "'");
  std::string screen;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < until) {
    screen = shell("tmux capture-pane -p -t " + session);
    if (screen.find("crunch_numbers") != std::string::npos) break;
  }
  EXPECT_THAT(screen, HasSubstr("baton top: job of ctl"));
  EXPECT_THAT(screen, HasSubstr(proc_name(workers, 1)));
  EXPECT_THAT(screen, HasSubstr("/worker[0]"));
  EXPECT_THAT(screen, HasSubstr("crunch_numbers"));
  EXPECT_THAT(screen, HasSubstr("(q quits)"));
  shell("tmux send-keys -t " + session + " q");
  shell("timeout 10 tmux wait-for " + session);
  std::string status;
  std::getline(std::ifstream(status_file), status);
  EXPECT_EQ(status, "0") << "baton top did not quit on q";
  shell("tmux kill-session -t " + session + " 2>/dev/null");
  (void)releasers.at(0).call(&Releaser::release).get();
  (void)std::move(busy).get();
  procs.stop().get();
}

}  // namespace
}  // namespace baton

int main(int argc, char** argv) {
  // An endpoint of more than 2 s is a stall in this job: the tests' long ones are.
  ::setenv("BATON_STALL_AFTER", "2", /*overwrite=*/0);
  baton::Runtime rt(argc, argv);  // a worker serves here and never returns
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
