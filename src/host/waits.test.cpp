// A thread outside actors that waits for what comes over links (a reply, a stream's next item,
// a port's next value) runs the event loop it comes in on, instead of sleeping until the loop's
// own thread hands it over: after a get(), that thread stays parked for a while, and a waiter
// that only slept would wait for it to take the loop back.

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <mutex>

#include "actor/proc_state.hpp"
#include "baton/baton.hpp"
#include "net/io_thread.hpp"

namespace baton {
namespace {

using namespace std::chrono_literals;

class Member : public Actor {
 public:
  int rank() { return static_cast<int>(context().proc_rank); }
  void report(const Port<int>& to) { to.send(rank()); }
  static constexpr auto endpoints = baton::endpoints<&Member::rank, &Member::report>();
};

net::IoThread& controller_loop() {
  auto& state = detail::state_of(Runtime::get().proc());
  std::lock_guard lock(state.mu);
  if (state.io == nullptr) throw std::runtime_error("the controller's proc has no event loop");
  return *state.io;
}

// Each round first waits with a get(), which leaves the loop's own thread parked; a wait whose
// values all came before it needs no turn of the loop, so rounds go on until one wait ran one.
constexpr int kRounds = 300;

TEST(Waits, AStreamsWaiterRunsTheLoopItsItemsComeIn) {
  auto procs = this_host().spawn_procs({{"procs", 2}});
  auto mesh = procs.spawn<Member>("streamed");
  net::IoThread& io = controller_loop();
  bool drove = false;
  for (int i = 0; i < kRounds && !drove; ++i) {
    ASSERT_EQ(mesh.call(&Member::rank).get().size(), 2u);
    const std::uint64_t before = net::guest_turns(io);
    auto stream = mesh.stream(&Member::rank);
    int items = 0;
    while (auto item = stream.next(30s)) {
      EXPECT_EQ(item->second, static_cast<int>(item->first.rank));
      ++items;
    }
    ASSERT_EQ(items, 2);
    drove = net::guest_turns(io) > before;
  }
  EXPECT_TRUE(drove) << "no wait for a stream's item ran the event loop in " << kRounds
                     << " rounds";
  procs.stop().get();
}

TEST(Waits, APortReceiversWaiterRunsTheLoopItsValuesComeIn) {
  auto procs = this_host().spawn_procs({{"procs", 2}});
  auto mesh = procs.spawn<Member>("reporting");
  auto [port, receiver] = Runtime::get().proc().open_port<int>();
  net::IoThread& io = controller_loop();
  bool drove = false;
  for (int i = 0; i < kRounds && !drove; ++i) {
    ASSERT_EQ(mesh.call(&Member::rank).get().size(), 2u);
    const std::uint64_t before = net::guest_turns(io);
    mesh.broadcast(&Member::report, port);
    const int a = receiver.recv(30s);  // throws TimeoutError if a value never comes
    const int b = receiver.recv();
    EXPECT_EQ(a + b, 1);  // ranks 0 and 1, in either order
    drove = net::guest_turns(io) > before;
  }
  EXPECT_TRUE(drove) << "no wait for a port's value ran the event loop in " << kRounds << " rounds";
  procs.stop().get();
}

}  // namespace
}  // namespace baton

int main(int argc, char** argv) {
  baton::Runtime rt(argc, argv);  // a worker serves here and never returns
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
