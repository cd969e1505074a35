#pragma once

// Internal: state an upper layer keeps in an object of a lower one (a proc's cast nodes, the
// node's rdma registry), made on first use, one per type, and destroyed with its holder.

#include <memory>
#include <mutex>
#include <typeindex>
#include <unordered_map>

namespace baton::detail {

class Extensions {
 public:
  /// The T of this holder, made on first use.
  template <class T>
  std::shared_ptr<T> get() {
    std::lock_guard lock(mu_);
    auto& slot = by_type_[std::type_index(typeid(T))];
    if (!slot) slot = std::make_shared<T>();
    return std::static_pointer_cast<T>(slot);
  }
  /// Destroys them all (before what they may still use goes).
  void clear() {
    std::unordered_map<std::type_index, std::shared_ptr<void>> gone;
    {
      std::lock_guard lock(mu_);
      gone.swap(by_type_);
    }
  }

 private:
  std::mutex mu_;
  std::unordered_map<std::type_index, std::shared_ptr<void>> by_type_;
};

}  // namespace baton::detail
