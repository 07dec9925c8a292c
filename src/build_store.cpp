#include "overlay/build_store.hpp"

#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "overlay/copy_pipeline.hpp"
#include "overlay/error.hpp"
#include "overlay/file_ops.hpp"
#include "overlay/hash.hpp"
#include "overlay/json_bytes.hpp"
#include "overlay/lease.hpp"
#include "overlay/pinned.hpp"
#include "overlay/snapshot.hpp"

extern char** environ;

namespace overlay {

using nlohmann::json;

void to_json(json& j, const StoredChange& c) {
  j = {{"path", c.path}, {"type", static_cast<int>(c.type)}, {"mode", c.mode}, {"mtime_ns", c.mtime_ns}};
  if (!c.blob.empty()) j["blob"] = c.blob, j["sha256"] = c.sha256;
  if (!c.target.empty()) j["target"] = c.target;
  if (c.appended) j["appended"] = true;
}
void from_json(const json& j, StoredChange& c) {
  j.at("path").get_to(c.path);
  int type = j.at("type").get<int>();
  if (type < 0 || type > static_cast<int>(FileType::other)) throw Error("build record: bad type");
  c.type = static_cast<FileType>(type);
  j.at("mode").get_to(c.mode), j.at("mtime_ns").get_to(c.mtime_ns);
  c.blob = j.value("blob", "");
  c.sha256 = j.value("sha256", "");
  c.target = j.value("target", "");
  c.appended = j.value("appended", false);
}
void to_json(json& j, const StoredDir& d) { j = {{"path", d.path}, {"tar", d.tar}, {"sha256", d.sha256}}; }
void from_json(const json& j, StoredDir& d) {
  j.at("path").get_to(d.path), j.at("tar").get_to(d.tar), j.at("sha256").get_to(d.sha256);
}
void to_json(json& j, const StoredStamp& s) { j = json::array({s.path, s.mtime_ns}); }
void from_json(const json& j, StoredStamp& s) { j.at(0).get_to(s.path), j.at(1).get_to(s.mtime_ns); }
void to_json(json& j, const StoredBuild& b) {
  j = {{"recipe", b.recipe},   {"inputs_sha256", b.inputs_sha256},
       {"inputs", b.inputs},   {"changes", b.changes},
       {"sources", b.sources}, {"dirs", b.dirs},
       {"entry", b.entry},     {"built_at", b.built_at},
       {"bytes", b.bytes}};
}
void from_json(const json& j, StoredBuild& b) {
  j.at("recipe").get_to(b.recipe), j.at("inputs_sha256").get_to(b.inputs_sha256), j.at("inputs").get_to(b.inputs);
  j.at("changes").get_to(b.changes), j.at("sources").get_to(b.sources), j.at("dirs").get_to(b.dirs);
  j.at("entry").get_to(b.entry), j.at("built_at").get_to(b.built_at), j.at("bytes").get_to(b.bytes);
}

std::string StoredBuild::name() const { return recipe.substr(0, 16) + "/" + inputs_sha256.substr(0, 16); }

namespace {

constexpr const char* kRecordName = "record.json";
constexpr std::size_t kMaxRecordBytes = 256u << 20;

// Variables that reach no compiler's output: a terminal's, a login's, a scheduler's, the rank
// identity an MPI launcher gives each process (never what Open MPI's wrapper compilers read:
// OMPI_CC, OMPI_CFLAGS, OMPI_LDFLAGS … stay in the key); a GPU pinning's set per agent is kept (a
// JIT build may pick its arch from the devices it sees).
bool is_volatile_env(const std::string& name) {
  static const std::set<std::string> names = {"_",
                                              "PWD",
                                              "OLDPWD",
                                              "SHLVL",
                                              "HOSTNAME",
                                              "TERM",
                                              "COLORTERM",
                                              "TERM_PROGRAM",
                                              "TERM_PROGRAM_VERSION",
                                              "DISPLAY",
                                              "TMUX",
                                              "TMUX_PANE",
                                              "STY",
                                              "WINDOW",
                                              "LS_COLORS",
                                              "PS1",
                                              "PS2",
                                              "MAIL",
                                              "COLUMNS",
                                              "LINES",
                                              "INVOCATION_ID",
                                              "JOURNAL_STREAM",
                                              "DBUS_SESSION_BUS_ADDRESS",
                                              "XDG_SESSION_ID",
                                              "XDG_RUNTIME_DIR",
                                              "MAX_JOBS",
                                              "MAKELEVEL",
                                              "OMPI_UNIVERSE_SIZE",
                                              "OMPI_FIRST_RANKS",
                                              "OMPI_NUM_APP_CTX",
                                              "OMPI_APP_CTX_NUM_PROCS",
                                              "OMPI_FILE_LOCATION"};
  static const std::vector<std::string> prefixes = {"SSH_",     "PMI_",   "PMIX_", "OMPI_COMM_WORLD_",
                                                    "OVERLAY_", "GTEST_", "CTEST_"};
  if (names.count(name) > 0 || is_engine_variable(name)) return true;
  return std::any_of(prefixes.begin(), prefixes.end(), [&](const std::string& p) { return name.rfind(p, 0) == 0; });
}

// MAKEFLAGS and MFLAGS may carry variable overrides (CFLAGS=...): kept in the recipe, less the
// words that only say how many jobs run.
std::string make_flags_key(const std::string& value) {
  std::istringstream words(value);
  std::string out;
  for (std::string w; words >> w;)
    if (w.rfind("-j", 0) != 0 && w.rfind("--jobserver", 0) != 0 && w.rfind("--jobs", 0) != 0) out += w + ' ';
  return out;
}

timespec to_timespec(std::int64_t ns) {
  return {static_cast<time_t>(ns / 1000000000LL), static_cast<long>(ns % 1000000000LL)};
}

double store_clock_seconds() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

// Where serve writes `path` (and keep reads it): a tracked path in the directory add-native
// pinned for it, proven the same inode (pinned.hpp); any other in its parent opened with no
// symlink followed anywhere on its path. Throws where neither stands: whoever can swap a
// directory on the path cannot choose where we write.
PinnedPlace place_for(Disk& disk, const std::string& path, const std::map<std::string, PinnedDir>& pins) {
  if (auto p = pins.find(path); p != pins.end()) return open_pinned(disk, path, p->second);
  PinnedPlace pl;
  pl.dir = disk.open_dir(At(fs::path(path).parent_path()));
  pl.path = path;
  return pl;
}

bool below_any(const fs::path& p, const std::vector<fs::path>& dirs) {
  return std::any_of(dirs.begin(), dirs.end(), [&](const fs::path& d) { return is_within(p, d); });
}

}  // namespace

std::string machine_key(Disk& disk) {
  std::string key;
  utsname u{};
  if (::uname(&u) == 0)
    key += std::string("machine ") + u.machine + "\nkernel " + u.sysname + ' ' + u.release + ' ' + u.version + '\n';
  auto lines_of = [&](const fs::path& p, const std::vector<std::string>& starts) {
    try {
      std::istringstream in(read_small_file(disk, p, 4u << 20));
      std::set<std::string> seen;
      for (std::string l; std::getline(in, l);)
        for (const auto& s : starts)
          if (l.rfind(s, 0) == 0 && seen.insert(s).second) key += l + '\n';
    } catch (const Error& e) {
      (void)e;  // not there on this machine: nothing of it to key
    }
  };
  lines_of("/proc/cpuinfo", {"model name", "flags", "CPU implementer", "CPU part", "Features"});
  for (const fs::path& root : {fs::path("/proc/driver/nvidia/gpus"), fs::path("/sys/class/kfd/kfd/topology/nodes")}) {
    std::vector<std::string> names;
    try {
      for (const auto& e : disk.list_dir(root)) names.push_back(e.name);
    } catch (const Error& e) {
      (void)e;  // no such GPUs here
      continue;
    }
    std::sort(names.begin(), names.end());
    for (const auto& n : names)
      lines_of(root / n / (root.filename() == "gpus" ? "information" : "name"), {"Model", ""});
  }
  return key;
}

std::string build_recipe(Disk& disk, const NativePlan& plan) {
  static const std::string host = machine_key(disk);
  std::string t = "overlay build recipe 3\ncwd " + plan.build_cwd.string() + '\n' + host;
  for (const auto& argv : plan.build_cmds) {
    t += "cmd";
    for (const auto& a : argv) t += '\0' + a;
    t += '\n';
  }
  for (const auto& s : plan.swaps)
    t += "swap " + s.target.string() + '\0' + to_string(s.kind) + '\0' + s.content_sha256 + '\n';
  for (const auto& a : plan.artifacts) t += "artifact " + a.string() + '\n';
  for (const auto& c : plan.caches) t += "cache " + c.string() + '\n';
  std::vector<std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string kv(*e), name = kv.substr(0, kv.find('='));
    if (name == "MAKEFLAGS" || name == "MFLAGS") {
      std::string key = make_flags_key(kv.substr(name.size() + 1));
      if (key.empty()) continue;  // jobs only: as if unset
      kv = name + '=' + key;
    }
    if (!is_volatile_env(name)) env.push_back(kv);
  }
  std::sort(env.begin(), env.end());
  for (const auto& kv : env) t += "env " + kv + '\n';
  return sha256_hex(t);
}

BuildStore::BuildStore(Disk& disk, const fs::path& state_dir)
    : disk_(disk), root_(state_dir / kBuildStoreDirName), digests_(disk, state_dir / "digests.json") {
  if (const char* v = std::getenv("OVERLAY_BUILD_STORE_BYTES"); v != nullptr && *v != '\0') {
    char* end = nullptr;
    unsigned long long n = std::strtoull(v, &end, 10);
    if (end != nullptr && *end == '\0') cap_ = n;
  }
}

StoreLookup BuildStore::find(const NativePlan& plan, const std::vector<fs::path>& skipped) {
  StoreLookup out;
  fs::path dir = root_ / build_recipe(disk_, plan);
  if (disk_.info(dir, Follow::no).type != FileType::directory) {
    out.miss = "no build of these patched sources, commands and environment is kept";
    return out;
  }
  double newest = -1;
  std::vector<DirEntry> records;
  try {
    records = disk_.list_dir(dir);
  } catch (const Error& e) {
    out.miss = std::string("the store cannot be read (") + e.what() + ")";
    return out;
  }
  for (const auto& e : records) {
    fs::path rec = dir / e.name / kRecordName;
    FileInfo ri = disk_.info(rec, Follow::no);
    if (ri.type != FileType::regular || ri.uid != ::geteuid()) continue;  // another user's is never used
    StoredBuild b;
    try {
      b = parse_json_bytes(read_small_file(disk_, rec, kMaxRecordBytes)).get<StoredBuild>();
    } catch (const std::exception& err) {
      (void)err;  // unreadable (torn by a power cut): a miss
      continue;
    }
    b.where = dir / e.name;
    std::string differs = first_difference(disk_, b.inputs, digests_, skipped);
    if (differs.empty() && (!out.hit || b.built_at > out.hit->built_at)) out.hit = std::move(b);
    if (!differs.empty() && b.built_at > newest) {
      newest = b.built_at;
      out.miss = differs;
    }
  }
  if (out.hit) out.miss.clear();
  if (!out.hit && out.miss.empty()) out.miss = "no whole record of this build is kept";
  return out;
}

namespace {

// A file of a record, copied beside its place and proven before anything goes in.
struct Staged {
  const StoredChange* change;
  PinnedPlace place;
  std::string tmp;  // the copy's name in place.dir ("" where its directory is made first)
};

void drop(Disk& disk, std::vector<Staged>& staged) {
  for (const auto& s : staged)
    if (!s.tmp.empty()) try {
        disk.remove(At(*s.place.dir, s.tmp));
      } catch (const Error& e) {
        (void)e;  // gone already: nothing to drop
      }
  staged.clear();
}

// A stored copy that does not hash to its record: the record is torn (a power cut, a bit flip).
struct TornRecord : Error {
  using Error::Error;
};

constexpr std::size_t kMaxAppendedLog = std::size_t{256} << 20;

// What a log `c` holds once a serve has appended to it: its bytes at `place` now, then those the
// build appended, written to `tmp` with the mode it has now (throws TornRecord where the stored
// bytes are not what was recorded, and Error where no regular file is there to append to).
void stage_append(Disk& disk, const fs::path& record, const StoredChange& c, const At& place, const At& tmp) {
  std::string added = read_small_file(disk, record / c.blob, kMaxAppendedLog);
  if (sha256_hex(added) != c.sha256) throw TornRecord("the stored lines of " + c.path + " are not what was recorded");
  FileInfo now = disk.info(place, Follow::no);
  if (now.type != FileType::regular) throw Error(c.path + ", a log the build appended to, is not a file now");
  std::string bytes = read_small_file(disk, c.path, kMaxAppendedLog) + added;
  auto out = disk.create(tmp, now.mode & 07777, CreateMode::exclusive);
  out->write(bytes.data(), bytes.size());
  out->sync();
  out->close();
}

// The copy of `c` beside `place`, proven against its digest (throws TornRecord where it is not).
void stage_copy(Disk& disk, const fs::path& record, const StoredChange& c, const At& tmp) {
  Copied got = copy_file_hashing(disk, At(record / c.blob), tmp, c.mode, Durable::yes);
  if (got.sha256 != c.sha256)
    throw TornRecord("the stored copy of " + c.path + " is not what was recorded (sha256 " + got.sha256.substr(0, 16) +
                     ")");
}

}  // namespace

std::string BuildStore::serve(const StoredBuild& b, const std::map<std::string, PinnedDir>& pins,
                              TraceRecorder& recorder) {
  std::vector<Staged> staged;
  try {
    for (const auto& c : b.changes) {
      if (c.type != FileType::regular) continue;
      FileInfo parent = disk_.info(fs::path(c.path).parent_path(), Follow::no);
      if (parent.type != FileType::directory) {  // made by the build: proven now, copied once it is made
        if (c.appended) throw Error(c.path + ", a log the build appended to, is not there now");
        if (hash_file(disk_, At(b.where / c.blob)) != c.sha256)
          throw TornRecord("the stored copy of " + c.path + " is not what was recorded");
        staged.push_back({&c, {}, ""});
        continue;
      }
      PinnedPlace place = place_for(disk_, c.path, pins);
      std::string tmp = sibling_temp_path(c.path, "overlay-new").filename().string();
      staged.push_back({&c, std::move(place), tmp});
      if (c.appended)
        stage_append(disk_, b.where, c, staged.back().place.at(), At(*staged.back().place.dir, tmp));
      else
        stage_copy(disk_, b.where, c, At(*staged.back().place.dir, tmp));
    }
  } catch (const TornRecord& e) {
    drop(disk_, staged);
    forget(b);  // never found again: the build that runs instead keeps a whole one
    return e.what();
  } catch (const std::exception& e) {
    drop(disk_, staged);
    return e.what();
  }
  // Nothing goes in whose place the recorder could not keep first: revert could not put it back.
  const std::size_t failed = recorder.failures();
  auto note = [&](const std::string& path, Change how) {
    recorder.changing(path, how, Follow::no);
    if (recorder.failures() != failed) throw Error("what " + path + " holds could not be kept before serving over it");
  };
  try {
    // Every copy proven: directories the build made, then each file by one rename, symlinks, and
    // what the build removed (deepest first), each told to the recorder before it changes.
    for (const auto& c : b.changes)
      if (c.type == FileType::directory && disk_.info(c.path, Follow::no).type != FileType::directory) {
        note(c.path, Change::create);
        disk_.make_dir(At(*disk_.open_dir(At(fs::path(c.path).parent_path())), fs::path(c.path).filename().string()),
                       c.mode);
      }
    for (auto& s : staged) {
      note(s.change->path, Change::rename_to);
      if (s.tmp.empty()) {
        s.place = place_for(disk_, s.change->path, pins);
        s.tmp = sibling_temp_path(s.change->path, "overlay-new").filename().string();
        stage_copy(disk_, b.where, *s.change, At(*s.place.dir, s.tmp));
      }
      disk_.rename(At(*s.place.dir, s.tmp), s.place.at());
      s.tmp.clear();
      if (!s.change->appended) disk_.set_mtime(s.place.at(), to_timespec(s.change->mtime_ns));
    }
    for (const auto& c : b.changes)
      if (c.type == FileType::symlink) {
        PinnedPlace pl = place_for(disk_, c.path, pins);
        note(c.path, Change::rename_to);
        if (disk_.info(pl.at(), Follow::no).exists()) disk_.remove(pl.at());  // a directory only where empty
        disk_.make_symlink(c.target, pl.at());
      }
    // What the build removed, deepest first: each file is kept by the recorder before its directory goes.
    std::vector<const StoredChange*> removed;
    for (const auto& c : b.changes)
      if (c.type == FileType::none) removed.push_back(&c);
    std::sort(removed.begin(), removed.end(),
              [](const StoredChange* x, const StoredChange* y) { return x->path > y->path; });
    for (const StoredChange* c : removed)
      if (disk_.info(c->path, Follow::no).exists()) {
        PinnedPlace pl = place_for(disk_, c->path, pins);
        note(c->path, Change::remove);
        disk_.remove(pl.at());  // a directory only where empty: what else it holds is no build's to remove
      }
    for (const auto& d : b.dirs) {
      PinnedPlace pl = place_for(disk_, d.path, pins);
      At tmp(*pl.dir, sibling_temp_path(d.path, "overlay-new").filename().string());
      disk_.make_dir(tmp, 0700);
      extract_tar(disk_, b.where / d.tar, tmp, fs::path(d.path).filename().string(), d.sha256);
      disk_.sync_filesystem(tmp);
      if (disk_.info(pl.at(), Follow::no).exists()) {
        At trash = pl.at().sibling(sibling_temp_path(d.path, "overlay-trash").filename().string());
        disk_.rename(pl.at(), trash);
        remove_tree(disk_, trash);
      }
      disk_.rename(tmp, pl.at());
    }
    for (const auto& c : b.changes)
      if (c.type == FileType::directory) disk_.set_mtime(c.path, to_timespec(c.mtime_ns));
    for (const auto& src : b.sources) {
      PinnedPlace pl = place_for(disk_, src.path, pins);
      if (disk_.info(pl.at(), Follow::no).type == FileType::regular)
        disk_.set_mtime(pl.at(), to_timespec(src.mtime_ns));
    }
  } catch (const std::exception& e) {
    drop(disk_, staged);
    return std::string("serving stopped midway: ") + e.what();
  }
  try {  // least recently used: its record's mtime
    timespec now{};
    ::clock_gettime(CLOCK_REALTIME, &now);
    disk_.set_mtime(At(b.where / kRecordName), now);
  } catch (const Error& e) {
    (void)e;  // the record only ages sooner
  }
  return "";
}

namespace {

// What keep takes of one changed path, read where serve would put it back.
struct Taken {
  StoredChange change;
  PinnedPlace place;
  FileInfo info;
  std::uint64_t appended_from = 0;  // a log's size before the build: where what it appended starts
};

// The bytes a log holds from `from` on (what the build appended), kept as `blob`: their digest.
std::string keep_appended(Disk& disk, const Taken& k, const fs::path& blob) {
  std::string bytes = read_small_file(disk, k.change.path, kMaxAppendedLog);
  if (bytes.size() < k.appended_from) throw Error(k.change.path + " changed while it was kept");
  bytes.erase(0, k.appended_from);
  auto out = disk.create(blob, 0600, CreateMode::exclusive);
  out->write(bytes.data(), bytes.size());
  out->close();
  return sha256_hex(bytes);
}

}  // namespace

std::string BuildStore::keep(const NativePlan& plan, const BuildTrace& trace, std::vector<BuildInput> inputs,
                             const std::string& entry, const std::map<std::string, PinnedDir>& pins) {
  if (!enabled()) return "the build store is off (OVERLAY_BUILD_STORE_BYTES=0)";
  if (!trace.complete())
    return "what the build read is not fully known (" +
           (trace.untraced.empty() ? trace.unobservable.front() : trace.untraced) + ")";
  std::vector<Taken> taken;
  std::uint64_t size = 0;
  try {
    for (const auto& t : trace.changes) {
      if (below_any(t.path, plan.caches)) continue;  // in its cache's tar
      if (!disk_.info(t.path, Follow::no).exists()) {
        if (t.before.type != FileType::none) {  // removed
          StoredChange gone;
          gone.path = t.path;
          taken.push_back({gone, {}, {}, 0});
        }
        continue;  // else a temporary: made and removed
      }
      Taken k{{}, place_for(disk_, t.path, pins), {}, 0};
      k.info = disk_.info(k.place.at(), Follow::no);
      k.change.path = t.path;
      k.change.type = k.info.type;
      if (k.info.type == FileType::other) return "the build left a special file at " + t.path;
      k.change.mode = k.info.mode;
      k.change.mtime_ns = ns_of(k.info.mtime);
      k.change.appended = t.appended && t.before.type == FileType::regular && k.info.type == FileType::regular &&
                          k.info.size >= t.before.size;
      k.appended_from = t.before.size;
      if (k.info.type == FileType::symlink) k.change.target = disk_.read_link(k.place.at());
      if (k.info.type == FileType::regular) size += k.info.size;
      taken.push_back(std::move(k));
    }
  } catch (const Error& e) {
    return std::string("an output's directory is not where the build left it (") + e.what() + ")";
  }
  for (const auto& a : plan.artifacts)
    if (std::none_of(taken.begin(), taken.end(), [&](const Taken& k) { return k.change.path == a.string(); }) &&
        !below_any(a, plan.caches))
      return "artifact " + a.string() + " was not written by the build";
  if (size > cap_)
    return "its outputs (" + std::to_string(size) + " bytes) are more than the store holds (OVERLAY_BUILD_STORE_BYTES)";
  StoredBuild b;
  b.recipe = build_recipe(disk_, plan);
  b.inputs = std::move(inputs);
  b.inputs_sha256 = inputs_digest(b.inputs);
  b.entry = entry;
  b.built_at = store_clock_seconds();
  for (const auto& s : plan.swaps)
    if (s.kind != SwapKind::remove) {
      FileInfo fi = disk_.info(s.target, Follow::no);
      if (fi.type == FileType::regular) b.sources.push_back({s.target.string(), ns_of(fi.mtime)});
    }
  // Written under a temporary name, renamed into place whole.
  make_dirs(disk_, root_, 0700);
  fs::path tmp = root_ / (".tmp-" + random_hex(8));
  fs::path final_dir = root_ / b.recipe / b.inputs_sha256;
  try {
    disk_.make_dir(tmp, 0700);
    for (std::size_t k = 0; k < taken.size(); ++k) {
      StoredChange c = taken[k].change;
      if (c.type == FileType::regular) {
        c.blob = "f" + std::to_string(k);
        c.sha256 = c.appended
                       ? keep_appended(disk_, taken[k], tmp / c.blob)
                       : copy_file_hashing(disk_, taken[k].place.at(), At(tmp / c.blob), 0600, Durable::no).sha256;
        if (stamp_of(disk_.info(taken[k].place.at(), Follow::no)) != stamp_of(taken[k].info))
          throw Error(c.path + " changed while it was kept");
        b.bytes += taken[k].info.size;
      }
      b.changes.push_back(std::move(c));
    }
    for (std::size_t k = 0; k < plan.caches.size(); ++k) {
      PinnedPlace pl = place_for(disk_, plan.caches[k].string(), pins);
      if (disk_.info(pl.at(), Follow::no).type != FileType::directory) continue;
      StoredDir d{plan.caches[k].string(), "d" + std::to_string(k) + ".tar", ""};
      d.sha256 = snapshot_dir_to_tar(disk_, pl.at(), tmp / d.tar);
      b.bytes += disk_.info(tmp / d.tar, Follow::no).size;
      b.dirs.push_back(std::move(d));
    }
    // Nothing here is fsynced: a record is proven when it is used (it parses, and every copy
    // hashes to what it says), so what a power cut tears is a miss, never a wrong output.
    auto out = disk_.create(tmp / kRecordName, 0600, CreateMode::exclusive);
    std::string text = dump_json_bytes(json(b));
    out->write(text.data(), text.size());
    out->close();
    disk_.make_dir(At(final_dir.parent_path()), 0700);  // not durable either: a lost name is a miss
    if (disk_.info(final_dir, Follow::no).exists()) {   // the same build kept before (or --rebuild): the newer wins
      fs::path old = root_ / (".old-" + random_hex(8));
      disk_.rename(At(final_dir), At(old));
      remove_tree(disk_, At(old));
    }
    disk_.rename(At(tmp), At(final_dir));
  } catch (const std::exception& e) {
    try {
      remove_tree(disk_, At(tmp));
    } catch (const Error& gone) {
      (void)gone;  // swept an hour later by evict()
    }
    return e.what();
  }
  try {
    evict();
  } catch (const Error& e) {
    (void)e;  // kept; the store is over its cap until the next keep evicts
  }
  return "";
}

void BuildStore::forget(const StoredBuild& b) {
  try {
    fs::path gone = root_ / (".old-" + random_hex(8));
    disk_.rename(At(b.where), At(gone));  // one rename: a finder never sees half a record
    remove_tree(disk_, At(gone));
  } catch (const Error& e) {
    (void)e;  // still there: found again, refused again at its first bad copy
  }
}

void BuildStore::evict() {
  struct Rec {
    fs::path dir;
    std::int64_t used = 0;
    std::uint64_t bytes = 0;
  };
  std::vector<Rec> recs;
  std::uint64_t total = 0;
  for (const auto& r : disk_.list_dir(root_)) {
    fs::path rdir = root_ / r.name;
    if (r.name.rfind(".tmp-", 0) == 0 || r.name.rfind(".old-", 0) == 0) {
      // a keep killed midway: swept once an hour old (a live keep renames its own within seconds)
      FileInfo fi = disk_.info(rdir, Follow::no);
      if (fi.exists() && fi.mtime.tv_sec + 3600 < ::time(nullptr)) remove_tree(disk_, At(rdir));
      continue;
    }
    if (r.type != FileType::directory && r.type != FileType::none) continue;
    for (const auto& e : disk_.list_dir(rdir)) {
      fs::path rec = rdir / e.name / kRecordName;
      FileInfo ri = disk_.info(rec, Follow::no);
      if (ri.type != FileType::regular) continue;
      std::uint64_t bytes = ri.size;
      try {
        bytes += parse_json_bytes(read_small_file(disk_, rec, kMaxRecordBytes)).at("bytes").get<std::uint64_t>();
      } catch (const std::exception& torn) {
        (void)torn;  // a torn record counts for its record file only: it goes first anyway (never served)
      }
      recs.push_back(
          {rdir / e.name, static_cast<std::int64_t>(ri.mtime.tv_sec) * 1000000000LL + ri.mtime.tv_nsec, bytes});
      total += bytes;
    }
  }
  std::sort(recs.begin(), recs.end(), [](const Rec& a, const Rec& b) { return a.used < b.used; });
  for (std::size_t i = 0; i < recs.size() && total > cap_; ++i) {
    fs::path gone = root_ / (".old-" + random_hex(8));
    try {
      disk_.rename(At(recs[i].dir), At(gone));  // one rename: a finder never sees half a record
      remove_tree(disk_, At(gone));
      total -= recs[i].bytes;
    } catch (const Error& e) {
      (void)e;  // another finder or evicter took it first: the next keep tries again
    }
  }
}

}  // namespace overlay
