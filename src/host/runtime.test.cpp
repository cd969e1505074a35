// Meshes of real worker processes on this host. This binary is its own worker: main() creates
// the Runtime first, which in a worker never returns.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "baton/baton.hpp"
#include "host/self_spawn.test.hpp"
#include "mesh/host_fanout.test.hpp"

namespace baton {
[[noreturn]] void run_doomed_controller();
namespace {

using ::testing::HasSubstr;

/// This process's open descriptors, as "3 -> socket:[1234]".
std::vector<std::string> open_fds() {
  std::vector<std::string> out;
  DIR* d = ::opendir("/proc/self/fd");
  if (d == nullptr) return out;
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.' || std::atoi(e->d_name) == ::dirfd(d)) continue;
    char target[256] = {};
    const auto n =
        ::readlink(("/proc/self/fd/" + std::string(e->d_name)).c_str(), target, sizeof target - 1);
    out.push_back(std::string(e->d_name) + " -> " + (n > 0 ? std::string(target, n) : "?"));
  }
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

/// What was open when main() began, before the Runtime: in a worker, what it inherited.
std::vector<std::string>& fds_at_start() {
  static std::vector<std::string> fds;
  return fds;
}

class Counter : public Actor {
 public:
  explicit Counter(int start) : value_(start) {}
  void incr(int by) { value_ += by; }
  int value() { return value_; }
  std::string device() {
    const char* d = std::getenv("CUDA_VISIBLE_DEVICES");
    return d != nullptr ? d : "unset";
  }
  int rank() { return std::atoi(std::getenv("BATON_RANK")); }
  int fail_on(int rank) {
    if (this->rank() == rank) throw std::runtime_error("rank " + std::to_string(rank) + " refuses");
    return 0;
  }
  int pid() { return static_cast<int>(::getpid()); }
  std::string big(std::size_t n) { return std::string(n, 'x'); }
  std::vector<std::string> inherited() { return fds_at_start(); }
  int hang() {
    for (;;) ::pause();  // until the test kills this process
  }
  int die(int code) {
    std::fprintf(stderr, "dying with %d\n", code);
    std::fflush(stderr);
    std::_Exit(code);
  }
  void say(const std::string& text, int stream) {
    FILE* f = stream == 2 ? stderr : stdout;
    std::fprintf(f, "%s\n", text.c_str());
    std::fflush(f);
  }
  // An actor in a worker calling back an actor of the controller.
  Task<int> ask(ActorRef<Counter> other) { co_return co_await other.call(&Counter::value) + 1; }
  static constexpr auto endpoints =
      baton::endpoints<&Counter::incr, &Counter::value, &Counter::device, &Counter::rank,
                       &Counter::fail_on, &Counter::ask, &Counter::say, &Counter::pid,
                       &Counter::hang, &Counter::die, &Counter::inherited, &Counter::big>();

 private:
  int value_;
};

/// Serves TCP next to its unix socket, and calls a peer over TCP.
class TcpPeer : public Actor {
 public:
  std::string serve_tcp() { return proc().serve(Address::parse("tcp://127.0.0.1:0")).to_string(); }
  int value() { return 42; }
  Task<int> call_over_tcp(ActorRef<TcpPeer> other, std::string address) {
    proc().connect(other.id().proc, Address::parse(address));
    co_return co_await other.call(&TcpPeer::value);
  }
  static constexpr auto endpoints =
      baton::endpoints<&TcpPeer::serve_tcp, &TcpPeer::value, &TcpPeer::call_over_tcp>();
};

/// Envelopes and close reasons of one raw link.
struct LinkInbox {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::string> closed;
  net::LinkHandler handler() {
    return net::LinkHandler{[](const Envelope&) {},
                            [this](net::LinkEnd, const std::string& reason) {
                              std::lock_guard lock(mu);
                              closed.push_back(reason);
                              cv.notify_all();
                            }};
  }
  std::string wait_closed() {
    std::unique_lock lock(mu);
    if (!cv.wait_for(lock, std::chrono::seconds(20), [&] { return !closed.empty(); })) {
      return "never closed";
    }
    return closed.front();
  }
};

TEST(Tls, WorkersLinkOverTcpWithTheJobsTlsAndOthersAreRefused) {
  const net::LinkOptions job = Runtime::get().link_options();
  ASSERT_TRUE(job.tls.enabled());  // on by default, with certificates made for the job
  EXPECT_TRUE(std::filesystem::exists(job.tls.ca_file));
  EXPECT_FALSE(job.secret.empty());
  auto procs = this_host().spawn_procs({{"gpus", 2}});
  auto peers = procs.spawn<TcpPeer>("peers");
  const std::string address = peers.slice("gpus", 0).call_one(&TcpPeer::serve_tcp).get();
  ASSERT_EQ(address.rfind("tcp://", 0), 0u);
  // Worker 1 links to worker 0 over TCP: the secret's handshake, then TLS, then the call.
  EXPECT_EQ(peers.slice("gpus", 1).call_one(&TcpPeer::call_over_tcp, peers.at(0), address).get(),
            42);

  net::IoThread io;
  {
    // TLS from another CA, with the secret: refused.
    std::string dir = (std::filesystem::temp_directory_path() / "baton-other-XXXXXX").string();
    ASSERT_NE(::mkdtemp(dir.data()), nullptr);
    net::LinkOptions other;
    other.secret = job.secret;
    other.tls = net::make_job_certificates(dir);
    LinkInbox in;
    auto link = net::Link::connect(io, Address::parse(address), in.handler(), other);
    EXPECT_THAT(in.wait_closed(), HasSubstr("TLS handshake"));
    std::filesystem::remove_all(dir);
  }
  procs.stop().get();
}

/// Failures that reached the controller's supervise hook (installed in main()).
struct Failures {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<MeshFailure> events;
  /// Waits (with a generous bound, so a broken build fails rather than hangs) for `n` events.
  std::vector<MeshFailure> wait(std::size_t n) {
    std::unique_lock lock(mu);
    cv.wait_for(lock, std::chrono::seconds(30), [&] { return events.size() >= n; });
    return std::exchange(events, {});
  }
};
Failures& failures() {
  static Failures f;
  return f;
}

TEST(Mesh, SpawnCallSliceAndStopAcrossWorkerProcesses) {
  auto procs = this_host().spawn_procs({{"hosts", 2}, {"gpus", 2}});
  ASSERT_EQ(procs.size(), 4u);
  auto counters = procs.spawn<Counter>("counters", 10);
  EXPECT_EQ(counters.shape().to_string(), "{hosts: 2, gpus: 2}");

  // Each proc got its own device and rank; replies sit at their coordinates.
  ValueMesh<std::string> devices = counters.call(&Counter::device).get();
  ValueMesh<int> ranks = counters.call(&Counter::rank).get();
  for (const auto& [point, device] : devices.items()) {
    EXPECT_EQ(device, std::to_string(point["gpus"])) << point.to_string();
    EXPECT_EQ(ranks.at(point), static_cast<int>(point.rank));
  }

  // A slice reaches exactly its ranks.
  auto host1 = counters.slice("hosts", 1);
  host1.broadcast(&Counter::incr, 5);
  ValueMesh<int> values = counters.call(&Counter::value).get();
  EXPECT_EQ(values.values(), (std::vector<int>{10, 10, 15, 15}));
  ValueMesh<int> sliced = counters.slice("gpus", 1, 2).call(&Counter::rank).get();
  EXPECT_EQ(sliced.values(), (std::vector<int>{1, 3}));
  EXPECT_EQ(sliced.shape().to_string(), "{hosts: 2, gpus: 1}");

  // FIFO per sender across broadcast and call: the call always sees the increment.
  for (int i = 1; i <= 20; ++i) {
    counters.broadcast(&Counter::incr, 1);
    EXPECT_EQ(counters.slice("hosts", 0).slice("gpus", 0).call_one(&Counter::value).get(), 10 + i);
  }

  try {
    (void)counters.call_one(&Counter::value);
    FAIL() << "expected UsageError";
  } catch (const UsageError& e) {
    EXPECT_THAT(e.what(), HasSubstr("has 4 (slice it"));
  }

  try {
    counters.call(&Counter::fail_on, 2).get();
    FAIL() << "expected ActorError";
  } catch (const ActorError& e) {
    EXPECT_EQ(e.remote_message(), "rank 2 refuses");
    EXPECT_THAT(e.actor(), HasSubstr("procs"));
  }

  // A worker's actor calls an actor that lives in the controller.
  auto local = Runtime::get().proc().spawn<Counter>("local", 41);
  EXPECT_EQ(counters.call(&Counter::ask, local).get().values(), (std::vector<int>{42, 42, 42, 42}));

  procs.stop().get();
  EXPECT_THROW((void)counters.call(&Counter::value), UsageError);
}

TEST(Mesh, ActorsSpawnedOnThisProcRunInThisProcessAndAreCalledLikeAnyOthers) {
  ProcMesh here = this_proc();
  EXPECT_EQ(here.size(), 1u);
  EXPECT_EQ(here.shape().to_string(), "{}");
  auto counters = here.spawn<Counter>("here_counters", 5);
  EXPECT_EQ(counters.call_one(&Counter::pid).get(), static_cast<int>(::getpid()));
  counters.broadcast(&Counter::incr, 2);
  EXPECT_EQ(counters.call(&Counter::value).get().values(), (std::vector<int>{7}));
  // A second mesh on it, and a worker's actor calling one of them.
  auto others = this_proc().spawn<Counter>("here_others", 1);
  EXPECT_EQ(others.call_one(&Counter::value).get(), 1);
  auto procs = this_host().spawn_procs({{"gpus", 1}});
  auto asker = procs.spawn<Counter>("asker", 0);
  EXPECT_EQ(asker.call_one(&Counter::ask, counters.at(0)).get(), 8);
  procs.stop().get();
  counters.stop().get();
  EXPECT_THROW((void)counters.call_one(&Counter::value), UsageError);
  EXPECT_EQ(others.call_one(&Counter::value).get(), 1);
}

TEST(Mesh, ProcsSpawnedFromAThreadThatEndsLiveUntilStopped) {
  std::optional<ProcMesh> procs;
  pid_t tid = 0;
  std::thread([&] {
    tid = static_cast<pid_t>(::syscall(SYS_gettid));
    procs.emplace(this_host().spawn_procs({{"gpus", 2}}));
  }).join();
  // Gone for good: a parent-death signal tied to that thread has been sent by now.
  const std::string task = "/proc/self/task/" + std::to_string(tid);
  for (int i = 0; i < 3000 && std::filesystem::exists(task); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));  // bounded poll on a condition
  }
  ASSERT_FALSE(std::filesystem::exists(task));
  auto counters = procs->spawn<Counter>("outliving", 7);
  EXPECT_EQ(counters.call(&Counter::value).get().values(), (std::vector<int>{7, 7}));
  procs->stop().get();
}

TEST(Mesh, WorkersInheritNoDescriptorOfTheControllerAndSayWhoTheyAre) {
  // The controller holds descriptors of every kind the library makes: a proc mesh's links and
  // output pipes, a TCP listener, a link over TCP.
  auto first = this_host().spawn_procs({{"gpus", 1}});
  EXPECT_EQ(first.spawn<Counter>("first", 3).call_one(&Counter::value).get(), 3);
  const Address tcp = Runtime::get().proc().serve(Address::parse("tcp://127.0.0.1:0"));
  net::IoThread io;
  LinkInbox inbox;
  auto link = net::Link::connect(io, tcp, inbox.handler(), Runtime::get().link_options());
  // Each of them is close-on-exec, so nothing the program starts inherits them either.
  const auto& before = fds_at_start();  // stdio, and what whoever started this test left open
  for (const auto& fd : open_fds()) {
    if (std::find(before.begin(), before.end(), fd) != before.end()) continue;
    const bool library_kind = fd.find("socket:") != std::string::npos ||
                              fd.find("pipe:") != std::string::npos ||
                              fd.find("anon_inode:") != std::string::npos;
    if (!library_kind) continue;
    const int flags = ::fcntl(std::atoi(fd.c_str()), F_GETFD);
    EXPECT_TRUE(flags >= 0 && (flags & FD_CLOEXEC) != 0) << fd << " is not close-on-exec";
  }

  auto procs = this_host().spawn_procs({{"gpus", 2}});
  auto counters = procs.spawn<Counter>("named", 0);
  const ValueMesh<std::vector<std::string>> inherited = counters.call(&Counter::inherited).get();
  for (const auto& [point, fds] : inherited.items()) {
    std::vector<std::string> extra;
    for (const auto& fd : fds) {
      if (std::atoi(fd.c_str()) > STDERR_FILENO) extra.push_back(fd);
    }
    EXPECT_THAT(extra, ::testing::IsEmpty())
        << "worker " << point.to_string() << " inherited descriptors beyond 0-2";
  }
  // `ps` says which proc each worker is: its command line, and its name (at most 15 bytes).
  const ValueMesh<int> pids = counters.call(&Counter::pid).get();
  for (std::size_t r = 0; r < procs.size(); ++r) {
    const std::string pid = std::to_string(pids.values()[r]);
    std::ifstream cmdline_file("/proc/" + pid + "/cmdline");
    std::string argv0;
    std::getline(cmdline_file, argv0, '\0');
    EXPECT_EQ(argv0, "baton " + procs.proc(r).name);
    std::ifstream comm_file("/proc/" + pid + "/comm");
    std::string comm;
    std::getline(comm_file, comm);
    EXPECT_EQ(comm, ("baton " + procs.proc(r).name).substr(0, 15));
  }
  procs.stop().get();
  first.stop().get();
}

TEST(Failure, ADeadWorkerFailsItsCallsWithAReportAndTheRestKeepsWorking) {
  auto procs = this_host().spawn_procs({{"gpus", 4}});
  auto counters = procs.spawn<Counter>("mortals", 5);

  // A worker that exits: the call in flight fails with what happened and its last words.
  try {
    counters.slice("gpus", 1).call_one(&Counter::die, 3).get();
    FAIL() << "expected SupervisionError";
  } catch (const SupervisionError& e) {
    EXPECT_THAT(e.what(), HasSubstr("exited with status 3"));
    EXPECT_THAT(e.what(), HasSubstr("dying with 3"));
    EXPECT_THAT(e.what(), HasSubstr("rank 1"));
  }
  // Later calls touching it fail at once, by any adverb; slices without it keep working.
  EXPECT_THROW(counters.slice("gpus", 1).call_one(&Counter::value).get(), SupervisionError);
  EXPECT_THROW(counters.call(&Counter::value).get(), SupervisionError);
  EXPECT_EQ(counters.slice("gpus", 2, 4).call(&Counter::value).get().values(),
            (std::vector<int>{5, 5}));

  // A worker killed with SIGKILL while a call waits on it.
  const int pid = counters.slice("gpus", 3).call_one(&Counter::pid).get();
  auto pending = counters.slice("gpus", 3).call_one(&Counter::hang);
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  try {
    pending.get();
    FAIL() << "expected SupervisionError";
  } catch (const SupervisionError& e) {
    EXPECT_THAT(e.what(), HasSubstr("was killed by signal SIGKILL"));
    EXPECT_THAT(e.what(), ::testing::Not(HasSubstr("out-of-memory")));  // the kernel did not
  }
  std::printf(
      "kill to failed future: %.1f ms\n",
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  EXPECT_EQ(counters.slice("gpus", 0).call_one(&Counter::value).get(), 5);
  EXPECT_EQ(counters.slice("gpus", 2).call_one(&Counter::value).get(), 5);
  procs.stop().get();
  // The controller, owner of the proc mesh, heard of both deaths.
  auto events = failures().wait(2);
  ASSERT_EQ(events.size(), 2u);
  std::sort(events.begin(), events.end(),
            [](const MeshFailure& a, const MeshFailure& b) { return a.rank < b.rank; });
  EXPECT_EQ(events[0].rank, 1);
  EXPECT_THAT(events[0].message, HasSubstr("exited with status 3"));
  EXPECT_EQ(events[1].rank, 3);
  EXPECT_THAT(events[1].message, HasSubstr("was killed by signal SIGKILL"));
}

}  // namespace

/// The controller of NoOrphans: starts three workers, prints their pids, and waits to be killed.
[[noreturn]] void run_doomed_controller() {
  auto procs = this_host().spawn_procs({{"gpus", 3}});
  auto counters = procs.spawn<Counter>("doomed", 0);
  std::string line = "pids";
  const ValueMesh<int> pids = counters.call(&Counter::pid).get();
  for (int pid : pids.values()) line += " " + std::to_string(pid);
  std::fprintf(stdout, "%s\n", line.c_str());
  std::fflush(stdout);
  for (;;) ::pause();
}

namespace {

/// What `f` threw, or "" if it returned; a wait past 60 s is a TimeoutError, so never a hang.
template <class F>
std::string failure_of(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST(Failure, AReplyTooBigForOneMessageFailsTheCallSayingWhyNeverAHang) {
  auto procs = this_host().spawn_procs({{"gpus", 2}});
  auto counters = procs.spawn<Counter>("big_repliers", 0);
  const std::size_t too_big = std::size_t{17} << 20;  // over the 16 MiB a message header holds
  const auto timeout = std::chrono::seconds(60);
  const std::string gathered =
      failure_of([&] { (void)counters.call(&Counter::big, too_big).get(timeout); });
  EXPECT_THAT(gathered, HasSubstr("the reply could not be sent"));  // a member sent to directly
  EXPECT_THAT(gathered, HasSubstr("exceeds the limit"));
  const std::string direct =
      failure_of([&] { (void)counters.at(1).call(&Counter::big, too_big).get(timeout); });
  EXPECT_THAT(direct, HasSubstr("could not be sent"));
  EXPECT_THAT(direct, HasSubstr("exceeds the limit"));
  auto stream = counters.stream(&Counter::big, too_big);
  for (int i = 0; i < 2; ++i) {
    EXPECT_THAT(failure_of([&] { (void)stream.next(timeout); }), HasSubstr("exceeds the limit"));
  }
  // The repliers and their links are fine: a reply that fits still arrives.
  EXPECT_EQ(counters.call(&Counter::big, std::size_t{3}).get(timeout).values(),
            (std::vector<std::string>{"xxx", "xxx"}));
  procs.stop().get();

  // Behind a forwarder (ranks 1 and 2 of a tree with two children a node), whose gathered
  // result cannot be sent on: it says so.
  const test_support::HostFanOut fanout(2);
  auto three = this_host().spawn_procs({{"gpus", 3}});
  auto deep = three.spawn<Counter>("deep_repliers", 0);
  const std::string forwarded =
      failure_of([&] { (void)deep.slice("gpus", 1, 3).call(&Counter::big, too_big).get(timeout); });
  EXPECT_THAT(forwarded, HasSubstr("could not be sent on"));
  EXPECT_THAT(forwarded, HasSubstr("exceeds the limit"));
  three.stop().get();
}

TEST(Failure, NoOrphansWhenTheControllerIsKilled) {
  // A controller of its own, in a child process, so the test can SIGKILL it.
  // Its job directory cannot be removed by a controller killed with SIGKILL: keep it in ours.
  std::string tmp = (std::filesystem::temp_directory_path() / "baton-doomed-XXXXXX").string();
  ASSERT_NE(::mkdtemp(tmp.data()), nullptr);
  auto env = test::environment();
  env.emplace_back("BATON_TEST_DOOMED_CONTROLLER=1");
  env.push_back("TMPDIR=" + tmp);
  const test::SelfChild child =
      test::start_self("doomed-controller", std::move(env), STDOUT_FILENO);
  const pid_t controller = child.pid;
  FILE* from = ::fdopen(child.from, "r");
  char buf[256] = {};
  ASSERT_NE(std::fgets(buf, sizeof(buf), from), nullptr) << "the controller said nothing";
  std::fclose(from);
  std::vector<int> pidfds;
  {
    std::istringstream in(buf);
    std::string word;
    in >> word;
    ASSERT_EQ(word, "pids");
    int pid = 0;
    while (in >> pid) {
      const int fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
      ASSERT_GE(fd, 0) << "worker " << pid << " is not running";
      pidfds.push_back(fd);
    }
  }
  ASSERT_EQ(pidfds.size(), 3u);

  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(::kill(controller, SIGKILL), 0);
  ASSERT_EQ(::waitpid(controller, nullptr, 0), controller);
  for (int fd : pidfds) {
    pollfd p{fd, POLLIN, 0};
    EXPECT_EQ(::poll(&p, 1, 10000), 1) << "a worker outlived its controller by 10 s";
    ::close(fd);
  }
  std::filesystem::remove_all(tmp);
  std::printf(
      "controller SIGKILL to every worker gone: %.1f ms\n",
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
}

/// Worker lines as the controller printed them (the runtime's output sink in this binary).
struct Printed {
  std::mutex mu;
  std::vector<OutputLine> lines;
  std::vector<OutputLine> take() {
    std::lock_guard lock(mu);
    return std::exchange(lines, {});
  }
};
Printed& printed() {
  static Printed p;
  return p;
}

std::vector<OutputLine> with_text(const std::vector<OutputLine>& lines, const std::string& text) {
  std::vector<OutputLine> out;
  for (const auto& l : lines) {
    if (l.text.find(text) != std::string::npos) out.push_back(l);
  }
  return out;
}

TEST(Output, WorkerLinesArriveWithTheirRankAndIdenticalOnesOnce) {
  auto procs = this_host().spawn_procs({{"gpus", 4}});
  auto counters = procs.spawn<Counter>("talkers", 0);
  Runtime& rt = Runtime::get();
  rt.set_output_window(std::chrono::seconds(30));  // long enough that flush() decides
  (void)printed().take();

  counters.call(&Counter::say, std::string("checkpoint loaded"), 1).get();
  for (std::size_t r = 0; r < 4; ++r) {
    counters.slice("gpus", r).call_one(&Counter::say, "step done on " + std::to_string(r), 2).get();
  }
  rt.flush_output();
  auto lines = printed().take();
  auto same = with_text(lines, "checkpoint loaded");
  ASSERT_EQ(same.size(), 1u);
  EXPECT_EQ(same[0].ranks, (std::vector<std::size_t>{0, 1, 2, 3}));
  EXPECT_EQ(same[0].stream, 1);
  EXPECT_THAT(same[0].to_string(),
              ::testing::MatchesRegex("\\[procs[0-9]+ 0-3\\] checkpoint loaded \\(x4\\)"));
  auto own = with_text(lines, "step done on");
  ASSERT_EQ(own.size(), 4u);
  for (const auto& l : own) {
    ASSERT_EQ(l.ranks.size(), 1u);
    EXPECT_EQ(l.text, "step done on " + std::to_string(l.ranks[0]));
    EXPECT_EQ(l.stream, 2);
    EXPECT_EQ(l.mesh, same[0].mesh);
  }

  // Aggregation off: every copy is its own line.
  rt.set_output_window(std::chrono::milliseconds(0));
  counters.call(&Counter::say, std::string("unaggregated"), 1).get();
  rt.flush_output();
  EXPECT_EQ(with_text(printed().take(), "unaggregated").size(), 4u);
  rt.set_output_window(std::chrono::milliseconds(100));
  procs.stop().get();
}

}  // namespace
}  // namespace baton

int main(int argc, char** argv) {
  baton::fds_at_start() = baton::open_fds();
  baton::RuntimeOptions options;
  options.output.sink = [](const baton::OutputLine& l) {
    auto& p = baton::printed();
    std::lock_guard lock(p.mu);
    p.lines.push_back(l);
  };
  options.supervise = [](const baton::MeshFailure& f) {
    auto& s = baton::failures();
    {
      std::lock_guard lock(s.mu);
      s.events.push_back(f);
    }
    s.cv.notify_all();
    return true;
  };
  baton::Runtime rt(argc, argv, options);  // a worker serves here and never returns
  if (std::getenv("BATON_TEST_DOOMED_CONTROLLER") != nullptr) baton::run_doomed_controller();
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
