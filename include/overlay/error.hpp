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

// The manifest is malformed or hostile; what() names the offending key:
// "manifest: natives[0].sources[1].sha256: expected a 64-digit hex SHA-256".
class ManifestError : public Error {
 public:
  using Error::Error;
  // A problem with the key at `key`, a path relative to the JSON value being read ("" for the
  // value itself); under() names it from an enclosing value as the error rises.
  ManifestError(std::string key, std::string problem);
  ManifestError under(const std::string& outer) const;

 private:
  std::string key_, problem_;
};

// Another process held the overlay lock for longer than the allowed wait.
class LockTimeout : public Error {
 public:
  using Error::Error;
};

}  // namespace overlay
