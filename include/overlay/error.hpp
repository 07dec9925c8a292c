#pragma once
// Errors carry their reason as one line of text naming the problem; nothing is swallowed.
#include <stdexcept>
#include <string>

namespace overlay {

// An error the user can act on; what() is a single line.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A failed system call on a path: "<op> <path>: <strerror>".
class DiskError : public Error {
 public:
  DiskError(const std::string& op, const std::string& path, int err);
  int code() const noexcept { return err_; }

 private:
  int err_;
};

// The manifest is malformed or hostile; what() names the offending key.
class ManifestError : public Error {
 public:
  using Error::Error;
};

// Another process held the overlay lock for longer than the allowed wait.
class LockTimeout : public Error {
 public:
  using Error::Error;
};

}  // namespace overlay
