#include "overlay/traced_build.hpp"

#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "overlay/copy_pipeline.hpp"
#include "overlay/error.hpp"
#include "overlay/file_ops.hpp"
#include "overlay/hash.hpp"
#include "overlay/json_bytes.hpp"
#include "overlay/manifest.hpp"

namespace overlay {

using nlohmann::json;

namespace {

FileType type_named(const std::string& s) {
  auto t = file_type_named(s);
  if (!t) throw Error("trace: unknown file type " + s);
  return *t;
}

// Where a program with the `__trace-build` entry lives (set by the overlay binary at start-up).
fs::path& tracer_program() {
  static fs::path p;
  return p;
}

}  // namespace

PathState state_of(const FileInfo& fi) {
  PathState s;
  s.type = fi.type;
  if (!fi.exists()) return s;
  s.mode = fi.mode;
  s.size = fi.type == FileType::regular || fi.type == FileType::symlink ? fi.size : 0;
  s.dev = static_cast<std::uint64_t>(fi.dev);
  s.ino = static_cast<std::uint64_t>(fi.ino);
  s.nlink = fi.nlink;
  s.mtime_ns = ns_of(fi.mtime);
  s.ctime_ns = ns_of(fi.ctime);
  s.uid = fi.uid;
  s.gid = fi.gid;
  return s;
}

void to_json(json& j, const PathState& s) {
  j = {{"type", file_type_name(s.type)}};
  if (s.type == FileType::none) return;
  j.update({{"mode", s.mode},
            {"size", s.size},
            {"dev", s.dev},
            {"ino", s.ino},
            {"nlink", s.nlink},
            {"mtime_ns", s.mtime_ns},
            {"ctime_ns", s.ctime_ns},
            {"uid", s.uid},
            {"gid", s.gid}});
}
void from_json(const json& j, PathState& s) {
  s = PathState{};
  s.type = type_named(j.at("type").get<std::string>());
  if (s.type == FileType::none) return;
  j.at("mode").get_to(s.mode), j.at("size").get_to(s.size), j.at("dev").get_to(s.dev), j.at("ino").get_to(s.ino);
  j.at("nlink").get_to(s.nlink), j.at("mtime_ns").get_to(s.mtime_ns), j.at("ctime_ns").get_to(s.ctime_ns);
  j.at("uid").get_to(s.uid), j.at("gid").get_to(s.gid);
}

void to_json(json& j, const TracedInput& i) {
  j = {{"path", i.path}, {"follow", i.follow == Follow::yes}, {"looked", i.looked}, {"before", i.before}};
  if (!i.listing.empty()) j["listing"] = i.listing;
  if (!i.target.empty()) j["target"] = i.target;
  if (!i.sha256.empty()) j["sha256"] = i.sha256;
  if (i.tracked) j["tracked"] = true;
}
void from_json(const json& j, TracedInput& i) {
  i.path = j.at("path").get<std::string>();
  i.follow = j.at("follow").get<bool>() ? Follow::yes : Follow::no;
  j.at("looked").get_to(i.looked), j.at("before").get_to(i.before);
  i.listing = j.value("listing", "");
  i.target = j.value("target", "");
  i.sha256 = j.value("sha256", "");
  i.tracked = j.value("tracked", false);
}

void to_json(json& j, const TracedChange& c) {
  j = {{"path", c.path}, {"before", c.before}};
  if (!c.backup.empty()) j["backup"] = c.backup;
  if (!c.sha256.empty()) j["sha256"] = c.sha256;
  if (!c.target.empty()) j["target"] = c.target;
  if (c.tracked) j["tracked"] = true;
  if (c.appended) j["appended"] = true;
  put_xattrs(j, c.xattrs);
}
void from_json(const json& j, TracedChange& c) {
  c.path = j.at("path").get<std::string>();
  j.at("before").get_to(c.before);
  c.backup = j.value("backup", "");
  c.sha256 = j.value("sha256", "");
  c.target = j.value("target", "");
  c.tracked = j.value("tracked", false);
  c.appended = j.value("appended", false);
  c.xattrs = opt_xattrs(j);
}

void to_json(json& j, const BuildTrace& t) {
  j = {{"untraced", t.untraced},     {"unobservable", t.unobservable}, {"inputs", t.inputs},
       {"changes", t.changes},       {"exit_code", t.exit_code},       {"term_signal", t.term_signal},
       {"exec_error", t.exec_error}, {"left_running", t.left_running}};
}
void from_json(const json& j, BuildTrace& t) {
  j.at("untraced").get_to(t.untraced), j.at("unobservable").get_to(t.unobservable);
  j.at("inputs").get_to(t.inputs), j.at("changes").get_to(t.changes);
  j.at("exit_code").get_to(t.exit_code), j.at("term_signal").get_to(t.term_signal);
  j.at("exec_error").get_to(t.exec_error), j.at("left_running").get_to(t.left_running);
}

namespace {}  // namespace

TraceRecorder::TraceRecorder(Disk& disk, const TraceRequest& req, WriteHandle* journal)
    : disk_(disk), req_(req), journal_(journal) {
  for (const auto& s : req.skipped) skipped_.push_back(real_or_normal(s));
  for (const auto& t : req.tracked) tracked_.insert(key(t.string()));
}

void TraceRecorder::unobservable(const std::string& why) {
  if (std::find(trace_.unobservable.begin(), trace_.unobservable.end(), why) == trace_.unobservable.end())
    trace_.unobservable.push_back(why);
}

std::string TraceRecorder::real_or_normal(const fs::path& p) {
  try {
    return disk_.real_path(p).string();
  } catch (const Error& e) {
    (void)e;  // not there (yet): as named, ".." and all, which the kernel resolves as the build sees it
    return p.string();
  }
}

// The path by its directory's real path and its name: one key for every spelling of it. Every
// symlink on the way to that directory is an input (links_on_the_way).
std::string TraceRecorder::key(const std::string& path) {
  auto slash = path.rfind('/');
  if (slash == std::string::npos || path == "/") return path;
  std::string dir = slash == 0 ? "/" : path.substr(0, slash), name = path.substr(slash + 1);
  auto it = real_dirs_.find(dir);
  bool fresh = it == real_dirs_.end();
  if (fresh) it = real_dirs_.emplace(dir, real_or_normal(dir)).first;
  std::string k = (it->second == "/" ? "" : it->second) + "/" + name;
  if (fresh) links_on_the_way(dir, 0);
  return k;
}

// Notes each symlink met resolving `named` (a directory as the build spelled it), and each met on
// the way through such a link's target, as an input by its target: where `third_party/cutlass`
// or `/usr/local/cuda` (through /etc/alternatives) points decides which bytes the build reads
// below it, which the keys by real path alone never say. Each prefix is looked at once a trace;
// the kernel's own limit on links followed (40) bounds a chain.
void TraceRecorder::links_on_the_way(const std::string& named, int depth) {
  if (depth > 40 || named.empty() || named[0] != '/') return;
  std::string prefix;
  for (std::size_t pos = 1; pos <= named.size();) {
    std::size_t next = std::min(named.find('/', pos), named.size());
    std::string part = named.substr(pos, next - pos);
    pos = next + 1;
    if (part.empty() || part == ".") continue;
    prefix += "/" + part;
    if (part == ".." || !prefixes_seen_.insert(prefix).second) continue;
    FileInfo fi;
    try {
      fi = disk_.info(prefix, Follow::no);
    } catch (const Error& e) {
      unobservable("could not look at " + prefix + " as the build did (" + e.what() + ")");
      return;
    }
    if (fi.type != FileType::symlink) {
      if (!fi.exists()) return;  // nothing further down to resolve
      continue;
    }
    looked(prefix, Follow::no, kLookedTarget);
    std::string target;
    try {
      target = disk_.read_link(prefix);
    } catch (const Error& e) {
      unobservable("could not read where " + prefix + " points as the build did (" + e.what() + ")");
      return;
    }
    if (target.empty()) return;
    links_on_the_way(target[0] == '/' ? target : prefix.substr(0, prefix.rfind('/')) + "/" + target, depth + 1);
  }
}

bool TraceRecorder::skipped(const std::string& k) const { return is_skipped_path(k, skipped_); }

PathState TraceRecorder::state(const std::string& k, Follow follow) {
  try {
    return state_of(disk_.info(k, follow));
  } catch (const Error& e) {
    (void)e;  // unreadable to us (EACCES, ELOOP): what the build found there is unknown too
    unobservable("could not look at " + k + " as the build did");
    return PathState{};
  }
}

void TraceRecorder::journal(const TracedChange& c) {
  if (journal_ == nullptr) return;
  std::string line = dump_json_bytes(json(c)) + '\n';
  try {
    journal_->write(line.data(), line.size());
  } catch (const Error& e) {
    journal_ = nullptr;  // a full disk: the trace written at the end still says it all, if it can be
    unobservable(std::string("the journal of the build's changes could not be written (") + e.what() + ")");
  }
}

// The names of `dir` as they were before the build: as listed now, less what the build created
// in it so far, plus what it removed or renamed away (and never a hidden sibling of ours).
std::string TraceRecorder::listing_before(const std::string& dir) {
  std::set<std::string> names;
  for (const auto& e : disk_.list_dir(dir))
    if (!is_own_sibling_name(e.name) && !skipped(dir + "/" + e.name)) names.insert(e.name);
  for (const auto& c : trace_.changes) {
    fs::path p(c.path);
    if (p.parent_path() != fs::path(dir)) continue;
    if (c.before.type == FileType::none)
      names.erase(p.filename().string());
    else
      names.insert(p.filename().string());
  }
  std::string text;
  for (const auto& n : names) text += n + '\0';
  return sha256_hex(text);
}

// Keeps the bytes `c` has before its change: a hard link where the name is going away and the inode
// has no other name (O(1): nothing can write it any more), else a copy (or clone). False, with the
// reason told as unobservable, where neither can be made.
bool TraceRecorder::back_up(TracedChange& c, bool by_link) {
  std::string name = req_.backup_prefix + std::to_string(backups_++);
  fs::path dest = req_.backups / name;
  if (by_link) {
    try {
      disk_.make_hardlink(At(c.path), At(dest));
      c.backup = name;  // hashed after the build
      return true;
    } catch (const DiskError& e) {
      (void)e;  // another filesystem, a protected link: copied instead
    }
  }
  try {
    c.sha256 = copy_file_hashing(disk_, At(c.path), At(dest), 0600, Durable::no).sha256;
    c.backup = name;
    return true;
  } catch (const std::exception& e) {
    try {
      disk_.remove(At(dest));
    } catch (const Error& gone) {
      (void)gone;  // never made
    }
    unobservable("could not keep the bytes of " + c.path + " before the build changed them (" + e.what() + ")");
    return false;
  }
}

namespace {

// Whether what the build does leaves the path in a state of its own making, whatever was there
// (what the build reads there afterwards is its own output, no input): made where nothing was,
// replaced whole, removed or renamed away. A write in place, an append, a chmod, or a create where
// something already is (a no-op) leave what was there part of what follows.
bool defines(Change how, FileType before) {
  return before == FileType::none || how == Change::content || how == Change::rename_to || how == Change::remove ||
         how == Change::rename_from;
}

}  // namespace

void TraceRecorder::looked(const std::string& path, Follow follow, unsigned how) {
  try {
    std::string k = key(path);
    if (skipped(k)) return;
    auto ch = change_at_.find(k);
    if (ch != change_at_.end() && trace_.changes[ch->second].defined) return;  // the build's own
    auto [it, fresh] = input_at_.try_emplace({k, follow}, trace_.inputs.size());
    if (fresh) {
      TracedInput in;
      in.path = k;
      in.follow = follow;
      in.tracked = tracked_.count(k) > 0;
      PathState now = state(k, Follow::no);
      if (ch != change_at_.end() && (follow == Follow::no || now.type != FileType::symlink)) {
        // Changed in place before this look: what it was before the change is what the build read.
        in.before = trace_.changes[ch->second].before;
        in.sha256 = trace_.changes[ch->second].sha256;
      } else if (follow == Follow::yes && now.type == FileType::symlink) {
        auto made = change_at_.find(real_or_normal(k));
        if (made != change_at_.end() && trace_.changes[made->second].defined) {  // an output, through a link
          input_at_.erase(it);
          return;
        }
        in.before = state(k, follow);
      } else {
        in.before = now;
      }
      trace_.inputs.push_back(std::move(in));
    }
    TracedInput& in = trace_.inputs[it->second];
    if (in.before.type == FileType::symlink) how |= kLookedTarget;  // a link looked at: where it points
    unsigned added = how & ~in.looked;
    in.looked |= how;
    if ((added & kLookedListing) != 0 && in.before.type == FileType::directory) in.listing = listing_before(k);
    if ((added & kLookedTarget) != 0 && in.before.type == FileType::symlink) in.target = disk_.read_link(k);
  } catch (const std::exception& e) {
    unobservable(std::string("could not note what the build read (") + e.what() + ")");
  }
}

void TraceRecorder::changing(const std::string& path, Change how, Follow follow) {
  try {
    std::string k = key(path);
    if (follow == Follow::yes && disk_.info(k, Follow::no).type == FileType::symlink) {
      try {
        k = disk_.real_path(k).string();  // the change lands on what the link leads to
      } catch (const DiskError& e) {
        (void)e;  // a dangling link: what the call creates is the link's target, unknown here
        unobservable("a process wrote through the dangling symlink " + k);
      }
    }
    if (skipped(k)) return;
    if (auto at = change_at_.find(k); at != change_at_.end()) {  // noted at its first change, bytes and all
      TracedChange& c = trace_.changes[at->second];
      c.defined = c.defined || defines(how, c.before.type);
      if (how != Change::append && c.appended) {
        c.appended = false;
        journal(c);  // no log after all: a crash's journal must say so too
      }
      return;
    }
    TracedChange c;
    c.path = k;
    c.before = state(k, Follow::no);
    c.tracked = tracked_.count(k) > 0;
    c.appended = how == Change::append && c.before.type != FileType::directory;  // a log, made by `>>` or kept
    c.defined = defines(how, c.before.type);
    if (c.before.type == FileType::regular && !c.tracked) try {
        c.xattrs = disk_.xattrs(At(fs::path(k)));
      } catch (const Error& e) {
        (void)e;  // unreadable to us: revert leaves them as they come, as before this was read
      }
    // Even a chmod or a touch is undone by putting the file back whole: its bytes are kept too.
    if (c.before.type == FileType::regular && !c.tracked &&
        !back_up(c, !copy_backups_ && (how == Change::remove || how == Change::rename_to) && c.before.nlink == 1))
      ++failures_;
    if (c.before.type == FileType::symlink) c.target = disk_.read_link(k);
    if (c.before.type == FileType::regular && c.before.nlink > 1 &&
        (how == Change::content || how == Change::rewrite || how == Change::append))
      unobservable("a process wrote in place " + k + ", which has other names (hard links) that change with it");
    // A directory made, removed or renamed: names below it may resolve elsewhere from now on.
    if (how != Change::meta && how != Change::content && how != Change::rewrite && how != Change::append)
      real_dirs_.clear();
    // A file the build read before it changes it: its bytes then are the ones now kept.
    for (Follow f : {Follow::yes, Follow::no})
      if (auto in = input_at_.find({k, f}); in != input_at_.end() && trace_.inputs[in->second].sha256.empty())
        trace_.inputs[in->second].sha256 = c.sha256;
    change_at_.emplace(k, trace_.changes.size());
    journal(c);
    trace_.changes.push_back(std::move(c));
  } catch (const std::exception& e) {
    ++failures_;
    unobservable("could not keep what " + path + " was before the build changed it (" + e.what() + ")");
  }
}

void TraceRecorder::renaming(const std::string& from, const std::string& to, bool exchange) {
  try {
    std::string f = key(from), t = key(to);
    if (!skipped(f) && disk_.info(f, Follow::no).type == FileType::directory) note_moving_tree(f, t);
    if (exchange && !skipped(t) && disk_.info(t, Follow::no).type == FileType::directory) note_moving_tree(t, f);
  } catch (const std::exception& e) {
    ++failures_;
    unobservable("could not keep what the renamed directory " + from + " held (" + e.what() + ")");
  }
  TraceListener::renaming(from, to, exchange);
}

// Each name below `from` goes with it to the same name below `to`: noted at its old name as it is
// (a file's bytes copied), and at its new one as what is there now (nothing, but where an exchange
// brings it). Children before their directory, as a walk that removes them would.
void TraceRecorder::note_moving_tree(const std::string& from, const std::string& to) {
  for (const auto& e : disk_.list_dir(from)) {
    std::string f = from + "/" + e.name, t = to + "/" + e.name;
    if (disk_.info(f, Follow::no).type == FileType::directory) note_moving_tree(f, t);
    copy_backups_ = true;
    changing(f, Change::rename_from, Follow::no);
    changing(t, Change::rename_to, Follow::no);
    copy_backups_ = false;
  }
}

namespace {

std::vector<std::string> after_dashes(int argc, char** argv, int& i) {
  std::vector<std::string> out;
  for (++i; i < argc; ++i) out.emplace_back(argv[i]);
  return out;
}

TraceRequest parse_request(int argc, char** argv) {
  TraceRequest r;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--") {
      r.argv = after_dashes(argc, argv, i);
      break;
    }
    if (i + 1 >= argc) throw Error("__trace-build: " + a + " needs a value");
    std::string v = argv[++i];
    if (a == "--out")
      r.out = v;
    else if (a == "--backups")
      r.backups = v;
    else if (a == "--prefix")
      r.backup_prefix = v;
    else if (a == "--skip")
      r.skipped.emplace_back(v);
    else if (a == "--tracked")
      r.tracked.emplace_back(v);
    else
      throw Error("__trace-build: unknown option " + a);
  }
  if (r.argv.empty() || r.out.empty() || r.backups.empty())
    throw Error("__trace-build: --out, --backups and a command are needed");
  return r;
}

// Ends this process as the build ended: its exit code, or the signal that killed it.
[[noreturn]] void exit_as(const BuildTrace& t) {
  if (t.term_signal != 0) {
    rlimit none{0, 0};
    ::setrlimit(RLIMIT_CORE, &none);  // the build's core, if any, is the build's
    ::signal(t.term_signal, SIG_DFL);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, t.term_signal);
    ::sigprocmask(SIG_UNBLOCK, &set, nullptr);
    ::kill(::getpid(), t.term_signal);
  }
  std::_Exit(t.exec_error.empty() ? (t.exit_code < 0 ? 1 : t.exit_code) : 127);
}

}  // namespace

void set_tracer_program(const fs::path& program) { tracer_program() = program; }

std::optional<std::vector<std::string>> tracer_argv(const TraceRequest& req) {
  if (tracer_program().empty() || ::access("/proc/self/cwd", F_OK) != 0) return std::nullopt;
  std::vector<std::string> a = {
      tracer_program().string(), "__trace-build", "--out",          req.out.string(), "--backups",
      req.backups.string(),      "--prefix",      req.backup_prefix};
  for (const auto& s : req.skipped) a.insert(a.end(), {"--skip", s.string()});
  for (const auto& t : req.tracked) a.insert(a.end(), {"--tracked", t.string()});
  a.emplace_back("--");
  a.insert(a.end(), req.argv.begin(), req.argv.end());
  return a;
}

int build_tracer_main(int argc, char** argv) {
  TraceRequest req;
  try {
    req = parse_request(argc, argv);
  } catch (const Error& e) {
    std::fprintf(stderr, "overlay: %s\n", e.what());
    return 2;
  }
  // The build's process group gets the caller's signals; the tracer outlives the build they end.
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE}) ::signal(sig, SIG_IGN);
  ::signal(SIGCHLD, SIG_DFL);
  Disk& disk = real_disk();
  // What the tracer cannot write (a full disk) makes the trace incomplete, never the build fail:
  // the build runs and ends as it would, and the trace says what is missing (or is missing).
  std::unique_ptr<WriteHandle> journal;
  std::string no_journal;
  try {
    make_dirs(disk, req.backups, 0700);
    journal = disk.create(fs::path(req.out.string() + ".journal"), 0600, CreateMode::truncate);
  } catch (const Error& e) {
    no_journal = e.what();
  }
  TraceRecorder rec(disk, req, journal.get());
  if (!no_journal.empty())
    rec.unobservable("the journal of the build's changes could not be made (" + no_journal + ")");
  TraceOutcome o;
  try {
    o = trace_program(req.argv, rec);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "overlay: the build tracer could not start the build: %s\n", e.what());
    return 125;
  }
  BuildTrace t = rec.take();
  t.untraced = o.untraced;
  t.exit_code = o.exit_code;
  t.term_signal = o.term_signal;
  t.exec_error = o.exec_error;
  t.left_running = o.left_running;
  try {
    if (journal) journal->close();
    write_file_atomically(disk, req.out, dump_json_bytes(json(t)), 0600, NameDurable::no);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "overlay: the build's trace could not be written: %s\n", e.what());
  }
  exit_as(t);
}

BuildTrace read_trace(Disk& disk, const fs::path& path) {
  try {
    return parse_json_bytes(read_small_file(disk, path, 1u << 30)).get<BuildTrace>();
  } catch (const json::exception& e) {
    throw Error("the build's trace " + path.string() + " cannot be read: " + e.what());
  }
}

std::vector<TracedChange> read_journal(Disk& disk, const fs::path& path) {
  fs::path j = path.string() + ".journal";
  if (!disk.info(j, Follow::no).exists()) return {};
  std::istringstream in(read_small_file(disk, j, 1u << 30));
  std::vector<TracedChange> out;
  for (std::string line; std::getline(in, line);) {
    try {
      out.push_back(parse_json_bytes(line).get<TracedChange>());
    } catch (const json::exception& e) {
      (void)e;  // the last line, cut by the kill that ended the build: its change never ran
      break;
    }
  }
  return out;
}

namespace {

// "\040" in a mount point as /proc/self/mountinfo writes it: the byte it stands for.
std::string mount_point_unescaped(const std::string& s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i)
    if (s[i] == '\\' && i + 3 < s.size() && std::isdigit(static_cast<unsigned char>(s[i + 1])) != 0) {
      out += static_cast<char>(std::stoi(s.substr(i + 1, 3), nullptr, 8));
      i += 3;
    } else {
      out += s[i];
    }
  return out;
}

}  // namespace

const std::vector<std::string>& traced_mounts_below_dev() {
  static const std::vector<std::string> mounts = [] {
    // Filesystems of the kernel's own objects, never a file a build keeps: left untraced.
    static const std::set<std::string> kernel_own = {
        "devtmpfs", "devpts",   "mqueue",  "hugetlbfs",   "debugfs", "tracefs", "securityfs", "pstore", "efivarfs",
        "bpf",      "configfs", "fusectl", "binfmt_misc", "autofs",  "cgroup",  "cgroup2",    "proc",   "sysfs"};
    std::vector<std::string> out;
    std::istringstream in;
    best_effort("no mount below /dev is traced",
                [&] { in.str(read_small_file(real_disk(), "/proc/self/mountinfo", 16u << 20)); });
    for (std::string line; std::getline(in, line);) {
      std::istringstream words(line);
      std::string id, parent, devno, root, point;
      words >> id >> parent >> devno >> root >> point;
      std::string w, fstype;
      while (words >> w && w != "-") continue;
      words >> fstype;
      point = mount_point_unescaped(point);
      if (point.rfind("/dev/", 0) == 0 && kernel_own.count(fstype) == 0 &&
          std::find(out.begin(), out.end(), point) == out.end())
        out.push_back(point);
    }
    return out;
  }();
  return mounts;
}

bool is_skipped_path(const std::string& path, const std::vector<std::string>& skipped) {
  auto below = [&](const std::string& s) {
    return path == s ||
           (path.size() > s.size() && path.compare(0, s.size(), s) == 0 && (s == "/" || path[s.size()] == '/'));
  };
  if (!std::any_of(skipped.begin(), skipped.end(), below)) return false;
  if (!below("/dev")) return true;
  const auto& traced = traced_mounts_below_dev();
  return std::none_of(traced.begin(), traced.end(), below);
}

std::vector<fs::path> untraced_roots() {
  std::vector<fs::path> roots = {"/proc", "/sys", "/dev"};
  auto env = [](const char* name) -> std::string {
    const char* v = std::getenv(name);
    return v != nullptr ? v : "";
  };
  std::string home = env("HOME"), xdg = env("XDG_CACHE_HOME");
  if (xdg.empty() && !home.empty()) xdg = home + "/.cache";
  if (!env("CCACHE_DIR").empty()) roots.emplace_back(env("CCACHE_DIR"));
  if (!env("SCCACHE_DIR").empty()) roots.emplace_back(env("SCCACHE_DIR"));
  if (!home.empty()) roots.emplace_back(home + "/.ccache");
  if (!xdg.empty()) roots.emplace_back(xdg + "/ccache"), roots.emplace_back(xdg + "/sccache");
  return roots;
}

}  // namespace overlay
