// A fresh folder under the system's temp dir (/tmp/kvcascade-NAME-XXXXXX), removed with
// everything in it on destruction: a helper program's config and log (the demo's Prometheus,
// the router benchmark's nginx), a test's files.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <string>
#include <system_error>
#include <utility>

#include "base/status.h"

namespace kvc {

class TempDir {
 public:
  TempDir() = default;  // no folder
  static Result<TempDir> create(const std::string& name) {
    std::string tmpl =
        (std::filesystem::temp_directory_path() / ("kvcascade-" + name + "-XXXXXX")).string();
    if (::mkdtemp(tmpl.data()) == nullptr) return Error{"cannot create a temporary folder"};
    TempDir d;
    d.path_ = std::move(tmpl);
    return d;
  }
  TempDir(TempDir&& other) noexcept : path_(std::exchange(other.path_, {})) {}
  TempDir& operator=(TempDir&& other) noexcept {
    if (this != &other) {
      TempDir gone(std::move(*this));
      path_ = std::exchange(other.path_, {});
    }
    return *this;
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }

  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }  // PATH/name

 private:
  std::string path_;
};

}  // namespace kvc
