// base/temp_dir.h for a test: created on construction (a failure is a test failure).
#pragma once

#include <gtest/gtest.h>

#include "base/temp_dir.h"

namespace kvc::testing {

class TempDir : public kvc::TempDir {
 public:
  TempDir() : kvc::TempDir(made()) {}

 private:
  static kvc::TempDir made() {
    Result<kvc::TempDir> d = kvc::TempDir::create("test");
    if (!d.ok()) {
      ADD_FAILURE() << d.error().message;
      return {};
    }
    return std::move(d).value();
  }
};

}  // namespace kvc::testing
