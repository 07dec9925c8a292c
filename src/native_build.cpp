#include "overlay/native_build.hpp"

#include <algorithm>
#include <cstdlib>
#include <set>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "overlay/build_changes.hpp"
#include "overlay/build_inputs.hpp"
#include "overlay/build_store.hpp"
#include "overlay/build_trace.hpp"
#include "overlay/build_watch.hpp"
#include "overlay/error.hpp"
#include "overlay/file_ops.hpp"
#include "overlay/json_bytes.hpp"
#include "overlay/lock.hpp"
#include "overlay/manifest.hpp"
#include "overlay/store.hpp"
#include "overlay/traced_build.hpp"
#include "overlay/words.hpp"

namespace overlay {
namespace {

BuildWatch watch_build(Disk& disk, const NativePlan& plan) {
  std::vector<fs::path> dirs = plan.watched_dirs, tracked;
  for (const auto& s : plan.swaps) dirs.push_back(s.target.parent_path()), tracked.push_back(s.target);
  for (const auto& a : plan.artifacts) dirs.push_back(a.parent_path()), tracked.push_back(a);
  std::vector<fs::path> skipped = plan.caches;
  skipped.push_back(plan.overlay);
  skipped.push_back(plan.state_dir);  // the holds and the build store: ours, never a build's
  // A disk trace of this very run grows with every write of ours, the watch's copies included.
  if (const char* trace = std::getenv("OVERLAY_DISK_TRACE"); trace != nullptr && *trace != '\0')
    tracked.push_back(absolute_normal(trace));
  return BuildWatch::start(disk, dirs, tracked, skipped);
}

// What the build left on record, in one more manifest write: what it changed (traced) or its
// untracked outputs and picture (watched), the store's record it was served from.
struct BuildRecord {
  bool traced = false;
  std::vector<BuildChange> changes;
  std::vector<std::string> unobserved;
  std::string untraced;
  std::vector<UntrackedOutput> untracked;
  std::optional<BuildPicture> picture;
  std::string served_from;
  std::string failed;  // the command that failed and how ("" when the build succeeded)
};

// How a failed build ended, for its record: "CMD: exit N" (or the signal, the time-out).
std::string failure_of(const BuildOutcome& out) {
  return out.ok ? std::string() : join_words(out.failed_cmd) + ": " + describe(out.result);
}

void record_build(Disk& disk, const NativePlan& plan, const std::string& id, const BuildRecord& r) {
  OverlayLock lock(plan.overlay, plan.lock_timeout);
  auto m = load_manifest(disk, plan.overlay);
  if (!m) return;
  for (auto& e : m->natives)
    if (e.id == id) {
      e.untracked = r.untracked;
      e.build_picture = r.picture;
      e.build_changes = r.changes;
      e.build_traced = r.traced;
      e.build_unobserved = r.unobserved;
      if (!r.untraced.empty()) e.build_untraced = r.untraced;
      if (!r.served_from.empty()) e.served_from = r.served_from;
      if (!r.failed.empty()) e.build_failed = r.failed;
    }
  // Lost to a power cut, the picture and the store's name cost revert its original mtimes only (it
  // dates now); what the build changed, and an output that may hold patched code, must last.
  bool must_last = !r.failed.empty() || !r.changes.empty() ||
                   std::any_of(r.untracked.begin(), r.untracked.end(),
                               [](const UntrackedOutput& u) { return u.clear_reason.empty(); });
  save_manifest(disk, plan.overlay, *m, must_last ? NameDurable::yes : NameDurable::no);
}

// Where an entry's trace and the bytes its build replaced are kept: inside its backup dir.
struct TraceDirs {
  fs::path dir;     // absolute
  std::string rel;  // relative to the overlay
};
TraceDirs trace_dirs(const NativePlan& plan, const AppliedEntry& entry) {
  std::string rel = std::string(kBackupDirName) + "/" + entry.id + "/build";
  return {plan.overlay / rel, rel};
}

TraceRequest trace_request(const NativePlan& plan, const TraceDirs& dirs, const std::string& prefix) {
  TraceRequest req;
  req.out = dirs.dir / (prefix + "trace.json");
  req.backups = dirs.dir;
  req.backup_prefix = prefix;
  req.skipped = untraced_roots();
  req.skipped.insert(req.skipped.end(), {plan.overlay, plan.state_dir});
  req.skipped.insert(req.skipped.end(), plan.caches.begin(), plan.caches.end());
  for (const auto& s : plan.swaps) req.tracked.push_back(s.target);
  req.tracked.insert(req.tracked.end(), plan.artifacts.begin(), plan.artifacts.end());
  return req;
}

// `next` (a later command's trace) folded into `into`: what an earlier command made is no input
// of a later one, and a path keeps the state it had before the first command that changed it.
void merge_trace(BuildTrace& into, BuildTrace next) {
  std::set<std::string> changed;
  for (const auto& c : into.changes) changed.insert(c.path);
  for (auto& i : next.inputs)
    if (changed.count(i.path) == 0) into.inputs.push_back(std::move(i));
  for (auto& c : next.changes)
    if (changed.insert(c.path).second) into.changes.push_back(std::move(c));
  for (auto& u : next.unobservable)
    if (std::find(into.unobservable.begin(), into.unobservable.end(), u) == into.unobservable.end())
      into.unobservable.push_back(std::move(u));
  if (into.untraced.empty()) into.untraced = next.untraced;
}

// A build description a build system reads: its directory and everything below it are the build's.
bool is_build_description(const std::string& name) {
  static const std::set<std::string> names = {"build.ninja",    "Makefile",       "makefile",    "GNUmakefile",
                                              "CMakeCache.txt", "CMakeLists.txt", "meson.build", "setup.py",
                                              "pyproject.toml", "setup.cfg"};
  return names.count(name) > 0;
}

fs::path real_dir_of(Disk& disk, const fs::path& p) {
  try {
    return disk.real_path(p.parent_path());
  } catch (const Error& e) {
    (void)e;  // not there: as named
    return absolute_normal(p.parent_path());
  }
}

// The install, as far as a build's changes go back at revert: the directories of the targets and
// artifacts, the build's own directory where --build-cwd named it, and each directory holding a
// build description the build looked at, each with everything below it. What a build writes
// elsewhere (a log it appends to, a copy into site-packages) is not put back, only reported.
std::vector<fs::path> install_roots(Disk& disk, const NativePlan& plan, const BuildTrace& trace) {
  std::vector<fs::path> roots;
  for (const auto& s : plan.swaps) roots.push_back(real_dir_of(disk, s.target));
  for (const auto& a : plan.artifacts) roots.push_back(real_dir_of(disk, a));
  for (const auto& w : plan.watched_dirs) roots.push_back(real_dir_of(disk, w / "x"));
  for (const auto& i : trace.inputs)
    if (i.before.type == FileType::regular && is_build_description(fs::path(i.path).filename().string()))
      roots.push_back(fs::path(i.path).parent_path());
  return roots;
}

class TracedBuild {
 public:
  TracedBuild(Disk& disk, const NativePlan& plan, const AppliedEntry& entry, BuildOutcome& out)
      : disk_(disk),
        plan_(plan),
        entry_(entry),
        out_(out),
        dirs_(trace_dirs(plan, entry)),
        store_(disk, plan.state_dir) {}
  void run(WriteHandle& log);

 private:
  Disk& disk_;
  const NativePlan& plan_;
  const AppliedEntry& entry_;
  BuildOutcome& out_;
  TraceDirs dirs_;
  BuildStore store_;
  BuildTrace trace_;

  std::vector<TracedChange> inside_;  // what the build changed (put back by revert), save logs let be

  bool serve(WriteHandle& log);
  void build(WriteHandle& log);
  void split_changes();
  void record(const BuildRecord& r);
  void keep();
  void keep_inside();
  std::vector<fs::path> skipped() const { return trace_request(plan_, dirs_, "").skipped; }
};

// The store's record put in place, when it holds one of this very build: true when served.
bool TracedBuild::serve(WriteHandle& log) {
  if (plan_.rebuild) {
    out_.store_why = "--rebuild";
    return false;
  }
  if (!store_.enabled()) {
    out_.store_why = "OVERLAY_BUILD_STORE_BYTES=0";
    return false;
  }
  out_.store = "miss";
  StoreLookup found = store_.find(plan_, skipped());
  if (!found.hit) {
    out_.store_why = found.miss;
    return false;
  }
  TraceRequest req = trace_request(plan_, dirs_, "s");
  make_dirs(disk_, dirs_.dir, 0700);
  auto journal = disk_.create(fs::path(req.out.string() + ".journal"), 0600, CreateMode::truncate);
  TraceRecorder recorder(disk_, req, journal.get());
  std::string why = store_.serve(*found.hit, entry_.pins, recorder);
  journal->close();
  trace_ = recorder.take();
  if (!why.empty()) {
    out_.store_why = "a record was found but could not be served (" + why + ")";
    out_.store_note = "the build store could not serve this build (" + why + "): built instead";
    return false;
  }
  out_.store = "hit";
  out_.served_from = found.hit->name();
  // What the record's build read, as it found it: what revert compares to say whether the
  // install's next build has anything to redo.
  for (const auto& i : found.hit->inputs) {
    TracedInput t;
    t.path = i.path;
    t.follow = i.follow;
    t.looked = i.looked;
    t.before.type = i.type;
    t.before.size = i.size;
    t.before.mtime_ns = i.mtime_ns;
    t.before.mode = i.mode;
    t.tracked = i.looked == 0;  // a swapped source: the entry's own
    trace_.inputs.push_back(std::move(t));
  }
  try {
    write_file_atomically(disk_, req.out, dump_json_bytes(nlohmann::json(trace_)), 0600, NameDurable::no);
  } catch (const Error& e) {
    spdlog::warn("could not write the served build's trace ({}): revert cannot say whether anything is left to redo",
                 e.what());
  }
  std::string line = "overlay: served from the build store (" + out_.served_from + ", built by entry " +
                     found.hit->entry + "); no command ran\n";
  log.write(line.data(), line.size());
  return true;
}

void TracedBuild::build(WriteHandle& log) {
  for (std::size_t k = 0; k < plan_.build_cmds.size(); ++k) {
    TraceRequest req = trace_request(plan_, dirs_, "c" + std::to_string(k) + "-");
    req.argv = plan_.build_cmds[k];
    auto argv = tracer_argv(req);
    if (!argv) throw Error("no program to trace the build with");  // why_untraceable said otherwise
    RunOptions opts;
    opts.cwd = plan_.build_cwd;
    opts.log = out_.log_error.empty() ? &log : nullptr;  // once torn, the log takes nothing more
    opts.timeout_s = plan_.build_timeout;
    out_.result = run_process(*argv, opts);
    if (!out_.result.log_error.empty() && out_.log_error.empty()) out_.log_error = out_.result.log_error;
    BuildTrace t;
    try {
      t = read_trace(disk_, req.out);
    } catch (const Error& e) {
      // Killed (a timeout, a signal) before it wrote its trace: what it changed is in its journal.
      t.unobservable.push_back(std::string("the build's trace is missing (") + e.what() + ")");
      t.changes = read_journal(disk_, req.out);
    }
    if (!t.exec_error.empty()) out_.result.exec_error = t.exec_error;
    merge_trace(trace_, std::move(t));
    if (!out_.result.ok()) {
      out_.ok = false;
      out_.failed_cmd = plan_.build_cmds[k];
      return;
    }
  }
}

// Every change the build made goes back at revert, wherever it is (a generator pruning a sibling
// of the build dir, an install step copying the library into site-packages): what each path was
// before is on record. Only a log outside the install that the build only appended to is let be
// (a compiler cache's log, a CI's): others append to it too.
void TracedBuild::split_changes() {
  std::vector<fs::path> roots = install_roots(disk_, plan_, trace_);
  for (const auto& c : trace_.changes) {
    bool in_roots = c.tracked || std::any_of(roots.begin(), roots.end(),
                                             [&](const fs::path& r) { return is_within(fs::path(c.path), r); });
    if (!in_roots && c.appended && disk_.info(c.path, Follow::no).type == FileType::regular) continue;
    inside_.push_back(c);
  }
}

void TracedBuild::keep() {
  try {
    keep_inside();
  } catch (const std::exception& e) {
    out_.store_note = std::string("not kept in the build store: ") + e.what();
  }
}

void TracedBuild::keep_inside() {
  std::set<std::string> sources;
  for (const auto& s : plan_.swaps) sources.insert(s.target.string());
  std::vector<BuildInput> inputs;
  std::string why =
      trace_.complete() ? key_inputs(disk_, trace_, dirs_.dir, sources, store_.digests(), inputs) : std::string();
  if (why.empty()) {
    BuildTrace inside = trace_;  // a record holds what revert puts back
    inside.changes = inside_;
    why = store_.keep(plan_, inside, std::move(inputs), entry_.id, entry_.pins);
  }
  if (!why.empty()) out_.store_note = "not kept in the build store: " + why;
}

void TracedBuild::run(WriteHandle& log) {
  bool served = serve(log);
  if (!served) build(log);
  // A build the tracer could not attach to ran unseen: nothing it did is on record.
  if (!trace_.untraced.empty())
    trace_.unobservable.insert(trace_.unobservable.begin(), "it ran untraced: " + trace_.untraced);
  BuildRecord r;
  try {
    if (served)
      inside_ = trace_.changes;  // what the serve changed, all of it its record's
    else
      split_changes();
    if (out_.ok && !served && store_.enabled()) keep();
    r.changes = build_changes_of(disk_, inside_, dirs_.dir, dirs_.rel);
    r.traced = true;
  } catch (const std::exception& e) {
    // What the trace holds could not be made a record: revert reads the journals instead.
    r.changes.clear();
    trace_.unobservable.push_back(std::string("its changes could not be recorded (") + e.what() + ")");
  }
  store_.digests().save();
  out_.unobserved = trace_.unobservable;
  r.untracked = out_.untracked;
  r.unobserved = trace_.unobservable;
  r.served_from = out_.served_from;
  r.failed = failure_of(out_);
  out_.changes = r.changes.size();
  record(r);
}

// What must last (a change to put back, an output that may hold patched code) fails the add-native
// where it cannot be recorded; the rest only costs revert its original mtimes (it dates now).
void TracedBuild::record(const BuildRecord& r) {
  bool must = !r.failed.empty() || !r.changes.empty() ||
              std::any_of(r.untracked.begin(), r.untracked.end(),
                          [](const UntrackedOutput& u) { return u.clear_reason.empty(); });
  try {
    record_build(disk_, plan_, entry_.id, r);
  } catch (const std::exception& e) {
    if (must) throw;
    spdlog::warn("could not record the build's trace ({}): revert will date the restored sources now", e.what());
  }
}

// The build run watched, as where no build can be traced: its untracked outputs judged, its
// picture kept for revert; the store off.
void watched_build(Disk& disk, const NativePlan& plan, const AppliedEntry& entry, WriteHandle& log, BuildOutcome& out) {
  BuildWatch watch = watch_build(disk, plan);
  for (const auto& argv : plan.build_cmds) {
    RunOptions opts;
    opts.cwd = plan.build_cwd;
    opts.log = out.log_error.empty() ? &log : nullptr;
    opts.timeout_s = plan.build_timeout;
    out.result = run_process(argv, opts);
    if (!out.result.log_error.empty() && out.log_error.empty()) out.log_error = out.result.log_error;
    if (!out.result.ok()) {
      out.ok = false;
      out.failed_cmd = argv;
      break;
    }
  }
  out.untracked = watch.finish(disk);
  std::vector<fs::path> changed = plan.artifacts, patched;
  for (const auto& s : plan.swaps) changed.push_back(s.target), patched.push_back(s.target);
  judge_untracked(disk, out.untracked, changed, patched);
  out.watch_off = watch.off_reason();
  BuildRecord r;
  r.untraced = out.untraced;
  r.untracked = out.untracked;
  r.unobserved = watch.unrestorable();
  r.failed = failure_of(out);
  if (out.ok && !watch.after_digest().empty()) r.picture = watch.recorded();
  try {  // the picture only lets revert give back original mtimes: without it, the fresh rule
    record_build(disk, plan, entry.id, r);
  } catch (const std::exception& e) {
    if (!r.untracked.empty() || !r.failed.empty()) throw;
    spdlog::warn("could not record the build's picture ({}): revert will date the restored sources now", e.what());
  }
}

}  // namespace

BuildOutcome run_native_build(Disk& disk, const NativePlan& plan, const AppliedEntry& entry) {
  BuildOutcome out;
  auto log = disk.create(entry.log_path, 0644, CreateMode::truncate);  // through Disk, as every write of ours
  if (const char* off = std::getenv("OVERLAY_BUILD_TRACE"); off != nullptr && std::string(off) == "0")
    out.untraced = "OVERLAY_BUILD_TRACE=0";
  if (out.untraced.empty()) out.untraced = why_untraceable();
  if (out.untraced.empty() && !tracer_argv(TraceRequest{{"true"}, "/", "/", "", {}, {}}))
    out.untraced = "this program cannot start its tracer (no /proc, or a library caller that set none)";
  if (out.untraced.empty()) {
    TracedBuild(disk, plan, entry, out).run(*log);
  } else {
    out.store_why = "the build cannot be traced here: " + out.untraced;
    watched_build(disk, plan, entry, *log, out);
  }
  try {
    log->close();  // the last bytes may fail here (a full disk found at writeback)
  } catch (const Error& e) {
    if (out.log_error.empty()) out.log_error = e.what();
  }
  return out;
}

std::string store_line(const BuildOutcome& b) {
  if (b.store == "hit") return "store: hit (record " + b.served_from + "; no command ran, --rebuild builds)";
  return "store: " + b.store + " (" + b.store_why + ")";
}

nlohmann::json BuildOutcome::to_json(const fs::path& log) const {
  auto or_null = [](const std::string& s) { return s.empty() ? nlohmann::json(nullptr) : nlohmann::json(s); };
  nlohmann::json j = {{"ran", served_from.empty()},
                      {"ok", ok},
                      {"log", log.string()},
                      {"rc", served_from.empty() ? nlohmann::json(result.rc()) : nlohmann::json(nullptr)},
                      {"served_from_store", or_null(served_from)},
                      {"traced", untraced.empty()},
                      {"untraced", or_null(untraced)},
                      {"unobserved", unobserved},
                      {"changes", changes},
                      {"store", {{"state", store}, {"why", or_null(store_why)}, {"record", or_null(served_from)}}},
                      {"untracked_outputs", untracked_json(untracked)}};
  if (!store_note.empty()) j["store_note"] = store_note;
  if (!watch_off.empty()) j["watch_off"] = watch_off;
  if (!log_error.empty()) j["log_error"] = log_error;
  if (!ok) {
    j["failed_cmd"] = failed_cmd;
    j["timed_out"] = result.timed_out;
    j["interrupted"] = result.forwarded_signal != 0;
    if (!result.exec_error.empty()) j["exec_error"] = result.exec_error;
  }
  return j;
}

}  // namespace overlay
