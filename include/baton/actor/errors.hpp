#pragma once

#include <chrono>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#include "baton/slice/slice.hpp"

namespace baton {

/// A remote endpoint threw: carries the actor that threw and the exception's message.
class ActorError : public std::runtime_error {
 public:
  /// `where`, if given, is the actor's place in a mesh ("rank 2 {gpus: 2}").
  ActorError(std::string actor, std::string endpoint, std::string message, std::string where = {})
      : std::runtime_error(actor + (where.empty() ? "" : " (" + where + ")") + " failed in " +
                           endpoint + ": " + message),
        actor_(std::move(actor)),
        endpoint_(std::move(endpoint)),
        remote_message_(std::move(message)),
        where_(std::move(where)) {}
  /// The same, thrown by the member at `point` (its rank and coordinates) of the mesh it was
  /// called through.
  ActorError(std::string actor, std::string endpoint, std::string message, Point point)
      : ActorError(std::move(actor), std::move(endpoint), std::move(message),
                   "rank " + std::to_string(point.rank) + " " + point.to_string()) {
    point_ = std::move(point);
  }

  const std::string& actor() const { return actor_; }
  /// The actor's rank and coordinates in the mesh it was called through, if it was.
  const std::string& where() const { return where_; }
  const std::string& endpoint() const { return endpoint_; }
  const std::string& remote_message() const { return remote_message_; }
  /// The member's point (rank and coordinates) in the mesh it was called through, if it was.
  const std::optional<Point>& point() const { return point_; }

 private:
  std::string actor_;
  std::string endpoint_;
  std::string remote_message_;
  std::string where_;
  std::optional<Point> point_;
};

/// Thrown by an endpoint to fail its actor, not only the call (A-3 keeps an actor running
/// after an endpoint throws anything else): the caller gets a SupervisionError, the actor stops
/// and its owner hears of the failure, as if it had crashed. A Python endpoint that raises a
/// BaseException that is not an Exception (SystemExit, KeyboardInterrupt) fails it so.
class ActorFailure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
  /// `endpoint` names the endpoint that failed it where the runtime knows that endpoint by
  /// another name (a Python actor's method, run by one C++ endpoint).
  ActorFailure(const std::string& why, std::string endpoint)
      : std::runtime_error(why), endpoint_(std::move(endpoint)) {}
  const std::string& endpoint() const { return endpoint_; }

 private:
  std::string endpoint_;
};

/// The actor that would have answered failed or stopped before it replied (or its process
/// died).
class SupervisionError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
  /// `where`, if given, is the actor's place in a mesh ("rank 2 {gpus: 2}"); what() starts
  /// with it.
  SupervisionError(const std::string& message, std::string where)
      : std::runtime_error(where.empty() ? message : where + ": " + message),
        where_(std::move(where)) {}
  /// The actor's rank and coordinates in the mesh it was called through, if it was.
  const std::string& where() const { return where_; }

 private:
  std::string where_;
};

/// A message could not be delivered; `reason()` says why.
class UndeliverableError : public std::runtime_error {
 public:
  enum class Reason { unknown_actor, actor_stopped, actor_failed, link_lost, timeout };
  /// `where`, if given, is the receiver's place in a mesh ("rank 2 {gpus: 2}"); what() starts
  /// with it.
  UndeliverableError(Reason reason, const std::string& what, std::string where = {})
      : std::runtime_error(where.empty() ? what : where + ": " + what),
        reason_(reason),
        where_(std::move(where)) {}
  Reason reason() const { return reason_; }
  /// The receiver's rank and coordinates in the mesh it was called through, if it was.
  const std::string& where() const { return where_; }

 private:
  Reason reason_;
  std::string where_;
};

/// `Future::get(timeout)` ran out of time; the future stays usable.
class TimeoutError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A wrong use of the API (an undeclared endpoint, a broken future, a stopped proc).
class UsageError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

const char* to_string(UndeliverableError::Reason reason);

}  // namespace baton
