// Calls between procs in different processes, over a real unix-socket link. Each test forks a
// worker process (before this process starts any thread) that serves a proc with an actor.

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <future>
#include <mutex>
#include <numeric>
#include <optional>
#include <thread>

#include "actor/proc_state.hpp"
#include "actor/remote_impl.hpp"
#include "baton/actor/proc.hpp"
#include "baton/net/link.hpp"
#include "net/io_thread.hpp"

namespace baton {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;

std::atomic<bool> g_flag{false};  // in the worker process

class Worker : public Actor {
 public:
  int add(int a, int b) { return a + b; }
  std::uint64_t checksum(const Bytes& data) {
    return std::accumulate(
        data.span().begin(), data.span().end(), std::uint64_t{0},
        [](std::uint64_t s, std::byte b) { return s * 31 + std::to_integer<int>(b); });
  }
  int fail(const std::string& why) { throw std::runtime_error(why); }
  void hang() {
    for (;;) ::pause();  // never replies; the test kills this process
  }
  std::string whoami() { return id().to_string(); }
  void bump() { ++hits_; }
  int hits() { return hits_; }
  /// Holds its thread (a busy handler) until another actor of the proc sets the flag.
  bool wait_for_flag() {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!g_flag.load() && std::chrono::steady_clock::now() < until) {
    }
    return g_flag.load();
  }
  void set_flag() { g_flag = true; }
  static constexpr auto endpoints =
      baton::endpoints<&Worker::add, &Worker::checksum, &Worker::fail, &Worker::hang,
                       &Worker::whoami, &Worker::bump, &Worker::hits, &Worker::wait_for_flag,
                       &Worker::set_flag>();

 private:
  int hits_ = 0;
};

std::uint64_t local_checksum(const Bytes& data) {
  std::uint64_t s = 0;
  for (std::byte b : data.span()) s = s * 31 + std::to_integer<int>(b);
  return s;
}

/// A child process serving proc "remote" with one Worker (on a unix socket, or on TCP on the
/// loopback); killed when the test ends.
class RemoteProc {
 public:
  explicit RemoteProc(bool tcp = false, const std::string& secret = {})
      : path_("/tmp/baton-remote-" + std::to_string(::getpid()) + ".sock") {
    int ready[2];
    if (::pipe(ready) != 0) throw std::runtime_error("pipe failed");
    pid_ = ::fork();
    if (pid_ == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the test, even if it crashes
      ::close(ready[0]);
      {
        ProcOptions options{.name = "remote", .threads = 2};
        options.link.secret = secret;
        Proc proc(options);
        const Address bound =
            proc.serve(Address::parse(tcp ? "tcp://127.0.0.1:0" : "unix://" + path_));
        proc.spawn<Worker>("worker");
        proc.spawn<Worker>("other");
        const std::string text = bound.to_string() + "\n";
        if (::write(ready[1], text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
          ::_exit(3);
        }
        for (;;) ::pause();  // serve until killed
      }
    }
    ::close(ready[1]);
    char c = 0;
    while (::read(ready[0], &c, 1) == 1 && c != '\n') address_ += c;
    ::close(ready[0]);
    if (c != '\n') throw std::runtime_error("the remote proc did not start");
  }
  ~RemoteProc() { kill(); }
  void kill() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
      pid_ = -1;
      ::unlink(path_.c_str());  // a killed server cannot remove its socket file
    }
  }
  Address address() const { return Address::parse(address_); }
  /// SIGSTOP: the process keeps its sockets but reads and acknowledges nothing. Returns once
  /// every thread has stopped (a stop takes hold only when a thread of the target next runs).
  void freeze() const {
    ASSERT_EQ(::kill(pid_, SIGSTOP), 0);
    siginfo_t info{};
    ASSERT_EQ(::waitid(P_PID, static_cast<id_t>(pid_), &info, WSTOPPED | WNOWAIT), 0);
  }

 private:
  std::string path_;
  std::string address_;
  pid_t pid_ = -1;
};

// A caller outside actors waits by running the event loop its reply comes in on: that of the
// proc whose link carried the call, which need not be the proc that dials for this process.
TEST(Remote, ACallerOutsideActorsRunsTheLoopOfTheProcThatCarriedItsCall) {
  RemoteProc remote;
  Proc client(ProcOptions{.name = "client", .threads = 1});
  client.connect(ProcId{"remote"}, remote.address());
  // A proc that serves after it is the one that dials from this process.
  Proc home(ProcOptions{.name = "home", .threads = 1});
  const std::string home_path = "/tmp/baton-home-" + std::to_string(::getpid()) + ".sock";
  home.serve(Address::parse("unix://" + home_path));
  auto io_of = [](Proc& p) {
    auto& s = detail::state_of(p);
    std::lock_guard lock(s.mu);
    return s.io.get();
  };
  net::IoThread* io = io_of(client);
  net::IoThread* home_io = io_of(home);
  ASSERT_NE(io, nullptr);
  ASSERT_NE(home_io, nullptr);
  const std::uint64_t before = net::guest_turns(*io);
  const std::uint64_t home_before = net::guest_turns(*home_io);
  ActorRef<Worker> w(ActorId{ProcId{"remote"}, "worker", 0});
  // A reply that comes before its wait needs no turn of a loop, so calls go on until one wait
  // ran one (on a loaded machine the first replies may all come first).
  int calls = 0;
  for (; calls < 2000 && net::guest_turns(*io) == before; ++calls) {
    ASSERT_EQ(w.call(&Worker::add, calls, 1).get(), calls + 1);
  }
  // The waits ran the client's loop, the one that carried the calls, and never the home proc's.
  EXPECT_GT(net::guest_turns(*io), before) << "after " << calls << " calls";
  EXPECT_EQ(net::guest_turns(*home_io), home_before);
  ::unlink(home_path.c_str());
}

// A message is handled on the I/O thread that read it when its actor is idle; one that runs long
// there must not hold up the proc's other actors (the event loop moves to another thread).
TEST(Remote, AHandlerThatRunsLongHoldsUpNoOtherActorOfItsProc) {
  RemoteProc remote;
  Proc local(ProcOptions{.name = "local", .threads = 2});
  local.connect(ProcId{"remote"}, remote.address());
  ActorRef<Worker> worker(ActorId::parse("remote/worker[0]"));
  ActorRef<Worker> other(ActorId::parse("remote/other[0]"));
  ASSERT_EQ(worker.call(&Worker::add, 1, 1).get(), 2);  // both constructed and linked
  ASSERT_EQ(other.call(&Worker::add, 1, 1).get(), 2);
  auto waiting = worker.call(&Worker::wait_for_flag);
  other.call(&Worker::set_flag).get();
  EXPECT_TRUE(waiting.get()) << "the busy handler never saw the other actor's message";
}

TEST(Remote, CallsResultsErrorsAndLargeArgumentsCrossProcesses) {
  RemoteProc remote;  // forked before this process has any thread
  Proc local(ProcOptions{.name = "local", .threads = 2});
  local.connect(ProcId{"remote"}, remote.address());
  ActorRef<Worker> worker(ActorId::parse("remote/worker[0]"));

  EXPECT_EQ(worker.call(&Worker::add, 2, 40).get(), 42);
  EXPECT_EQ(worker.call(&Worker::whoami).get(), "remote/worker[0]");

  std::string big(3 << 20, '\0');
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 7 + 3);
  const Bytes data = Bytes::copy(big);
  EXPECT_EQ(worker.call(&Worker::checksum, data).get(), local_checksum(data));

  try {
    worker.call(&Worker::fail, std::string("remote boom")).get();
    FAIL() << "expected ActorError";
  } catch (const ActorError& e) {
    EXPECT_EQ(e.actor(), "remote/worker[0]");
    EXPECT_EQ(e.remote_message(), "remote boom");
  }
  EXPECT_EQ(worker.call(&Worker::add, 1, 1).get(), 2);  // still serving after the throw

  ActorRef<Worker> ghost(ActorId::parse("remote/ghost[0]"));
  try {
    ghost.call(&Worker::add, 1, 2).get();
    FAIL() << "expected UndeliverableError";
  } catch (const UndeliverableError& e) {
    EXPECT_EQ(e.reason(), UndeliverableError::Reason::unknown_actor);
    EXPECT_THAT(e.what(), HasSubstr("remote/ghost[0]"));
  }
}

TEST(Remote, AKilledProcessFailsPendingAndLaterCallsInsteadOfHanging) {
  RemoteProc remote;
  Proc local(ProcOptions{.name = "local", .threads = 2});
  local.connect(ProcId{"remote"}, remote.address());
  ActorRef<Worker> worker(ActorId::parse("remote/worker[0]"));
  EXPECT_EQ(worker.call(&Worker::add, 1, 2).get(), 3);

  auto pending = worker.call(&Worker::hang);
  remote.kill();
  try {
    pending.get(30s);  // a bound for the test; the failure comes as soon as the link drops
    FAIL() << "expected UndeliverableError";
  } catch (const UndeliverableError& e) {
    EXPECT_EQ(e.reason(), UndeliverableError::Reason::link_lost);
    EXPECT_THAT(e.what(), HasSubstr("link to proc remote lost"));
  }
  auto later = worker.call(&Worker::add, 1, 2);
  ASSERT_TRUE(later.ready());  // no link, no such local proc: fails at once
  EXPECT_THROW(later.get(), UndeliverableError);
}

constexpr std::uint64_t kHello = ~std::uint64_t{0};  // the port a link's first frame names

std::uint64_t endpoint_id_of_bump() {
  return detail::endpoint_for<Worker>(&Worker::bump).id;
}

TEST(Remote, AnUnauthenticatedPeerCannotDeliverAMessage) {
  const std::string secret = net::new_job_secret();
  RemoteProc remote(/*tcp=*/false, secret);
  // A raw client that skips the handshake and sends well-formed calls, one-way and with a reply.
  {
    const std::string path = remote.address().host;
    const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    std::string bytes;
    for (std::uint64_t seq = 0; seq < 3; ++seq) {
      Envelope env;
      env.seq = seq;
      env.sender = ActorId::parse("intruder/client[0]");
      env.dest = PortId{ActorId::parse("remote/worker[0]"), seq == 0 ? kHello : 0};
      env.body = encode(endpoint_id_of_bump(), std::optional<PortId>{});
      bytes += encode_frame(env).flatten();
    }
    (void)::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    char c;
    EXPECT_LE(::recv(fd, &c, 1, MSG_WAITALL), 1);  // the challenge, then the server hangs up
    ::close(fd);
  }
  // A proc holding another job's secret cannot link at all.
  {
    ProcOptions options{.name = "stranger", .threads = 1};
    options.link.secret = net::new_job_secret();
    Proc stranger(options);
    stranger.connect(ProcId{"remote"}, remote.address());
    ActorRef<Worker> worker(ActorId::parse("remote/worker[0]"));
    // Refused during the handshake (or, if the refusal came first, no link to send on).
    auto refused = worker.call(&Worker::hits);
    EXPECT_THROW(refused.get(30s), UndeliverableError);
  }
  // The job's own proc links, and the worker saw nothing of either.
  ProcOptions options{.name = "local", .threads = 2};
  options.link.secret = secret;
  Proc local(options);
  local.connect(ProcId{"remote"}, remote.address());
  ActorRef<Worker> worker(ActorId::parse("remote/worker[0]"));
  EXPECT_EQ(worker.call(&Worker::hits).get(), 0);
  worker.send(&Worker::bump);
  EXPECT_EQ(worker.call(&Worker::hits).get(), 1);
}

// A peer whose call cannot be decoded: the proc closes that link, says why in its own log, and
// the peer hears the reason with the goodbye (on purpose, not a lost link); the proc goes on.
TEST(Remote, AMalformedCallClosesItsLinkTellingThePeerWhyAndTheProcGoesOn) {
  RemoteProc remote;
  net::IoThread io;
  std::mutex mu;
  std::condition_variable cv;
  std::optional<std::pair<net::LinkEnd, std::string>> ended;
  auto raw = net::Link::connect(io, remote.address(),
                                net::LinkHandler{[](Envelope&&) {},
                                                 [&](net::LinkEnd end, const std::string& reason) {
                                                   std::lock_guard lock(mu);
                                                   ended.emplace(end, reason);
                                                   cv.notify_all();
                                                 }});
  Envelope hello;
  hello.sender = ActorId::parse("raw/client[0]");
  hello.dest = PortId{ActorId::parse("remote/proc[0]"), kHello};
  ASSERT_TRUE(raw->send(std::move(hello)));
  Envelope call;
  call.sender = ActorId::parse("raw/client[0]");
  call.dest = PortId{ActorId::parse("remote/worker[0]"), 0};
  call.body.head = std::string("\xff\xff\xff", 3);  // no endpoint id can be read from this
  ASSERT_TRUE(raw->send(std::move(call)));
  {
    std::unique_lock lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, 30s, [&] { return ended.has_value(); }));
    EXPECT_EQ(ended->first, net::LinkEnd::peer_closed);
    EXPECT_THAT(ended->second, HasSubstr("peer closed the link: malformed call"));
  }
  ProcOptions options{.name = "local", .threads = 2};
  Proc local(options);
  local.connect(ProcId{"remote"}, remote.address());
  ActorRef<Worker> worker(ActorId::parse("remote/worker[0]"));
  EXPECT_EQ(worker.call(&Worker::add, 2, 3).get(30s), 5);
}

// A peer that hangs up before it answers (not a proc of this job, or one refusing it): the dial
// backs off and ends at the repair's deadline, and a call sent on it fails with the reason:
// neither a storm of redials nor a wait for ever.
// The link may even close before it is the peer's route (a dialling thread descheduled): the
// test holds the dialling thread there until the link's close handler ran, once; a call then
// sent on the route must still fail, not wait for a close that already happened.
TEST(Remote, ACallOnADialThePeerHangsUpOnFailsWithTheReason) {
  // A loopback listener that hangs up on every connection as soon as it comes, from a thread.
  const int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(listener, 64), 0);
  ASSERT_EQ(::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  std::atomic<int> accepted{0};
  std::thread refuser([listener, &accepted] {
    for (;;) {
      const int fd = ::accept(listener, nullptr, nullptr);
      if (fd < 0) return;  // the test shut the listener down
      ++accepted;
      ::close(fd);
    }
  });
  const Address refusing =
      Address::parse("tcp://127.0.0.1:" + std::to_string(ntohs(addr.sin_port)));
  {
    ProcOptions options{.name = "dialler", .threads = 1};
    options.link.reconnect_for = 300ms;
    Proc local(options);
    auto& router = detail::remote::router_of(*detail::state_of(local).node);
    for (int i = 0; i < 20; ++i) {
      const ProcId peer{"refusing" + std::to_string(i)};
      auto lost = std::make_shared<std::promise<void>>();
      if (i == 0) {
        std::lock_guard lock(router.routes_mu);
        router.dial_hook_for_test = [lost](const std::shared_ptr<net::Link>&) {
          // The close handler runs (and tells on_lost) now, or only once the route is in.
          (void)lost->get_future().wait_for(2s);
        };
      }
      local.connect(peer, refusing, [lost, i](net::LinkEnd, const std::string&) {
        if (i == 0) lost->set_value();
      });
      if (i == 0) {
        std::lock_guard lock(router.routes_mu);
        router.dial_hook_for_test = nullptr;
      }
      ActorRef<Worker> worker(ActorId{peer, "worker", 0});
      auto call = worker.call(&Worker::hits);
      try {
        (void)call.get(30s);
        ADD_FAILURE() << "a call to a proc that hung up returned";
      } catch (const UndeliverableError& e) {
        EXPECT_THAT(e.what(), HasSubstr(peer.name)) << "dial " << i;
        EXPECT_THAT(e.what(), HasSubstr("not restored within 300 ms")) << "dial " << i;
      } catch (const std::exception& e) {
        ADD_FAILURE() << "dial " << i << ": " << e.what();  // a timeout: the call was never failed
      }
    }
  }
  ::shutdown(listener, SHUT_RDWR);
  refuser.join();
  ::close(listener);
  // Redials 5, 10, 20 ... ms apart fit 7 tries into 300 ms; a storm makes thousands.
  EXPECT_LE(accepted.load(), 20 * 10) << "the dials the peer hung up on were made again at once";
}

/// Sends one-way messages and reports what came back.
class Sender : public Actor {
 public:
  explicit Sender(Port<std::string> report) : report_(std::move(report)) {}
  void poke(const ActorRef<Worker>& w) { w.send(&Worker::add, 1, 2); }
  bool handle_undeliverable(const Undeliverable& u) override {
    report_.send(std::string(to_string(u.reason)) + " | " + u.dest.to_string() + " | " + u.message);
    return true;
  }
  static constexpr auto endpoints = baton::endpoints<&Sender::poke>();

 private:
  Port<std::string> report_;
};

TEST(Remote, AOneWayMessageALinkNeverDeliveredComesBackToItsSender) {
  RemoteProc remote(/*tcp=*/true);
  ProcOptions options{.name = "local", .threads = 2};
  options.link.heartbeat = 20ms;
  options.link.dead_after = 200ms;
  Proc local(options);
  local.connect(ProcId{"remote"}, remote.address());
  ActorRef<Worker> worker(ActorId::parse("remote/worker[0]"));
  EXPECT_EQ(worker.call(&Worker::add, 1, 2).get(), 3);

  auto [port, reports] = local.open_port<std::string>();
  auto sender = local.spawn<Sender>("sender", port);
  remote.freeze();  // what we send now is never acknowledged
  sender.call(&Sender::poke, worker).get();
  remote.kill();  // the connection goes, and redialling is refused: the link closes for good
  const std::string back = reports.recv(30s);
  EXPECT_THAT(back, HasSubstr("link lost | remote/worker[0]"));
  EXPECT_THAT(back, HasSubstr("closed for good"));
  EXPECT_THAT(back, HasSubstr("before the peer acknowledged it"));
}

}  // namespace
}  // namespace baton
