#include "overlay/in_flight.hpp"

#include <unistd.h>

#include <cstdlib>
#include <set>

#include <spdlog/spdlog.h>

#include "overlay/error.hpp"
#include "overlay/file_ops.hpp"
#include "overlay/lock.hpp"

namespace overlay {
namespace {

constexpr std::string_view kPrefix = ".overlay-live-";
constexpr std::string_view kTempPrefix = ".overlay-live.tmp-";

bool starts_with(const std::string& s, std::string_view p) { return s.compare(0, p.size(), p) == 0; }

// "<op>.<token>-<pid>" (or an earlier version's "<op>-<pid>") -> {op, pid}; false for a name of
// another shape. The pid stays last, where earlier versions read it: they still see the mark.
bool parse_mark(const std::string& name, LiveOperation& out) {
  if (!starts_with(name, kPrefix)) return false;
  std::string rest = name.substr(kPrefix.size());
  auto dash = rest.rfind('-');
  if (dash == std::string::npos || dash == 0) return false;
  char* end = nullptr;
  long pid = std::strtol(rest.c_str() + dash + 1, &end, 10);
  if (end == rest.c_str() + dash + 1 || *end != '\0' || pid <= 0) return false;
  std::string op = rest.substr(0, dash);
  out = {op.substr(0, op.find('.')), static_cast<pid_t>(pid)};
  return true;
}

// The marks this process holds (their paths), so that its own operation never counts against it.
std::set<std::string>& own_marks() {
  static std::set<std::string> marks;
  return marks;
}

}  // namespace

InFlight::InFlight(Disk& disk, const fs::path& overlay, const std::string& op) : disk_(disk) {
  // A token makes the name this run's alone: the pid is only unique in its PID namespace, and two
  // containers' pid 2 must never take (rename over, then remove) each other's mark.
  std::string name = op + "." + random_hex(4) + "-" + std::to_string(::getpid());
  fs::path temp = overlay / (std::string(kTempPrefix) + name);
  mark_ = overlay / (std::string(kPrefix) + name);
  if (!disk_.make_dir(temp, 0700))
    throw Error("cannot mark " + overlay.string() + " in use: " + temp.string() + " exists already");
  try {
    lock_ = std::make_unique<OverlayLock>(temp, 0, "in-flight mark " + temp.string(), LockOn::directory);
    disk_.rename(temp, mark_);
    own_marks().insert(mark_.string());
  } catch (...) {
    lock_.reset();
    best_effort("a temp file is left beside the mark", [&] { disk_.remove(temp); });
    throw;
  }
}

InFlight::~InFlight() {
  own_marks().erase(mark_.string());
  // Removed before the lock goes: a mark is never seen unlocked while its maker lives.
  try {
    disk_.remove(mark_);
  } catch (const std::exception& e) {
    spdlog::debug("cannot remove in-flight mark {}: {}", mark_.string(), e.what());
  }
}

std::vector<LiveOperation> live_operations(Disk& disk, const fs::path& overlay) {
  std::vector<LiveOperation> live;
  if (disk.info(overlay, Follow::no).type != FileType::directory) return live;
  for (const auto& e : disk.list_dir(overlay)) {
    // A temporary name is its maker's until renamed (a maker killed in between leaves one
    // behind, which holds nothing and is never judged live).
    LiveOperation op;
    if (!parse_mark(e.name, op)) continue;
    fs::path mark = overlay / e.name;
    try {
      OverlayLock probe(mark, 0, "in-flight mark " + mark.string(), LockOn::directory);
    } catch (const LockTimeout&) {
      op.ours = own_marks().count(mark.string()) > 0;
      live.push_back(op);  // its maker runs
      continue;
    } catch (const std::exception&) {
      continue;  // gone meanwhile (its maker ended), or not a directory: nobody holds it
    }
    try {
      disk.remove(mark);  // unlocked: its maker is gone
    } catch (const std::exception& err) {
      spdlog::debug("cannot remove stale in-flight mark {}: {}", mark.string(), err.what());
    }
  }
  return live;
}

std::string describe_live(const std::vector<LiveOperation>& ops) {
  if (ops.empty()) return "";
  return ops.front().op + " in progress, pid " + std::to_string(ops.front().pid);
}

}  // namespace overlay
