#pragma once

// Internal: state an upper layer keeps in an object of a lower one (a proc's cast nodes, the
// node's rdma registry), made on first use, one per type, and destroyed with its holder.

#include <memory>
#include <mutex>
#include <utility>
#include <vector>

namespace baton::detail {

/// One byte per extension type: its address names the type (every layer is linked into the
/// same binary), and comparing addresses is cheaper than hashing a type's name, which a cast
/// would otherwise do at every node it passes.
template <class T>
inline constexpr char kExtensionKey = 0;

class Extensions {
 public:
  /// The T of this holder, made on first use.
  template <class T>
  std::shared_ptr<T> get() {
    const void* key = &kExtensionKey<T>;
    std::lock_guard lock(mu_);
    for (const auto& [k, slot] : slots_) {  // a handful of types per holder
      if (k == key) return std::static_pointer_cast<T>(slot);
    }
    auto made = std::make_shared<T>();
    slots_.emplace_back(key, made);
    return made;
  }
  /// Destroys them all (before what they may still use goes).
  void clear() {
    std::vector<std::pair<const void*, std::shared_ptr<void>>> gone;
    {
      std::lock_guard lock(mu_);
      gone.swap(slots_);
    }
  }

 private:
  std::mutex mu_;
  std::vector<std::pair<const void*, std::shared_ptr<void>>> slots_;
};

}  // namespace baton::detail
