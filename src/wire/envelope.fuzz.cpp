// libFuzzer target for the frame decoder: any bytes decode or fail with DecodeError; whatever
// decodes re-encodes to a frame that decodes to the same envelope.

#include <cstdint>
#include <cstdlib>
#include <map>
#include <optional>

#include "baton/wire/envelope.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  baton::Envelope env;
  try {
    env = baton::decode_frame(baton::Bytes::copy(data, size));
  } catch (const baton::DecodeError&) {
    return 0;
  }
  const baton::Envelope again =
      baton::decode_frame(baton::Bytes::copy(baton::encode_frame(env).flatten()));
  if (again.seq != env.seq || again.sender != env.sender || again.dest != env.dest ||
      again.headers != env.headers || again.body.head != env.body.head ||
      again.body.parts.size() != env.body.parts.size()) {
    std::abort();
  }
  for (std::size_t i = 0; i < env.body.parts.size(); ++i) {
    if (!(again.body.parts[i] == env.body.parts[i])) std::abort();
  }
  try {
    (void)baton::decode<std::vector<std::string>>(env.body);
  } catch (const baton::DecodeError&) {
  }
  try {
    (void)baton::decode<std::map<int, std::optional<std::string>>>(env.body);
  } catch (const baton::DecodeError&) {
  }
  return 0;
}
