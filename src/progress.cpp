#include "overlay/progress.hpp"

#include <utility>

namespace overlay {
namespace {
ProgressSink& sink() {
  static ProgressSink s;
  return s;
}
}  // namespace

void set_progress_sink(ProgressSink s) { sink() = std::move(s); }

ProgressMeter::ProgressMeter(std::string what, std::uint64_t total)
    : what_(std::move(what)), total_(total), active_(!what_.empty() && static_cast<bool>(sink())) {}

ProgressMeter::~ProgressMeter() {
  if (active_) sink()(what_, done_, total_, true);
}

void ProgressMeter::advance(std::uint64_t bytes) {
  done_ += bytes;
  if (!active_) return;
  auto now = std::chrono::steady_clock::now();
  if (now < next_) return;
  next_ = now + std::chrono::milliseconds(100);
  sink()(what_, done_, total_, false);
}

}  // namespace overlay
