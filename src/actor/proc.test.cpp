// The in-process runtime, run step by step on a ManualExecutor: every ordering and failure
// below is deterministic, with no threads and no sleeps. Invariants A-1..A-5 are in actor.hpp.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "baton/actor/proc.hpp"

namespace baton {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

class Recorder : public Actor {
 public:
  void note(int sender, int seq) { seen_.emplace_back(sender, seq); }
  std::vector<std::pair<int, int>> seen() { return seen_; }
  int fail_if(int x) {
    if (x < 0) throw std::invalid_argument("negative input " + std::to_string(x));
    return x * 2;
  }
  void fail_one_way(int x) { throw std::runtime_error("one-way failure " + std::to_string(x)); }
  static constexpr auto endpoints = baton::endpoints<&Recorder::note, &Recorder::seen,
                                                     &Recorder::fail_if, &Recorder::fail_one_way>();

 private:
  std::vector<std::pair<int, int>> seen_;
};

class Sender : public Actor {
 public:
  explicit Sender(int who) : who_(who) {}
  void blast(const ActorRef<Recorder>& to, int n) {
    for (int i = 0; i < n; ++i) to.send(&Recorder::note, who_, i);
  }
  static constexpr auto endpoints = baton::endpoints<&Sender::blast>();

 private:
  int who_;
};

struct Fixture : ::testing::Test {
  ManualExecutor exec;
  std::vector<SupervisionEvent> unhandled;
  std::vector<TraceEvent> traces;
  std::vector<std::string> trace_text;
  ProcOptions options() {
    ProcOptions o;
    o.name = "test";
    o.max_batch = 1;  // one message per step: the finest interleaving
    o.on_unhandled_failure = [this](const SupervisionEvent& ev) { unhandled.push_back(ev); };
    o.trace = [this](const TraceEvent& ev) {
      if (ev.kind == TraceEvent::Kind::call) {
        trace_text.push_back(ev.sender.name + "->" + ev.receiver.name + ":" +
                             std::string(ev.endpoint));
      }
    };
    return o;
  }
};

TEST_F(Fixture, CallReturnsTheEndpointsResult) {
  Proc proc(options(), exec);
  auto r = proc.spawn<Recorder>("rec");
  auto f = r.call(&Recorder::fail_if, 21);
  EXPECT_FALSE(f.ready());
  exec.run_until_idle();
  ASSERT_TRUE(f.ready());
  EXPECT_EQ(f.get(), 42);
  EXPECT_EQ(r.id().to_string(), "test/rec[0]");
}

TEST_F(Fixture, TraceShowsEachDeliveryWithSenderAndEndpoint) {
  Proc proc(options(), exec);
  auto r = proc.spawn<Recorder>("rec");
  auto s = proc.spawn<Sender>("snd", 1);
  s.send(&Sender::blast, r, 2);
  exec.run_until_idle();
  EXPECT_THAT(trace_text, ElementsAre("client->snd:baton::{anonymous}::Sender::blast",
                                      "snd->rec:baton::{anonymous}::Recorder::note",
                                      "snd->rec:baton::{anonymous}::Recorder::note"));
}

// per-sender FIFO, with two senders interleaved one message at a time.
TEST_F(Fixture, MessagesFromOneSenderArriveInOrder) {
  Proc proc(options(), exec);
  auto r = proc.spawn<Recorder>("rec");
  auto a = proc.spawn<Sender>("a", 1);
  auto b = proc.spawn<Sender>("b", 2);
  a.send(&Sender::blast, r, 50);
  b.send(&Sender::blast, r, 50);
  exec.run_until_idle();
  auto seen = r.call(&Recorder::seen);
  exec.run_until_idle();
  int next[3] = {0, 0, 0};
  for (auto [who, seq] : seen.get()) {
    ASSERT_EQ(seq, next[who]) << "sender " << who << " out of order";
    ++next[who];
  }
  EXPECT_EQ(next[1], 50);
  EXPECT_EQ(next[2], 50);
}

// the caller sees the remote exception; the actor keeps serving.
TEST_F(Fixture, ThrowingEndpointFailsOnlyThatCall) {
  Proc proc(options(), exec);
  auto r = proc.spawn<Recorder>("rec");
  auto bad = r.call(&Recorder::fail_if, -3);
  auto good = r.call(&Recorder::fail_if, 5);
  exec.run_until_idle();
  try {
    bad.get();
    FAIL() << "expected ActorError";
  } catch (const ActorError& e) {
    EXPECT_EQ(e.actor(), "test/rec[0]");
    EXPECT_THAT(e.endpoint(), HasSubstr("Recorder::fail_if"));
    EXPECT_EQ(e.remote_message(), "negative input -3");
    EXPECT_THAT(e.what(), HasSubstr("test/rec[0]"));
  }
  EXPECT_EQ(good.get(), 10);
  EXPECT_TRUE(unhandled.empty());
}

class Parent : public Actor {
 public:
  explicit Parent(bool handle) : handle_(handle) {}
  ActorRef<Recorder> make_child() { return spawn<Recorder>("child"); }
  std::vector<std::string> events() { return events_; }
  bool supervise(const SupervisionEvent& ev) override {
    events_.push_back(ev.to_string());
    return handle_;
  }
  static constexpr auto endpoints = baton::endpoints<&Parent::make_child, &Parent::events>();

 private:
  bool handle_;
  std::vector<std::string> events_;
};

// a one-way throw fails the actor and tells its parent, which handles it.
TEST_F(Fixture, OneWayThrowReachesTheParentsSupervise) {
  Proc proc(options(), exec);
  auto parent = proc.spawn<Parent>("parent", true);
  auto child_f = parent.call(&Parent::make_child);
  exec.run_until_idle();
  ActorRef<Recorder> child = child_f.get();
  EXPECT_EQ(child.id().to_string(), "test/child[0]");
  child.send(&Recorder::fail_one_way, 7);
  exec.run_until_idle();
  auto events = parent.call(&Parent::events);
  auto later = child.call(&Recorder::fail_if, 1);
  exec.run_until_idle();
  ASSERT_EQ(events.get().size(), 1u);
  EXPECT_THAT(events.get()[0], HasSubstr("test/child[0]"));
  EXPECT_THAT(events.get()[0], HasSubstr("one-way failure 7"));
  EXPECT_THROW(later.get(), SupervisionError);  // later calls to the failed actor fail at once
  EXPECT_TRUE(unhandled.empty());
}

// unhandled, the failure climbs to the proc's handler, naming both actors.
TEST_F(Fixture, UnhandledFailureEscalatesToTheProc) {
  Proc proc(options(), exec);
  auto parent = proc.spawn<Parent>("parent", false);
  auto child_f = parent.call(&Parent::make_child);
  exec.run_until_idle();
  child_f.get().send(&Recorder::fail_one_way, 1);
  exec.run_until_idle();
  ASSERT_EQ(unhandled.size(), 1u);
  EXPECT_EQ(unhandled[0].actor.to_string(), "test/parent[0]");
  EXPECT_THAT(unhandled[0].message, HasSubstr("test/child[0]"));
  ASSERT_EQ(unhandled[0].causes.size(), 1u);  // the chain: the child's failure below it
  EXPECT_THAT(unhandled[0].causes[0], HasSubstr("test/child[0]"));
  EXPECT_THAT(unhandled[0].causes[0], HasSubstr("one-way failure 1"));
  EXPECT_THAT(unhandled[0].to_string(), HasSubstr("because test/child[0]"));
  auto after = parent.call(&Parent::events);
  exec.run_until_idle();
  EXPECT_THROW(after.get(), SupervisionError);
}

class Fragile : public Actor {
 public:
  explicit Fragile(int x) {
    if (x < 0) throw std::runtime_error("bad config " + std::to_string(x));
  }
  int ok() { return 1; }
  static constexpr auto endpoints = baton::endpoints<&Fragile::ok>();
};

TEST_F(Fixture, ConstructorThrowIsASupervisionEvent) {
  Proc proc(options(), exec);
  auto f = proc.spawn<Fragile>("fragile", -1);
  auto call = f.call(&Fragile::ok);
  exec.run_until_idle();
  ASSERT_EQ(unhandled.size(), 1u);
  EXPECT_EQ(unhandled[0].actor.to_string(), "test/fragile[0]");
  EXPECT_THAT(unhandled[0].message, HasSubstr("constructor threw: bad config -1"));
  try {
    call.get();
    FAIL() << "expected SupervisionError";
  } catch (const SupervisionError& e) {
    EXPECT_THAT(e.what(), HasSubstr("bad config -1"));
  }
}

TEST_F(Fixture, ActorsCannotBeConstructedDirectly) {
  EXPECT_THROW(Recorder{}, UsageError);
}

class Forwarder : public Actor {
 public:
  void forward(const ActorRef<Recorder>& to) { to.send(&Recorder::note, 9, 9); }
  bool handle_undeliverable(const Undeliverable& u) override {
    returned_.push_back(u);
    return true;
  }
  std::vector<std::string> returned() {
    std::vector<std::string> out;
    for (auto& u : returned_) out.push_back(std::string(to_string(u.reason)) + ": " + u.message);
    return out;
  }
  static constexpr auto endpoints = baton::endpoints<&Forwarder::forward, &Forwarder::returned>();

 private:
  std::vector<Undeliverable> returned_;
};

// to an unknown actor, a call fails with the reason and a one-way send comes back.
TEST_F(Fixture, UnknownActorIsUndeliverableWithTheReason) {
  Proc proc(options(), exec);
  ActorRef<Recorder> ghost(ActorId::parse("test/ghost[0]"));
  auto call = ghost.call(&Recorder::fail_if, 1);
  ASSERT_TRUE(call.ready());  // fails at once: nothing to wait for
  try {
    call.get();
    FAIL() << "expected UndeliverableError";
  } catch (const UndeliverableError& e) {
    EXPECT_EQ(e.reason(), UndeliverableError::Reason::unknown_actor);
    EXPECT_THAT(e.what(), HasSubstr("test/ghost[0]"));
  }
  auto fwd = proc.spawn<Forwarder>("fwd");
  fwd.send(&Forwarder::forward, ghost);
  exec.run_until_idle();
  auto returned = fwd.call(&Forwarder::returned);
  exec.run_until_idle();
  ASSERT_EQ(returned.get().size(), 1u);
  EXPECT_THAT(returned.get()[0], HasSubstr("unknown actor"));
  EXPECT_THAT(returned.get()[0], HasSubstr("test/ghost[0]"));
}

class Slow : public Actor {
 public:
  int value() { return 5; }
  void touch() { ++touched_; }
  int touched() { return touched_; }
  static constexpr auto endpoints = baton::endpoints<&Slow::value, &Slow::touch, &Slow::touched>();

 private:
  int touched_ = 0;
};

class Awaiter : public Actor {
 public:
  // Two awaits in sequence; A-1 says nothing else runs on this actor in between.
  Task<int> sum_twice(ActorRef<Slow> s) {
    log_.push_back("start");
    int a = co_await s.call(&Slow::value);
    log_.push_back("resumed");
    int b = co_await s.call(&Slow::value);
    log_.push_back("done");
    co_return a + b;
  }
  void mark() { log_.push_back("mark"); }
  std::vector<std::string> log() { return log_; }
  Task<void> fails_after_await(ActorRef<Slow> s) {
    co_await s.call(&Slow::value);
    throw std::runtime_error("after await");
  }
  static constexpr auto endpoints = baton::endpoints<&Awaiter::sum_twice, &Awaiter::mark,
                                                     &Awaiter::log, &Awaiter::fails_after_await>();

 private:
  std::vector<std::string> log_;
};

TEST_F(Fixture, CoroutineEndpointHoldsTheActorUntilItEnds) {
  Proc proc(options(), exec);
  auto slow = proc.spawn<Slow>("slow");
  auto aw = proc.spawn<Awaiter>("aw");
  auto sum = aw.call(&Awaiter::sum_twice, slow);
  aw.send(&Awaiter::mark);  // queued behind the coroutine: must run after "done"
  exec.run_until_idle();
  EXPECT_EQ(sum.get(), 10);
  auto log = aw.call(&Awaiter::log);
  exec.run_until_idle();
  EXPECT_THAT(log.get(), ElementsAre("start", "resumed", "done", "mark"));
}

TEST_F(Fixture, CoroutineEndpointExceptionFailsTheCaller) {
  Proc proc(options(), exec);
  auto slow = proc.spawn<Slow>("slow");
  auto aw = proc.spawn<Awaiter>("aw");
  auto f = aw.call(&Awaiter::fails_after_await, slow);
  exec.run_until_idle();
  try {
    f.get();
    FAIL() << "expected ActorError";
  } catch (const ActorError& e) {
    EXPECT_EQ(e.remote_message(), "after await");
    EXPECT_THAT(e.endpoint(), HasSubstr("Awaiter::fails_after_await"));
  }
  auto log = aw.call(&Awaiter::log);  // still serving
  exec.run_until_idle();
  EXPECT_TRUE(log.ready());
}

class PortUser : public Actor {
 public:
  void report(const Port<std::string>& out, int n) {
    for (int i = 0; i < n; ++i) out.send("value " + std::to_string(i));
  }
  void answer(const OncePort<int>& out) { out.send(99); }
  static constexpr auto endpoints = baton::endpoints<&PortUser::report, &PortUser::answer>();
};

TEST_F(Fixture, PortsCarryValuesFromActorsToTheClient) {
  Proc proc(options(), exec);
  auto [port, rx] = proc.open_port<std::string>();
  auto [once, answer] = proc.open_once_port<int>();
  auto u = proc.spawn<PortUser>("user");
  u.send(&PortUser::report, port, 3);
  u.send(&PortUser::answer, once);
  u.send(&PortUser::answer, once);  // a second value on a once-port is undeliverable
  exec.run_until_idle();
  EXPECT_EQ(rx.try_recv(), "value 0");
  EXPECT_EQ(rx.try_recv(), "value 1");
  EXPECT_EQ(rx.try_recv(), "value 2");
  EXPECT_EQ(rx.try_recv(), std::nullopt);
  EXPECT_EQ(answer.get(), 99);
  EXPECT_EQ(unhandled.size(), 1u);  // the undeliverable second answer failed the actor
  if (!unhandled.empty()) {
    EXPECT_THAT(unhandled[0].message, HasSubstr("once-port that already has its value"));
  }
}

class Summer : public Actor {
 public:
  Port<int> inbox() {
    return open_port<int>([this](int v) {
      if (v < 0) throw std::runtime_error("negative value on the port");
      sum_ += v;
      ++count_;
    });
  }
  std::vector<int> totals() { return {sum_, count_}; }
  static constexpr auto endpoints = baton::endpoints<&Summer::inbox, &Summer::totals>();

 private:
  int sum_ = 0;
  int count_ = 0;
};

TEST_F(Fixture, ActorOwnedPortsRunTheirHandlerOnTheActor) {
  Proc proc(options(), exec);
  auto summer = proc.spawn<Summer>("summer");
  auto inbox_f = summer.call(&Summer::inbox);
  exec.run_until_idle();
  Port<int> inbox = inbox_f.get();
  EXPECT_EQ(inbox.id().actor, summer.id());
  // The port travels as bytes and still reaches the actor.
  auto copy = decode<Port<int>>(encode(inbox));
  for (int i = 1; i <= 10; ++i) (i % 2 ? inbox : copy).send(i);
  auto totals = summer.call(&Summer::totals);
  exec.run_until_idle();
  EXPECT_EQ(totals.get(), (std::vector<int>{55, 10}));
  inbox.send(-1);  // a throwing port handler fails the actor
  exec.run_until_idle();
  ASSERT_EQ(unhandled.size(), 1u);
  EXPECT_THAT(unhandled[0].message, HasSubstr("negative value on the port"));
}

class Stoppable : public Actor {
 public:
  explicit Stoppable(Port<std::string> log) : log_(std::move(log)) {}
  void work(int i) { log_.send("work " + std::to_string(i)); }
  void on_stop() override { log_.send("on_stop"); }
  static constexpr auto endpoints = baton::endpoints<&Stoppable::work>();

 private:
  Port<std::string> log_;
};

TEST_F(Fixture, StopDrainsQueuedMessagesThenRunsOnStop) {
  Proc proc(options(), exec);
  auto [port, rx] = proc.open_port<std::string>();
  auto s = proc.spawn<Stoppable>("s", port);
  s.send(&Stoppable::work, 1);
  s.send(&Stoppable::work, 2);
  auto stopped = s.stop();
  auto after = s.call(&Stoppable::work, 3);
  exec.run_until_idle();
  EXPECT_TRUE(stopped.ready());
  EXPECT_EQ(rx.try_recv(), "work 1");
  EXPECT_EQ(rx.try_recv(), "work 2");
  EXPECT_EQ(rx.try_recv(), "on_stop");
  EXPECT_EQ(rx.try_recv(), std::nullopt);
  try {
    after.get();
    FAIL() << "expected UndeliverableError";
  } catch (const UndeliverableError& e) {
    EXPECT_EQ(e.reason(), UndeliverableError::Reason::actor_stopped);
  }
}

class Two : public Actor {
 public:
  int a() { return 1; }
  int b() { return 2; }
  static constexpr auto endpoints = baton::endpoints<&Two::a>();
};

// A function of another signature cannot even compile (static_assert); one with a listed
// signature but not itself listed is caught at run time.
TEST_F(Fixture, UndeclaredEndpointIsAClearError) {
  Proc proc(options(), exec);
  auto t = proc.spawn<Two>("two");
  try {
    (void)t.call(&Two::b);
    FAIL() << "expected UsageError";
  } catch (const UsageError& e) {
    EXPECT_THAT(e.what(), HasSubstr("not listed in its `endpoints`"));
  }
}

TEST_F(Fixture, DuplicateProcNameIsRejected) {
  Proc proc(options(), exec);
  ManualExecutor other;
  EXPECT_THROW(Proc(options(), other), UsageError);
}

TEST_F(Fixture, SpawnNamesAreValidatedAndIndexed) {
  Proc proc(options(), exec);
  EXPECT_THROW(proc.spawn<Recorder>("bad/name"), UsageError);
  auto a = proc.spawn<Recorder>("r");
  auto b = proc.spawn<Recorder>("r");
  EXPECT_EQ(a.id().index, 0u);
  EXPECT_EQ(b.id().index, 1u);
}

}  // namespace
}  // namespace baton
