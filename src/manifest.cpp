#include "overlay/manifest.hpp"
#include "overlay/json_bytes.hpp"

#include <algorithm>

#include "overlay/error.hpp"
#include "overlay/file_ops.hpp"
#include "overlay/hash.hpp"

namespace overlay {
namespace {

constexpr std::size_t kMaxManifestBytes = 64u << 20;
constexpr const char* kGuardKey = "python_tool_guard";

[[noreturn]] void bad(const std::string& where, const std::string& what) {
  throw ManifestError("manifest: " + where + ": " + what);
}

const json* find(const json& obj, const char* key) {
  auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

std::string req_string(const json& obj, const char* key, const std::string& where) {
  const json* v = find(obj, key);
  if (v == nullptr) bad(where + "." + key, "missing");
  if (!v->is_string()) bad(where + "." + key, "expected a string");
  return v->get<std::string>();
}

std::optional<std::string> opt_string(const json& obj, const char* key, const std::string& where) {
  const json* v = find(obj, key);
  if (v == nullptr || v->is_null()) return std::nullopt;
  if (!v->is_string()) bad(where + "." + key, "expected a string or null");
  return v->get<std::string>();
}

std::string abs_path(const json& obj, const char* key, const std::string& where) {
  std::string p = req_string(obj, key, where);
  fs::path fp(p);
  if (p.empty() || !fp.is_absolute()) bad(where + "." + key, "not an absolute path: " + p);
  if (p.find('\0') != std::string::npos) bad(where + "." + key, "contains a NUL byte");
  for (const auto& part : fp)
    if (part == "..") bad(where + "." + key, "contains '..': " + p);
  return p;
}

std::string backup_path(const json& obj, const char* key, const std::string& where) {
  std::string p = req_string(obj, key, where);
  if (!is_safe_relative(p)) bad(where + "." + key, "backup path escapes the overlay: " + p);
  return p;
}

std::optional<std::string> opt_backup_path(const json& obj, const char* key, const std::string& where) {
  if (const json* v = find(obj, key); v == nullptr || v->is_null()) return std::nullopt;
  return backup_path(obj, key, where);
}

std::string sha(const json& obj, const char* key, const std::string& where) {
  std::string s = req_string(obj, key, where);
  if (!is_sha256_hex(s)) bad(where + "." + key, "expected a 64-digit hex SHA-256");
  return s;
}

std::optional<std::string> opt_sha(const json& obj, const char* key, const std::string& where) {
  if (const json* v = find(obj, key); v == nullptr || v->is_null()) return std::nullopt;
  return sha(obj, key, where);
}

bool req_bool(const json& obj, const char* key, const std::string& where, bool fallback) {
  const json* v = find(obj, key);
  if (v == nullptr || v->is_null()) return fallback;
  if (!v->is_boolean()) bad(where + "." + key, "expected true or false");
  return v->get<bool>();
}

std::optional<mode_t> opt_mode(const json& obj, const std::string& where) {
  const json* v = find(obj, "mode");
  if (v == nullptr || v->is_null()) return std::nullopt;
  if (!v->is_number_unsigned() || v->get<std::uint64_t>() > 07777) bad(where + ".mode", "expected a mode 0..07777");
  return static_cast<mode_t>(v->get<std::uint64_t>());
}

const json& array_of_objects(const json& obj, const char* key, const std::string& where) {
  static const json empty = json::array();
  const json* v = find(obj, key);
  if (v == nullptr || v->is_null()) return empty;
  if (!v->is_array()) bad(where + "." + key, "expected an array");
  for (std::size_t i = 0; i < v->size(); ++i)
    if (!(*v)[i].is_object()) bad(where + "." + key + "[" + std::to_string(i) + "]", "expected an object");
  return *v;
}

std::optional<FileStamp> opt_stamp(const json& j, const std::string& w) {
  const json* size = find(j, "size");
  const json* ino = find(j, "ino");
  const json* mtime = find(j, "mtime_ns");
  if (size == nullptr || ino == nullptr || mtime == nullptr) return std::nullopt;
  if (!size->is_number_unsigned() || !ino->is_number_unsigned() || !mtime->is_number_integer())
    bad(w, "size, ino and mtime_ns must be integers");
  return FileStamp{size->get<std::uint64_t>(), ino->get<std::uint64_t>(), mtime->get<std::int64_t>()};
}

std::optional<FileOwner> opt_owner(const json& j, const std::string& w) {
  const json* uid = find(j, "uid");
  const json* gid = find(j, "gid");
  if (uid == nullptr || gid == nullptr || uid->is_null() || gid->is_null()) return std::nullopt;
  if (!uid->is_number_unsigned() || !gid->is_number_unsigned() || uid->get<std::uint64_t>() > 0xfffffffeu ||
      gid->get<std::uint64_t>() > 0xfffffffeu)
    bad(w, "uid and gid must be integers below 2^32 - 1");
  return FileOwner{uid->get<std::uint64_t>(), gid->get<std::uint64_t>()};
}

// Extended attributes (added key "xattrs"): {name: base64 of the value}; {} records that there were none.
std::optional<Xattrs> opt_xattrs(const json& j, const std::string& w) {
  const json* v = find(j, "xattrs");
  if (v == nullptr || v->is_null()) return std::nullopt;
  if (!v->is_object()) bad(w + ".xattrs", "expected {name: base64 value}");
  Xattrs out;
  for (auto it = v->begin(); it != v->end(); ++it) {
    std::optional<std::string> value = it->is_string() ? from_base64(it->get<std::string>()) : std::nullopt;
    if (it.key().empty() || it.key().find('\0') != std::string::npos || !value) bad(w + ".xattrs." + it.key(), "expected a base64 value");
    out.emplace_back(it.key(), std::move(*value));
  }
  return out;  // nlohmann's object keeps its keys sorted: so is this
}

void put_xattrs(json& j, const std::optional<Xattrs>& x) {
  if (!x) return;
  json o = json::object();
  for (const auto& [name, value] : *x) o[name] = to_base64(value);
  j["xattrs"] = std::move(o);
}

void put_owner(json& j, const std::optional<FileOwner>& o) {
  if (!o) return;
  j["uid"] = o->uid;
  j["gid"] = o->gid;
}

void put_stamp(json& j, const std::optional<FileStamp>& st) {
  if (!st) return;
  j["size"] = st->size;
  j["ino"] = st->ino;
  j["mtime_ns"] = st->mtime_ns;
}

std::uint64_t req_unsigned(const json& j, const char* key, const std::string& w) {
  const json* v = find(j, key);
  if (v == nullptr || !v->is_number_unsigned()) bad(w + "." + key, "expected a non-negative integer");
  return v->get<std::uint64_t>();
}

std::optional<PinnedDir> opt_parent(const json& j, const std::string& w) {
  const json* v = find(j, "parent");
  if (v == nullptr || v->is_null()) return std::nullopt;
  if (!v->is_object()) bad(w + ".parent", "expected {path, dev, ino}");
  PinnedDir pin{abs_path(*v, "path", w + ".parent"), req_unsigned(*v, "dev", w + ".parent"), req_unsigned(*v, "ino", w + ".parent"),
                opt_string(*v, "below", w + ".parent").value_or("")};
  if (!pin.below.empty() && !is_safe_relative(pin.below)) bad(w + ".parent.below", "not a relative path inside it: " + pin.below);
  return pin;
}

void put_parent(json& j, const std::optional<PinnedDir>& p) {
  if (!p) return;
  j["parent"] = {{"path", p->path}, {"dev", p->dev}, {"ino", p->ino}};
  if (!p->below.empty()) j["parent"]["below"] = p->below;
}

// The keys every backed-up file (a source, an artifact) has beside its own: read and written
// here, one line each, for both.
template <typename Item>
void read_file_keys(const json& j, const std::string& w, Item& it) {
  it.mode = opt_mode(j, w);
  it.stamp = opt_stamp(j, w);
  it.owner = opt_owner(j, w);
  it.xattrs = opt_xattrs(j, w);
  it.same_inode = opt_backup_path(j, "same_inode", w);
  it.parent = opt_parent(j, w);
}

template <typename Item>
void write_file_keys(json& j, const Item& it) {
  if (it.mode) j["mode"] = *it.mode;
  put_stamp(j, it.stamp);
  put_owner(j, it.owner);
  put_xattrs(j, it.xattrs);
  if (it.same_inode) j["same_inode"] = *it.same_inode;
  put_parent(j, it.parent);
}

SourceItem parse_source(const json& j, const std::string& w) {
  SourceItem s;
  s.install_path = abs_path(j, "install_path", w);
  s.backup = backup_path(j, "backup", w);
  s.sha256 = sha(j, "sha256", w);
  s.patched_sha256 = opt_sha(j, "patched_sha256", w);
  read_file_keys(j, w, s);
  s.deleted = req_bool(j, "deleted", w, false);
  s.raw = j;
  return s;
}

CreatedItem parse_created(const json& j, const std::string& w) {
  CreatedItem c;
  c.path = abs_path(j, "path", w);
  c.sha256 = sha(j, "sha256", w);
  c.parent = opt_parent(j, w);
  c.raw = j;
  return c;
}

ArtifactItem parse_artifact(const json& j, const std::string& w) {
  ArtifactItem a;
  a.path = abs_path(j, "path", w);
  bool has_backup = find(j, "backup") != nullptr && !j["backup"].is_null();
  a.existed = req_bool(j, "existed", w, has_backup);
  if (a.existed) {
    a.backup = backup_path(j, "backup", w);
    a.sha256 = sha(j, "sha256", w);
  }
  read_file_keys(j, w, a);
  a.raw = j;
  return a;
}

// An aside copy's record: its path must be the sibling aside_path_of() derives from the cache dir.
AsideDir parse_aside(const json& j, const std::string& dir, const std::string& w) {
  if (!j.is_object()) bad(w, "expected {path, dev, ino, uid}");
  AsideDir a;
  a.path = abs_path(j, "path", w);
  fs::path p(a.path), d(dir);
  std::string prefix = hidden_stem(d.filename().string()) + ".overlay-aside-";
  std::string name = p.filename().string();
  if (p.parent_path() != d.parent_path() || name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0)
    bad(w + ".path", "not the aside sibling of " + dir + ": " + a.path);
  a.dev = req_unsigned(j, "dev", w);
  a.ino = req_unsigned(j, "ino", w);
  a.uid = req_unsigned(j, "uid", w);
  return a;
}

CacheItem parse_cache(const json& j, const std::string& w) {
  CacheItem c;
  c.dir = abs_path(j, "dir", w);
  bool has_tar = find(j, "backup_tar") != nullptr && !j["backup_tar"].is_null();
  bool has_dir = find(j, "backup_dir") != nullptr && !j["backup_dir"].is_null();
  c.existed = req_bool(j, "existed", w, has_tar || has_dir);
  bool has_aside = find(j, "aside") != nullptr && !j["aside"].is_null();
  c.existed = c.existed || has_aside;
  if (has_aside && has_dir) bad(w, "both aside and backup_dir");
  if (has_aside) c.aside = parse_aside(j["aside"], c.dir, w + ".aside");
  if (c.existed && has_dir) c.backup_dir = backup_path(j, "backup_dir", w);
  if (c.existed && !has_dir && !has_aside) c.backup_tar = backup_path(j, "backup_tar", w);
  c.sha256 = opt_sha(j, "sha256", w);
  c.parent = opt_parent(j, w);
  c.raw = j;
  return c;
}

std::vector<std::vector<std::string>> parse_build_cmds(const json& j, const std::string& w) {
  std::vector<std::vector<std::string>> cmds;
  const json* v = find(j, "build_cmds");
  if (v == nullptr || v->is_null()) return cmds;
  if (!v->is_array()) bad(w + ".build_cmds", "expected a list of argv lists");
  for (std::size_t i = 0; i < v->size(); ++i) {
    const json& argv = (*v)[i];
    std::string wi = w + ".build_cmds[" + std::to_string(i) + "]";
    if (!argv.is_array() || argv.empty()) bad(wi, "expected a non-empty list of strings");
    std::vector<std::string> words;
    for (const auto& word : argv) {
      if (!word.is_string()) bad(wi, "expected a non-empty list of strings");
      words.push_back(word.get<std::string>());
    }
    cmds.push_back(std::move(words));
  }
  return cmds;
}

void parse_verify(const json& j, const std::string& w, NativeEntry& e) {
  const json* v = find(j, "verify");
  if (v == nullptr || v->is_null()) return;
  if (!v->is_object()) bad(w + ".verify", "expected an object or null");
  e.verify_artifact = opt_string(*v, "artifact", w + ".verify");
  e.verify_pre_sha256 = opt_sha(*v, "pre_sha256", w + ".verify");
}

void parse_owner(const json& j, const std::string& w, NativeEntry& e) {
  const json* v = find(j, "owner");
  if (v == nullptr || v->is_null()) return;
  const json* pid = v->is_object() ? find(*v, "pid") : nullptr;
  const json* start = v->is_object() ? find(*v, "start_ticks") : nullptr;
  if (pid == nullptr || !pid->is_number_integer() || pid->get<long long>() <= 0 || pid->get<long long>() > 1 << 30)
    bad(w + ".owner", "expected {pid, start_ticks}");
  Owner o;
  o.pid = static_cast<pid_t>(pid->get<long long>());
  if (start != nullptr && start->is_number_unsigned()) o.start_ticks = start->get<std::uint64_t>();
  e.owner = o;
}

std::vector<RunningPatched> parse_running(const json& j) {
  std::vector<RunningPatched> out;
  const json& items = array_of_objects(j, "running_patched", "");
  for (std::size_t i = 0; i < items.size(); ++i) {
    std::string w = "running_patched[" + std::to_string(i) + "]";
    RunningPatched r;
    r.path = abs_path(items[i], "path", w);
    r.dev = req_unsigned(items[i], "dev", w);
    r.ino = req_unsigned(items[i], "ino", w);
    r.pid = static_cast<std::int64_t>(req_unsigned(items[i], "pid", w));
    if (r.pid <= 0 || r.pid > 1 << 30) bad(w + ".pid", "not a process id");
    r.start_ticks = req_unsigned(items[i], "start_ticks", w);
    r.cmdline = opt_string(items[i], "cmdline", w).value_or("");
    r.entry = opt_string(items[i], "entry", w).value_or("");
    out.push_back(std::move(r));
  }
  return out;
}

std::vector<UntrackedOutput> parse_untracked(const json& j, const std::string& w, bool top_level) {
  std::vector<UntrackedOutput> out;
  const json& items = array_of_objects(j, "untracked_outputs", w);
  for (std::size_t i = 0; i < items.size(); ++i) {
    std::string wi = w + (w.empty() ? "" : ".") + "untracked_outputs[" + std::to_string(i) + "]";
    UntrackedOutput u;
    u.path = abs_path(items[i], "path", wi);
    u.change = req_string(items[i], "change", wi);
    if (u.change != "created" && u.change != "changed") bad(wi + ".change", "expected created or changed");
    auto st = opt_stamp(items[i], wi);
    if (!st) bad(wi, "size, ino and mtime_ns missing");
    u.stamp = *st;
    if (top_level) {
      u.entry = opt_string(items[i], "entry", wi).value_or("");
      u.build_cmds = parse_build_cmds(items[i], wi);
    } else if (items[i].contains("clear_reason")) {
      u.clear_reason = req_string(items[i], "clear_reason", wi);
      if (u.clear_reason.empty()) bad(wi + ".clear_reason", "empty");
    }
    out.push_back(std::move(u));
  }
  return out;
}

json to_json(const UntrackedOutput& u, bool top_level) {
  json j = {{"path", u.path}, {"change", u.change}};
  put_stamp(j, u.stamp);
  if (top_level) {
    j["entry"] = u.entry;
    j["build_cmds"] = u.build_cmds;
  } else if (!u.clear_reason.empty()) {
    j["clear_reason"] = u.clear_reason;
  }
  return j;
}

NativeEntry parse_native(const json& j, const std::string& w) {
  NativeEntry e;
  e.id = opt_string(j, "id", w).value_or("");
  if (!e.id.empty() && !is_safe_relative(e.id)) bad(w + ".id", "not a plain name");
  const json& srcs = array_of_objects(j, "sources", w);
  for (std::size_t i = 0; i < srcs.size(); ++i)
    e.sources.push_back(parse_source(srcs[i], w + ".sources[" + std::to_string(i) + "]"));
  const json& created = array_of_objects(j, "created_files", w);
  for (std::size_t i = 0; i < created.size(); ++i)
    e.created.push_back(parse_created(created[i], w + ".created_files[" + std::to_string(i) + "]"));
  const json& arts = array_of_objects(j, "artifacts", w);
  for (std::size_t i = 0; i < arts.size(); ++i)
    e.artifacts.push_back(parse_artifact(arts[i], w + ".artifacts[" + std::to_string(i) + "]"));
  const json& caches = array_of_objects(j, "caches", w);
  for (std::size_t i = 0; i < caches.size(); ++i) {
    std::string wi = w + ".caches[" + std::to_string(i) + "]";
    if (req_bool(caches[i], kGuardKey, wi, false)) {
      if (e.python_guard) bad(wi, "a second python_tool_guard");
      e.python_guard = PythonToolGuard{abs_path(caches[i], "dir", wi), backup_path(caches[i], "backup_tar", wi)};
      continue;
    }
    e.caches.push_back(parse_cache(caches[i], wi));
  }
  e.build_cmds = parse_build_cmds(j, w);
  e.build_cwd = opt_string(j, "build_cwd", w);
  parse_verify(j, w, e);
  parse_owner(j, w, e);
  e.build_log = opt_string(j, "build_log", w);
  if (e.build_log && !is_safe_relative(*e.build_log)) bad(w + ".build_log", "path escapes the overlay");
  if (const json* t = find(j, "created_at"); t != nullptr && t->is_number()) e.created_at = t->get<double>();
  e.patch_id = opt_string(j, "patch_id", w);
  if (const json* k = find(j, "kept"); k != nullptr && k->is_boolean()) e.kept = k->get<bool>();
  e.untracked = parse_untracked(j, w, false);
  e.raw = j;
  return e;
}

json to_json(const SourceItem& s) {
  json j = s.raw;
  j["install_path"] = s.install_path;
  j["backup"] = s.backup;
  j["sha256"] = s.sha256;
  if (s.patched_sha256) j["patched_sha256"] = *s.patched_sha256;
  write_file_keys(j, s);
  if (s.deleted) j["deleted"] = true;
  return j;
}

json to_json(const ArtifactItem& a) {
  json j = a.raw;
  j["path"] = a.path;
  j["existed"] = a.existed;
  j["backup"] = a.backup ? json(*a.backup) : json(nullptr);
  j["sha256"] = a.sha256 ? json(*a.sha256) : json(nullptr);
  write_file_keys(j, a);
  return j;
}

json to_json(const CacheItem& c) {
  json j = c.raw;
  j["dir"] = c.dir;
  j["existed"] = c.existed;
  j["backup_tar"] = c.backup_tar ? json(*c.backup_tar) : json(nullptr);
  if (c.sha256) j["sha256"] = *c.sha256;
  if (c.backup_dir) j["backup_dir"] = *c.backup_dir;
  if (c.aside) j["aside"] = {{"path", c.aside->path}, {"dev", c.aside->dev}, {"ino", c.aside->ino}, {"uid", c.aside->uid}};
  put_parent(j, c.parent);
  return j;
}

json to_json(const NativeEntry& e) {
  json j = e.raw;
  if (!e.id.empty()) j["id"] = e.id;
  j["sources"] = json::array();
  for (const auto& s : e.sources) j["sources"].push_back(to_json(s));
  if (!e.created.empty()) {
    j["created_files"] = json::array();
    for (const auto& c : e.created) {
      json item = c.raw;
      item["path"] = c.path;
      item["sha256"] = c.sha256;
      put_parent(item, c.parent);
      j["created_files"].push_back(std::move(item));
    }
  }
  j["artifacts"] = json::array();
  for (const auto& a : e.artifacts) j["artifacts"].push_back(to_json(a));
  j["caches"] = json::array();
  if (e.python_guard)  // first: overlay_setup.py's revert stops on it before touching the entry
    j["caches"].push_back({{"dir", e.python_guard->dir},
                           {"backup_tar", e.python_guard->stop},
                           {"existed", true},
                           {kGuardKey, true}});
  for (const auto& c : e.caches) j["caches"].push_back(to_json(c));
  j["build_cmds"] = e.build_cmds;
  j["build_cwd"] = e.build_cwd ? json(*e.build_cwd) : json(nullptr);
  if (e.verify_artifact)
    j["verify"] = {{"artifact", *e.verify_artifact},
                   {"pre_sha256", e.verify_pre_sha256 ? json(*e.verify_pre_sha256) : json(nullptr)}};
  else if (!j.contains("verify"))
    j["verify"] = nullptr;
  if (e.owner) j["owner"] = {{"pid", e.owner->pid}, {"start_ticks", e.owner->start_ticks}};
  else j.erase("owner");
  if (e.kept) j["kept"] = true;
  else j.erase("kept");
  if (e.build_log) j["build_log"] = *e.build_log;
  if (e.created_at) j["created_at"] = *e.created_at;
  if (e.patch_id) j["patch_id"] = *e.patch_id;
  j.erase("untracked_outputs");
  if (!e.untracked.empty()) {
    j["untracked_outputs"] = json::array();
    for (const auto& u : e.untracked) j["untracked_outputs"].push_back(to_json(u, false));
  }
  return j;
}

// The Python entries: the keys sitecustomize.py reads must have the right types.
void check_python_entries(const json& doc) {
  const json& modules = array_of_objects(doc, "modules", "");
  for (std::size_t i = 0; i < modules.size(); ++i) {
    std::string w = "modules[" + std::to_string(i) + "]";
    req_string(modules[i], "module", w);
    req_string(modules[i], "file", w);
  }
  const json& rebinds = array_of_objects(doc, "rebinds", "");
  for (std::size_t i = 0; i < rebinds.size(); ++i)
    for (const char* k : {"target", "impl_module", "impl_attr"}) req_string(rebinds[i], k, "rebinds[" + std::to_string(i) + "]");
  const json& captures = array_of_objects(doc, "captures", "");
  for (std::size_t i = 0; i < captures.size(); ++i) {
    std::string w = "captures[" + std::to_string(i) + "]";
    req_string(captures[i], "target", w);
    req_string(captures[i], "out", w);
    if (const json* mx = find(captures[i], "max"); mx != nullptr && !mx->is_number_integer()) bad(w + ".max", "expected an integer");
  }
  const json& markers = array_of_objects(doc, "markers", "");
  for (std::size_t i = 0; i < markers.size(); ++i) req_string(markers[i], "target", "markers[" + std::to_string(i) + "]");
  const json& hooks = array_of_objects(doc, "hooks", "");
  for (std::size_t i = 0; i < hooks.size(); ++i)
    for (const char* k : {"module", "impl_module"}) req_string(hooks[i], k, "hooks[" + std::to_string(i) + "]");
  const json& installers = array_of_objects(doc, "installers", "");
  for (std::size_t i = 0; i < installers.size(); ++i)
    for (const char* k : {"id", "module"}) req_string(installers[i], k, "installers[" + std::to_string(i) + "]");
}

}  // namespace

FileStamp stamp_of(const FileInfo& fi) {
  return {fi.size, static_cast<std::uint64_t>(fi.ino),
          static_cast<std::int64_t>(fi.mtime.tv_sec) * 1000000000 + fi.mtime.tv_nsec};
}

std::vector<std::string> remove_patch_modules(Manifest& m, const std::string& patch_id) {
  std::vector<std::string> files;
  auto it = m.doc.find("modules");
  if (it == m.doc.end() || !it->is_array()) return files;
  json kept = json::array();
  for (const auto& e : *it) {
    if (e.is_object() && e.value("patch_id", json()).is_string() && e["patch_id"] == patch_id) {
      if (e.value("file", json()).is_string()) files.push_back(e["file"].get<std::string>());
      continue;
    }
    kept.push_back(e);
  }
  *it = std::move(kept);
  return files;
}

bool has_patch(const Manifest& m, const std::string& patch_id) {
  for (const auto& e : m.natives)
    if (e.patch_id == patch_id) return true;
  auto it = m.doc.find("modules");
  if (it == m.doc.end() || !it->is_array()) return false;
  return std::any_of(it->begin(), it->end(), [&](const json& e) {
    return e.is_object() && e.value("patch_id", json()).is_string() && e["patch_id"] == patch_id;
  });
}

fs::path aside_path_of(const fs::path& dir, const std::string& entry_id) {
  return dir.parent_path() / (hidden_stem(dir.filename().string()) + ".overlay-aside-" + entry_id);
}

bool is_aside_name(const std::string& name) {
  return name.size() > 1 && name[0] == '.' && name.find(".overlay-aside-") != std::string::npos;
}

bool is_litter_path(const std::string& path) {
  fs::path p(path);
  if (path.empty() || !p.is_absolute() || path.find('\0') != std::string::npos) return false;
  for (const auto& part : p)
    if (part == "..") return false;
  std::string name = p.filename().string();
  for (const std::string tag : {".overlay-trash-", ".overlay-restore-"}) {
    auto at = name.rfind(tag);
    if (name.size() < 2 || name[0] != '.' || at == std::string::npos || at == 0) continue;
    std::string hex = name.substr(at + tag.size());
    if (!hex.empty() && hex.find_first_not_of("0123456789abcdef") == std::string::npos) return true;
  }
  return false;
}

bool is_safe_relative(const std::string& rel) {
  if (rel.empty() || rel.find('\0') != std::string::npos) return false;
  fs::path p(rel);
  if (p.is_absolute() || p.has_root_name() || p.has_root_directory()) return false;
  for (const auto& part : p)
    if (part == "..") return false;
  return true;
}

Manifest parse_manifest(const std::string& text) {
  Manifest m;
  try {
    m.doc = parse_json_bytes(text);
  } catch (const json::exception& e) {  // parse_error, and out_of_range for numbers that overflow
    throw ManifestError(std::string("manifest: not valid JSON (") + e.what() + ")");
  }
  if (!m.doc.is_object()) bad("top level", "expected a JSON object");
  check_python_entries(m.doc);
  const json& natives = array_of_objects(m.doc, "natives", "");
  for (std::size_t i = 0; i < natives.size(); ++i)
    m.natives.push_back(parse_native(natives[i], "natives[" + std::to_string(i) + "]"));
  m.untracked = parse_untracked(m.doc, "", true);
  m.running = parse_running(m.doc);
  const json* litter = find(m.doc, "litter");
  if (litter != nullptr && !litter->is_null()) {
    if (!litter->is_array()) bad("litter", "expected an array of paths");
    for (std::size_t i = 0; i < litter->size(); ++i) {
      std::string w = "litter[" + std::to_string(i) + "]";
      if (!(*litter)[i].is_string()) bad(w, "expected a path");
      std::string p = (*litter)[i].get<std::string>();
      if (!is_litter_path(p)) bad(w, "not a trash sibling of ours: " + p);
      m.litter.push_back(std::move(p));
    }
  }
  return m;
}

std::string serialize_manifest(const Manifest& m) {
  json doc = m.doc.is_object() ? m.doc : json::object();
  for (const char* key : {"modules", "rebinds", "captures"})
    if (!doc.contains(key) || doc[key].is_null()) doc[key] = json::array();
  doc["natives"] = json::array();
  for (const auto& e : m.natives) doc["natives"].push_back(to_json(e));
  doc.erase("running_patched");
  for (const auto& r : m.running)
    doc["running_patched"].push_back({{"path", r.path}, {"dev", r.dev}, {"ino", r.ino}, {"pid", r.pid},
                                      {"start_ticks", r.start_ticks}, {"cmdline", r.cmdline}, {"entry", r.entry}});
  doc.erase("untracked_outputs");
  if (!m.untracked.empty()) {
    doc["untracked_outputs"] = json::array();
    for (const auto& u : m.untracked) doc["untracked_outputs"].push_back(to_json(u, true));
  }
  doc.erase("litter");
  if (!m.litter.empty()) doc["litter"] = m.litter;
  if (!doc.contains("overlay_format")) doc["overlay_format"] = kManifestFormat;
  return dump_json_bytes(doc, 2) + "\n";
}

std::optional<Manifest> load_manifest(Disk& disk, const fs::path& overlay) {
  fs::path p = overlay / kManifestName;
  FileInfo fi = disk.info(p, Follow::no);
  if (!fi.exists()) return std::nullopt;
  if (fi.type != FileType::regular) throw ManifestError("manifest: " + p.string() + " is not a regular file");
  return parse_manifest(read_small_file(disk, p, kMaxManifestBytes));
}

void save_manifest(Disk& disk, const fs::path& overlay, const Manifest& m) {
  write_file_atomically(disk, overlay / kManifestName, serialize_manifest(m), 0644);
}

}  // namespace overlay
