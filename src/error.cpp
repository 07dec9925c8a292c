#include "overlay/error.hpp"

#include <cstring>

#include <spdlog/spdlog.h>

namespace overlay {

DiskError::DiskError(const std::string& op, const std::string& path, int err)
    : Error(op + " " + path + ": " + std::strerror(err)), err_(err) {}

static std::string joined(const std::string& outer, const std::string& inner) {
  if (inner.empty()) return outer;
  if (outer.empty()) return inner;
  return inner[0] == '[' ? outer + inner : outer + "." + inner;
}

ManifestError::ManifestError(std::string key, std::string problem)
    : Error("manifest: " + (key.empty() ? std::string("top level") : key) + ": " + problem),
      key_(std::move(key)),
      problem_(std::move(problem)) {}

ManifestError ManifestError::under(const std::string& outer) const { return {joined(outer, key_), problem_}; }

void note_ignored(const char* what_it_costs, const char* why) noexcept {
  try {
    spdlog::debug("ignored ({}): {}", what_it_costs, why);
  } catch (...) {
    // spdlog failed to format or write: the note is lost, which is all it costs
  }
}

}  // namespace overlay
