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

// Says, at debug level, that a step's failure was dropped, what that costs and why it failed.
void note_ignored(const char* what_it_costs, const char* why) noexcept;

// Runs `step`, whose failure costs only `what_it_costs` (a temp file left for the next run, a
// path matched by its spelling alone, a name a report leaves out), never a claim the tool makes:
// an exception from it is dropped and said at debug level. The one way to ignore an error
// (docs/contributing.md, "Errors"); a bare empty catch is a bug.
template <class Step>
void best_effort(const char* what_it_costs, Step&& step) noexcept {
  try {
    step();
  } catch (const std::exception& e) {
    note_ignored(what_it_costs, e.what());
  } catch (...) {
    note_ignored(what_it_costs, "an exception that is not a std::exception");
  }
}

}  // namespace overlay
