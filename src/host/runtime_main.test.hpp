#pragma once

// The main() of a test binary that spawns procs: the binary is its own worker. Started as a
// worker, the Runtime serves there and never returns; started by CTest, it is the controller
// and runs the tests.

#include <gtest/gtest.h>

#include "baton/host/runtime.hpp"

namespace baton::test_support {

/// What a run of the tests exits with. Skipped: CTest's SKIP_RETURN_CODE (77) when no test
/// failed and some skipped (a device test without its device), so that the run is reported as
/// skipped, not passed; its failures still fail.
enum class Skips { pass, report };

inline int run_tests_in_runtime(int argc, char** argv, Skips skips = Skips::pass) {
  const Runtime rt(argc, argv);  // a worker serves here and never returns
  ::testing::InitGoogleTest(&argc, argv);
  const int rc = RUN_ALL_TESTS();
  if (skips == Skips::report && rc == 0 &&
      ::testing::UnitTest::GetInstance()->skipped_test_count() > 0) {
    return 77;
  }
  return rc;
}

}  // namespace baton::test_support
