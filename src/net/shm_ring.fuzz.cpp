// libFuzzer target for the reading end of a shared-memory ring (shm_ring.hpp), the one place
// where a peer's process writes straight into our memory. The input is a script of what a
// hostile peer does between our reads: write bytes as a genuine writer would, set the write
// position to any value, scribble on the read position or the flags; and what we read goes
// to the frame decoder, as a link does. It checks, without crashing, that:
//   - a read never returns more than asked, nor more than the ring holds;
//   - while the peer only writes genuinely, we read exactly its bytes, in order;
//   - an impossible write position makes the ring corrupt, and a corrupt ring reads nothing.

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "baton/wire/envelope.hpp"
#include "net/shm_ring.hpp"

namespace {

using namespace baton::net::shm;

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "shm ring fuzz: %s\n", what);
  std::abort();
}

constexpr std::size_t kCapacity = 4096;

struct Cursor {
  const std::uint8_t* data;
  std::size_t size;
  std::uint8_t byte() {
    if (size == 0) return 0;
    --size;
    return *data++;
  }
  std::uint64_t word() {
    std::uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v = v << 8 | byte();
    return v;
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static Region region = Region::create(kCapacity);
  std::memset(region.base, 0, region.size);
  const RegionLayout l = layout(region.base, kCapacity);
  RingEnd writer(l.control[0], l.data[0], kCapacity);
  RingEnd reader(l.control[0], l.data[0], kCapacity);
  Cursor in{data, size};
  std::string written;  // what the genuine writer wrote and we have yet to read
  std::string read_all;
  bool tampered = false;
  while (in.size > 0) {
    switch (in.byte() % 5) {
      case 0: {  // a genuine write
        const std::size_t n = std::min<std::size_t>(in.byte() * 16u, in.size);
        const std::size_t took = writer.write(in.data, n);
        if (took > n) fail("a write took more than it was given");
        written.append(reinterpret_cast<const char*>(in.data), took);
        in.data += n;
        in.size -= n;
        break;
      }
      case 1:  // any write position
        l.control[0]->head.store(in.word());
        tampered = true;
        break;
      case 2:  // scribbles on what is the reader's
        l.control[0]->tail.store(in.word());
        l.control[0]->reader_sleeps.store(static_cast<std::uint32_t>(in.word()));
        l.control[0]->writer_waits.store(static_cast<std::uint32_t>(in.word()));
        break;
      case 3: {  // we read
        std::string buf(in.byte() * 32u, '\0');
        const bool was_corrupt = !reader.corrupt().empty();
        const std::size_t got = reader.read(buf.data(), buf.size());
        if (got > buf.size() || got > kCapacity) fail("a read returned more than possible");
        if (was_corrupt && got != 0) fail("a corrupt ring was read");
        buf.resize(got);
        if (!tampered) {
          if (written.compare(0, got, buf) != 0) fail("read bytes the writer did not write");
          written.erase(0, got);
        }
        read_all += buf;
        (void)reader.sleep_if_empty();
        (void)reader.writer_wants_waking();
        break;
      }
      default:
        if (tampered && l.control[0]->head.load() - reader.position() > kCapacity) {
          (void)reader.readable();
          if (reader.corrupt().empty()) fail("an impossible write position went unnoticed");
        }
        break;
    }
  }
  // What came out of the ring goes to the frame decoder, as a link's reader does.
  try {
    (void)baton::decode_frame(baton::Bytes::copy(read_all), baton::DecodeLimits{});
  } catch (const std::exception&) {
    // Refused, as garbage should be.
  }
  return 0;
}
