// baton RdmaBuffer ping-pong: two worker procs each own a 64 MiB buffer and exchange them both
// ways, reading the other's buffer and then writing into it, with every byte checked by a
// checksum and the bandwidth of each direction printed. The actor messages only carry the
// small handles; the bytes move through RdmaBuffer (UCX shared memory on one host).

#include <CLI/CLI.hpp>
#include <baton/baton.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

std::uint64_t checksum(const std::byte* p, std::size_t n) {
  std::uint64_t h = 1469598103934665603ULL;
  for (std::size_t i = 0; i < n; ++i) h = (h ^ static_cast<std::uint8_t>(p[i])) * 1099511628211ULL;
  return h;
}

void fill(std::byte* p, std::size_t n, int seed) {
  for (std::size_t i = 0; i < n; ++i) p[i] = static_cast<std::byte>((i * 31 + seed) & 0xff);
}

struct Result {
  std::uint64_t checksum = 0;
  double gbps = 0;
  template <class Ar>
  void serialize(Ar& ar) {
    ar(checksum, gbps);
  }
};

}  // namespace

class Player : public baton::Actor {
 public:
  /// Allocates this player's buffer, filled from `seed`, and hands out its handle.
  baton::RdmaBuffer serve(std::uint64_t size, int seed) {
    mine_ = baton::RdmaBuffer::allocate(size);
    fill(static_cast<std::byte*>(mine_.data()), size, seed);
    scratch_.assign(size, std::byte{0});
    return mine_;
  }
  /// Reads the other player's buffer into local memory.
  baton::Task<Result> pull(baton::RdmaBuffer other) {
    auto t0 = std::chrono::steady_clock::now();
    co_await other.read_into(scratch_.data(), other.size());
    const double rate = gbps(other.size(), t0);
    co_return Result{checksum(scratch_.data(), scratch_.size()), rate};
  }
  /// Writes a pattern from `seed` into the other player's buffer.
  baton::Task<Result> push(baton::RdmaBuffer other, int seed) {
    fill(scratch_.data(), scratch_.size(), seed);
    auto t0 = std::chrono::steady_clock::now();
    co_await other.write_from(scratch_.data(), other.size());
    const double rate = gbps(other.size(), t0);
    co_return Result{checksum(scratch_.data(), scratch_.size()), rate};
  }
  /// The checksum of this player's own buffer, as it is now.
  std::uint64_t own_checksum() {
    return checksum(static_cast<const std::byte*>(mine_.data()), mine_.size());
  }
  static constexpr auto endpoints =
      baton::endpoints<&Player::serve, &Player::pull, &Player::push, &Player::own_checksum>();

 private:
  static double gbps(std::size_t n, std::chrono::steady_clock::time_point t0) {
    std::chrono::duration<double> s = std::chrono::steady_clock::now() - t0;
    return static_cast<double>(n) / s.count() / 1e9;
  }
  baton::RdmaBuffer mine_;
  std::vector<std::byte> scratch_;
};

int main(int argc, char** argv) {
  // --help says what it does; it takes no other arguments.
  CLI::App app{
      "rdma_pingpong: two worker procs read and write each other's 64 MiB buffers "
      "through RdmaBuffer, each byte checked, the bandwidth printed"};
  CLI11_PARSE(app, argc, argv);
  baton::Runtime rt(argc, argv);
  constexpr std::size_t kSize = std::size_t{64} << 20;
  auto procs = baton::this_host().spawn_procs({{"players", 2}});
  auto players = procs.spawn<Player>("players");
  auto a = players.slice("players", 0);
  auto b = players.slice("players", 1);
  baton::RdmaBuffer buf_a = a.call_one(&Player::serve, kSize, 1).get();
  baton::RdmaBuffer buf_b = b.call_one(&Player::serve, kSize, 2).get();

  std::vector<std::byte> expect(kSize);
  auto expected = [&](int seed) {
    fill(expect.data(), kSize, seed);
    return checksum(expect.data(), kSize);
  };
  bool ok = true;
  auto report = [&](const char* what, const Result& r, std::uint64_t want) {
    bool good = r.checksum == want;
    ok = ok && good;
    std::printf("%-30s %6.2f GB/s  checksum %s\n", what, r.gbps, good ? "ok" : "WRONG");
  };
  // Ping: each reads the other's buffer; the first time maps the peer's memory (page faults),
  // the second shows the steady rate.
  for (const char* round : {"cold", "warm"}) {
    std::printf("%s:\n", round);
    report("  players[0] reads players[1]", a.call_one(&Player::pull, buf_b).get(), expected(2));
    report("  players[1] reads players[0]", b.call_one(&Player::pull, buf_a).get(), expected(1));
  }
  // Pong: each writes a new pattern into the other's buffer, which its owner then checks.
  report("  players[0] writes players[1]", a.call_one(&Player::push, buf_b, 3).get(), expected(3));
  report("  players[1] writes players[0]", b.call_one(&Player::push, buf_a, 4).get(), expected(4));
  bool landed = b.call_one(&Player::own_checksum).get() == expected(3) &&
                a.call_one(&Player::own_checksum).get() == expected(4);
  std::printf("writes landed in their owners' memory: %s (backend %s)\n", landed ? "yes" : "NO",
              std::string(baton::to_string(baton::rdma_backend(buf_a, expect.data()))).c_str());
  ok = ok && landed;
  buf_a.drop().get();
  buf_b.drop().get();
  procs.stop().get();
  return ok ? 0 : 1;
}
