#include "baton/wire/archive.hpp"

#include <cxxabi.h>

#include <cstdlib>
#include <memory>

namespace baton::detail {

void rethrow_decode_failure(const char* type_name) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> demangled(
      abi::__cxa_demangle(type_name, nullptr, nullptr, &status), std::free);
  const std::string name = status == 0 && demangled ? demangled.get() : type_name;
  try {
    throw;
  } catch (const std::exception& e) {
    throw DecodeError("cannot decode " + name + ": " + e.what());
  } catch (...) {
    throw DecodeError("cannot decode " + name);
  }
}

void throw_size_mismatch(std::size_t expected, std::size_t actual) {
  throw DecodeError("expected " + std::to_string(expected) + " bytes of numbers, got " +
                    std::to_string(actual));
}

}  // namespace baton::detail
