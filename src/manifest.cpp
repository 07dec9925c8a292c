#include "overlay/manifest.hpp"

#include <algorithm>

#include "overlay/error.hpp"
#include "overlay/file_ops.hpp"
#include "overlay/hash.hpp"
#include "overlay/json_bytes.hpp"

namespace overlay {
namespace {

constexpr std::size_t kMaxManifestBytes = 64u << 20;
constexpr const char* kGuardKey = "python_tool_guard";

// Every reader below names the key it reads relative to the value it is given; the value's own
// place in the document is added as the error rises (read_at, read_items).
[[noreturn]] void bad(const std::string& key, const std::string& what) { throw ManifestError(key, what); }

std::string index_key(const char* key, std::size_t i) { return std::string(key) + "[" + std::to_string(i) + "]"; }

const json* find(const json& obj, const char* key) {
  auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

bool present(const json& obj, const char* key) {
  const json* v = find(obj, key);
  return v != nullptr && !v->is_null();
}

// obj[key] read as T by its from_json; a problem inside is named under key.
template <typename T>
T read_at(const json& obj, const std::string& key) {
  try {
    return obj.at(key).get<T>();
  } catch (const ManifestError& e) {
    throw e.under(key);
  }
}

template <typename T>
std::optional<T> opt_at(const json& obj, const char* key) {
  if (!present(obj, key)) return std::nullopt;
  return read_at<T>(obj, key);
}

// An absent or null list is empty; anything else must be a list of objects.
const json& array_of_objects(const json& obj, const char* key) {
  static const json empty = json::array();
  const json* v = find(obj, key);
  if (v == nullptr || v->is_null()) return empty;
  if (!v->is_array()) bad(key, "expected an array");
  for (std::size_t i = 0; i < v->size(); ++i)
    if (!(*v)[i].is_object()) bad(index_key(key, i), "expected an object");
  return *v;
}

// obj[key] as a list of T, each read by its from_json and named by its index.
template <typename T>
std::vector<T> read_items(const json& obj, const char* key) {
  const json& items = array_of_objects(obj, key);
  std::vector<T> out;
  out.reserve(items.size());
  for (std::size_t i = 0; i < items.size(); ++i) {
    try {
      out.push_back(items[i].get<T>());
    } catch (const ManifestError& e) {
      throw e.under(index_key(key, i));
    }
  }
  return out;
}

std::string req_string(const json& obj, const char* key) {
  const json* v = find(obj, key);
  if (v == nullptr) bad(key, "missing");
  if (!v->is_string()) bad(key, "expected a string");
  return v->get<std::string>();
}

std::optional<std::string> opt_string(const json& obj, const char* key) {
  const json* v = find(obj, key);
  if (v == nullptr || v->is_null()) return std::nullopt;
  if (!v->is_string()) bad(key, "expected a string or null");
  return v->get<std::string>();
}

std::string abs_path(const json& obj, const char* key) {
  std::string p = req_string(obj, key);
  fs::path fp(p);
  if (p.empty() || !fp.is_absolute()) bad(key, "not an absolute path: " + p);
  if (p.find('\0') != std::string::npos) bad(key, "contains a NUL byte");
  for (const auto& part : fp)
    if (part == "..") bad(key, "contains '..': " + p);
  return p;
}

std::string backup_path(const json& obj, const char* key) {
  std::string p = req_string(obj, key);
  if (!is_safe_relative(p)) bad(key, "backup path escapes the overlay: " + p);
  return p;
}

std::optional<std::string> opt_backup_path(const json& obj, const char* key) {
  if (!present(obj, key)) return std::nullopt;
  return backup_path(obj, key);
}

std::string sha(const json& obj, const char* key) {
  std::string s = req_string(obj, key);
  if (!is_sha256_hex(s)) bad(key, "expected a 64-digit hex SHA-256");
  return s;
}

std::optional<std::string> opt_sha(const json& obj, const char* key) {
  if (!present(obj, key)) return std::nullopt;
  return sha(obj, key);
}

bool opt_bool(const json& obj, const char* key, bool fallback) {
  const json* v = find(obj, key);
  if (v == nullptr || v->is_null()) return fallback;
  if (!v->is_boolean()) bad(key, "expected true or false");
  return v->get<bool>();
}

std::uint64_t req_unsigned(const json& j, const char* key) {
  const json* v = find(j, key);
  if (v == nullptr || !v->is_number_unsigned()) bad(key, "expected a non-negative integer");
  return v->get<std::uint64_t>();
}

std::optional<mode_t> opt_mode(const json& obj) {
  const json* v = find(obj, "mode");
  if (v == nullptr || v->is_null()) return std::nullopt;
  if (!v->is_number_unsigned() || v->get<std::uint64_t>() > 07777) bad("mode", "expected a mode 0..07777");
  return static_cast<mode_t>(v->get<std::uint64_t>());
}

// A stamp's keys (size, ino, mtime_ns) sit in the item itself, beside its other keys.
std::optional<FileStamp> opt_stamp(const json& j) {
  const json* size = find(j, "size");
  const json* ino = find(j, "ino");
  const json* mtime = find(j, "mtime_ns");
  if (size == nullptr || ino == nullptr || mtime == nullptr) return std::nullopt;
  if (!size->is_number_unsigned() || !ino->is_number_unsigned() || !mtime->is_number_integer())
    bad("", "size, ino and mtime_ns must be integers");
  return FileStamp{size->get<std::uint64_t>(), ino->get<std::uint64_t>(), mtime->get<std::int64_t>()};
}

void put_stamp(json& j, const std::optional<FileStamp>& st) {
  if (!st) return;
  j["size"] = st->size;
  j["ino"] = st->ino;
  j["mtime_ns"] = st->mtime_ns;
}

// The owner's keys (uid, gid) sit in the item itself too.
std::optional<FileOwner> opt_owner(const json& j) {
  const json* uid = find(j, "uid");
  const json* gid = find(j, "gid");
  if (uid == nullptr || gid == nullptr || uid->is_null() || gid->is_null()) return std::nullopt;
  if (!uid->is_number_unsigned() || !gid->is_number_unsigned() || uid->get<std::uint64_t>() > 0xfffffffeu ||
      gid->get<std::uint64_t>() > 0xfffffffeu)
    bad("", "uid and gid must be integers below 2^32 - 1");
  return FileOwner{uid->get<std::uint64_t>(), gid->get<std::uint64_t>()};
}

void put_owner(json& j, const std::optional<FileOwner>& o) {
  if (!o) return;
  j["uid"] = o->uid;
  j["gid"] = o->gid;
}

// A list of argv lists ("build_cmds"); absent or null is none.
std::vector<std::vector<std::string>> opt_build_cmds(const json& j) {
  std::vector<std::vector<std::string>> cmds;
  const json* v = find(j, "build_cmds");
  if (v == nullptr || v->is_null()) return cmds;
  if (!v->is_array()) bad("build_cmds", "expected a list of argv lists");
  for (std::size_t i = 0; i < v->size(); ++i) {
    const json& argv = (*v)[i];
    if (!argv.is_array() || argv.empty() ||
        !std::all_of(argv.begin(), argv.end(), [](const json& w) { return w.is_string(); }))
      bad(index_key("build_cmds", i), "expected a non-empty list of strings");
    cmds.push_back(argv.get<std::vector<std::string>>());
  }
  return cmds;
}

// A backed-up file's optional keys (an artifact that did not exist still has them validated).
void read_original_keys(const json& j, FileBackup& f) {
  f.mode = opt_mode(j);
  f.stamp = opt_stamp(j);
  f.owner = opt_owner(j);
  f.xattrs = opt_xattrs(j);
  f.same_inode = opt_backup_path(j, "same_inode");
}

// An entry's caches[] list holds its caches and, first, at most one python_tool_guard item.
void read_caches(const json& j, NativeEntry& e) {
  const json& caches = array_of_objects(j, "caches");
  for (std::size_t i = 0; i < caches.size(); ++i) {
    try {
      if (!opt_bool(caches[i], kGuardKey, false)) {
        e.caches.push_back(caches[i].get<CacheItem>());
        continue;
      }
      if (e.python_guard) bad("", "a second python_tool_guard");
      e.python_guard = PythonToolGuard{abs_path(caches[i], "dir"), backup_path(caches[i], "backup_tar")};
    } catch (const ManifestError& err) {
      throw err.under(index_key("caches", i));
    }
  }
}

json caches_json(const NativeEntry& e) {
  json out = json::array();
  if (e.python_guard)  // first: overlay_setup.py's revert stops on it before touching the entry
    out.push_back(
        {{"dir", e.python_guard->dir}, {"backup_tar", e.python_guard->stop}, {"existed", true}, {kGuardKey, true}});
  for (const auto& c : e.caches) out.push_back(c);
  return out;
}

void read_verify(const json& j, NativeEntry& e) {
  const json* v = find(j, "verify");
  if (v == nullptr || v->is_null()) return;
  if (!v->is_object()) bad("verify", "expected an object or null");
  try {
    e.verify_artifact = opt_string(*v, "artifact");
    e.verify_pre_sha256 = opt_sha(*v, "pre_sha256");
  } catch (const ManifestError& err) {
    throw err.under("verify");
  }
}

void read_owner(const json& j, NativeEntry& e) {
  const json* v = find(j, "owner");
  if (v == nullptr || v->is_null()) return;
  const json* pid = v->is_object() ? find(*v, "pid") : nullptr;
  const json* start = v->is_object() ? find(*v, "start_ticks") : nullptr;
  if (pid == nullptr || !pid->is_number_integer() || pid->get<long long>() <= 0 || pid->get<long long>() > 1 << 30)
    bad("owner", "expected {pid, start_ticks}");
  Owner o;
  o.pid = static_cast<pid_t>(pid->get<long long>());
  if (start != nullptr && start->is_number_unsigned()) o.start_ticks = start->get<std::uint64_t>();
  o.host = opt_string(*v, "host").value_or("");
  // A lease is "ENGINE_job": ID, whichever engine issued it; one of an engine this binary asks
  // wins over one it cannot (this tool writes one only).
  for (const auto& item : v->items()) {
    auto engine = engine_of_lease_key(item.key());
    std::string id = engine ? opt_string(*v, item.key().c_str()).value_or("") : "";
    if (id.empty() || (!o.lease.empty() && find_lease_engine(o.lease.engine) != nullptr)) continue;
    if (o.lease.empty() || find_lease_engine(*engine) != nullptr) o.lease = {*engine, id};
  }
  if (const json* ns = find(*v, "pid_ns"); ns != nullptr && ns->is_number_unsigned())
    o.pid_ns = ns->get<std::uint64_t>();
  e.owner = o;
}

// A key this tool wrote once and no longer has a value for goes; one it never knew stays.
void put_or_erase(json& j, const char* key, bool has, const json& value) {
  if (has)
    j[key] = value;
  else
    j.erase(key);
}

// The Python entries: the keys sitecustomize.py reads must have the right types.
void check_python_entries(const json& doc) {
  struct Kind {
    const char* list;
    std::vector<const char*> strings;
  };
  static const Kind kinds[] = {
      {"modules", {"module", "file"}},      {"rebinds", {"target", "impl_module", "impl_attr"}},
      {"captures", {"target", "out"}},      {"markers", {"target"}},
      {"hooks", {"module", "impl_module"}}, {"installers", {"id", "module"}}};
  for (const Kind& kind : kinds) {
    const json& items = array_of_objects(doc, kind.list);
    for (std::size_t i = 0; i < items.size(); ++i) {
      try {
        for (const char* k : kind.strings) req_string(items[i], k);
        if (const json* mx = find(items[i], "max");
            kind.list == std::string("captures") && mx != nullptr && !mx->is_number_integer())
          bad("max", "expected an integer");
      } catch (const ManifestError& e) {
        throw e.under(index_key(kind.list, i));
      }
    }
  }
}

std::vector<std::string> read_litter(const json& doc) {
  std::vector<std::string> out;
  const json* litter = find(doc, "litter");
  if (litter == nullptr || litter->is_null()) return out;
  if (!litter->is_array()) bad("litter", "expected an array of paths");
  for (std::size_t i = 0; i < litter->size(); ++i) {
    if (!(*litter)[i].is_string()) bad(index_key("litter", i), "expected a path");
    std::string p = (*litter)[i].get<std::string>();
    if (!is_litter_path(p)) bad(index_key("litter", i), "not a trash sibling of ours: " + p);
    out.push_back(std::move(p));
  }
  return out;
}

// A plain name (an entry or fold id): no '/', not empty, no NUL.
std::string plain_name(const json& obj, const char* key) {
  std::string s = req_string(obj, key);
  if (!is_safe_relative(s) || s.find('/') != std::string::npos) bad(key, "not a plain name: " + s);
  return s;
}

std::vector<std::string> names_at(const json& obj, const char* key, bool absolute) {
  std::vector<std::string> out;
  const json* v = find(obj, key);
  if (v == nullptr || v->is_null()) return out;
  if (!v->is_array()) bad(key, "expected an array");
  for (std::size_t i = 0; i < v->size(); ++i) {
    json one = {{index_key(key, i), (*v)[i]}};  // read as a key of its own, so a problem names it
    const std::string k = index_key(key, i);
    out.push_back(absolute ? abs_path(one, k.c_str()) : plain_name(one, k.c_str()));
  }
  return out;
}

json fold_json(const FoldMark& f, const char* side) {
  json j = {{side, f.overlay}, {"fold", f.fold}, {"entries", f.entries}};
  if (std::string(side) == "from") j["state"] = f.committed ? "committed" : "pending";
  return j;
}

void read_folds(const json& doc, Manifest& m) {
  if (present(doc, "fold_out")) {
    const json& v = doc["fold_out"];
    if (!v.is_object() || !v.contains("into")) bad("fold_out", "expected {into, fold, entries}");
    m.fold_out = read_at<FoldMark>(doc, "fold_out");
  }
  for (const json& f : array_of_objects(doc, "folds_in"))
    if (!f.contains("from")) bad("folds_in", "expected {from, fold, entries, state}");
  m.folds_in = read_items<FoldMark>(doc, "folds_in");
}

}  // namespace

std::optional<Xattrs> opt_xattrs(const json& j) {
  const json* v = find(j, "xattrs");
  if (v == nullptr || v->is_null()) return std::nullopt;
  if (!v->is_object()) bad("xattrs", "expected {name: base64 value}");
  Xattrs out;
  for (auto it = v->begin(); it != v->end(); ++it) {
    std::optional<std::string> value = it->is_string() ? from_base64(it->get<std::string>()) : std::nullopt;
    if (it.key().empty() || it.key().find('\0') != std::string::npos || !value)
      bad("xattrs." + it.key(), "expected a base64 value");
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

void from_json(const json& j, FoldMark& f) {
  if (!j.is_object()) bad("", "expected an object");
  f.overlay = abs_path(j, j.contains("into") ? "into" : "from");
  f.fold = plain_name(j, "fold");
  f.entries = names_at(j, "entries", false);
  std::string state = opt_string(j, "state").value_or("pending");
  if (state != "pending" && state != "committed") bad("state", "expected pending or committed");
  f.committed = state == "committed";
}

void from_json(const json& j, LayerRef& l) {
  if (!j.is_object()) bad("", "expected {overlay, entry, pristine_sha256}");
  l.overlay = abs_path(j, "overlay");
  l.entry = plain_name(j, "entry");
  l.pristine_sha256 = req_string(j, "pristine_sha256");
  if (!l.pristine_sha256.empty() && !is_sha256_hex(l.pristine_sha256))
    bad("pristine_sha256", "expected a 64-digit hex SHA-256 or \"\"");
}

void to_json(json& j, const LayerRef& l) {
  j = {{"overlay", l.overlay}, {"entry", l.entry}, {"pristine_sha256", l.pristine_sha256}};
}

void from_json(const json& j, UpperRef& u) {
  u.overlay = abs_path(j, "overlay");
  u.entry = plain_name(j, "entry");
  u.paths = names_at(j, "paths", true);
}

void to_json(json& j, const UpperRef& u) { j = {{"overlay", u.overlay}, {"entry", u.entry}, {"paths", u.paths}}; }

void from_json(const json& j, BuildPicture& b) {
  if (!j.is_object()) bad("", "expected {dirs, tracked, skipped, sha256}");
  b.dirs = names_at(j, "dirs", true);
  b.tracked = names_at(j, "tracked", true);
  b.skipped = names_at(j, "skipped", true);
  b.sha256 = req_string(j, "sha256");
  if (!is_sha256_hex(b.sha256)) bad("sha256", "expected a 64-digit hex SHA-256");
}

void to_json(json& j, const BuildPicture& b) {
  j = {{"dirs", b.dirs}, {"tracked", b.tracked}, {"skipped", b.skipped}, {"sha256", b.sha256}};
}

void from_json(const json& j, PinnedDir& p) {
  if (!j.is_object()) bad("", "expected {path, dev, ino}");
  p.path = abs_path(j, "path");
  p.dev = req_unsigned(j, "dev");
  p.ino = req_unsigned(j, "ino");
  p.below = opt_string(j, "below").value_or("");
  if (!p.below.empty() && !is_safe_relative(p.below)) bad("below", "not a relative path inside it: " + p.below);
}

void to_json(json& j, const PinnedDir& p) {
  j = {{"path", p.path}, {"dev", p.dev}, {"ino", p.ino}};
  if (!p.below.empty()) j["below"] = p.below;
}

void from_json(const json& j, FileBackup& f) {
  f.backup = backup_path(j, "backup");
  f.sha256 = sha(j, "sha256");
  read_original_keys(j, f);
}

// Its own keys only; an item merges them into its own (json::update).
void to_json(json& j, const FileBackup& f) {
  j = {{"backup", f.backup}, {"sha256", f.sha256}};
  if (f.mode) j["mode"] = *f.mode;
  put_stamp(j, f.stamp);
  put_owner(j, f.owner);
  put_xattrs(j, f.xattrs);
  if (f.same_inode) j["same_inode"] = *f.same_inode;
}

void from_json(const json& j, SourceItem& s) {
  s.install_path = abs_path(j, "install_path");
  from_json(j, static_cast<FileBackup&>(s));
  s.patched_sha256 = opt_sha(j, "patched_sha256");
  s.parent = opt_at<PinnedDir>(j, "parent");
  s.deleted = opt_bool(j, "deleted", false);
  s.layer = opt_at<LayerRef>(j, "layer");
  s.raw = j;
}

void to_json(json& j, const SourceItem& s) {
  j = s.raw;
  j["install_path"] = s.install_path;
  j.update(json(static_cast<const FileBackup&>(s)));
  if (s.patched_sha256) j["patched_sha256"] = *s.patched_sha256;
  if (s.parent) j["parent"] = *s.parent;
  if (s.deleted) j["deleted"] = true;
  put_or_erase(j, "layer", s.layer.has_value(), s.layer ? json(*s.layer) : json());
}

void from_json(const json& j, CreatedItem& c) {
  c.path = abs_path(j, "path");
  c.sha256 = sha(j, "sha256");
  c.parent = opt_at<PinnedDir>(j, "parent");
  c.layer = opt_at<LayerRef>(j, "layer");
  c.raw = j;
}

void to_json(json& j, const CreatedItem& c) {
  j = c.raw;
  j["path"] = c.path;
  j["sha256"] = c.sha256;
  if (c.parent) j["parent"] = *c.parent;
  put_or_erase(j, "layer", c.layer.has_value(), c.layer ? json(*c.layer) : json());
}

void from_json(const json& j, ArtifactItem& a) {
  a.path = abs_path(j, "path");
  a.existed = opt_bool(j, "existed", present(j, "backup"));
  if (a.existed)
    from_json(j, static_cast<FileBackup&>(a));
  else
    read_original_keys(j, a);
  a.parent = opt_at<PinnedDir>(j, "parent");
  a.layer = opt_at<LayerRef>(j, "layer");
  a.raw = j;
}

void to_json(json& j, const ArtifactItem& a) {
  j = a.raw;
  j["path"] = a.path;
  j["existed"] = a.existed;
  j.update(json(static_cast<const FileBackup&>(a)));
  if (!a.existed) j["backup"] = j["sha256"] = nullptr;
  if (a.parent) j["parent"] = *a.parent;
  put_or_erase(j, "layer", a.layer.has_value(), a.layer ? json(*a.layer) : json());
}

// Its path is checked against the cache dir it belongs to by that cache's from_json.
void from_json(const json& j, AsideDir& a) {
  if (!j.is_object()) bad("", "expected {path, dev, ino, uid}");
  a.path = abs_path(j, "path");
  a.dev = req_unsigned(j, "dev");
  a.ino = req_unsigned(j, "ino");
  a.uid = req_unsigned(j, "uid");
}

void to_json(json& j, const AsideDir& a) { j = {{"path", a.path}, {"dev", a.dev}, {"ino", a.ino}, {"uid", a.uid}}; }

void from_json(const json& j, CacheItem& c) {
  c.dir = abs_path(j, "dir");
  bool has_dir = present(j, "backup_dir");
  if (present(j, "aside") && has_dir) bad("", "both aside and backup_dir");
  c.aside = opt_at<AsideDir>(j, "aside");
  c.existed = opt_bool(j, "existed", present(j, "backup_tar") || has_dir) || c.aside.has_value();
  // an aside copy's path must be the sibling aside_path_of() derives from the cache dir
  fs::path p(c.aside ? c.aside->path : ""), d(c.dir);
  std::string prefix = hidden_stem(d.filename().string()) + ".overlay-aside-", name = p.filename().string();
  if (c.aside && (p.parent_path() != d.parent_path() || name.size() <= prefix.size() ||
                  name.compare(0, prefix.size(), prefix) != 0))
    bad("aside.path", "not the aside sibling of " + c.dir + ": " + c.aside->path);
  if (c.existed && has_dir) c.backup_dir = backup_path(j, "backup_dir");
  if (c.existed && !has_dir && !c.aside) c.backup_tar = backup_path(j, "backup_tar");
  c.sha256 = opt_sha(j, "sha256");
  c.parent = opt_at<PinnedDir>(j, "parent");
  c.layer = opt_at<LayerRef>(j, "layer");
  c.raw = j;
}

void to_json(json& j, const CacheItem& c) {
  j = c.raw;
  j["dir"] = c.dir;
  j["existed"] = c.existed;
  j["backup_tar"] = c.backup_tar ? json(*c.backup_tar) : json(nullptr);
  if (c.sha256) j["sha256"] = *c.sha256;
  if (c.backup_dir) j["backup_dir"] = *c.backup_dir;
  if (c.aside) j["aside"] = *c.aside;
  if (c.parent) j["parent"] = *c.parent;
  put_or_erase(j, "layer", c.layer.has_value(), c.layer ? json(*c.layer) : json());
}

void from_json(const json& j, UntrackedOutput& u) {
  u.path = abs_path(j, "path");
  u.change = req_string(j, "change");
  if (u.change != "created" && u.change != "changed" && u.change != "deleted")
    bad("change", "expected created, changed or deleted");
  std::optional<FileStamp> st = opt_stamp(j);
  if (!st) bad("", "size, ino and mtime_ns missing");
  u.stamp = *st;
  u.entry = opt_string(j, "entry").value_or("");
  u.build_cmds = opt_build_cmds(j);
  if (find(j, "clear_reason") != nullptr) u.clear_reason = req_string(j, "clear_reason");
  if (find(j, "clear_reason") != nullptr && u.clear_reason.empty()) bad("clear_reason", "empty");
}

void to_json(json& j, const UntrackedOutput& u) {
  j = {{"path", u.path}, {"change", u.change}};
  put_stamp(j, u.stamp);
  if (!u.entry.empty() || !u.build_cmds.empty()) {  // a reverted entry's, at the top level
    j["entry"] = u.entry;
    j["build_cmds"] = u.build_cmds;
  }
  if (!u.clear_reason.empty()) j["clear_reason"] = u.clear_reason;
}

namespace {

FileType file_type_at(const json& j, const char* key) {
  auto t = file_type_named(req_string(j, key));
  if (!t || *t == FileType::other) bad(key, "expected none, file, dir or symlink");
  return *t;
}

}  // namespace

void from_json(const json& j, BuildChange& c) {
  if (!j.is_object()) bad("", "expected an object");
  c.path = abs_path(j, "path");
  c.was = file_type_at(j, "was");
  if (c.was == FileType::regular) {
    c.backup = backup_path(j, "backup");
    c.sha256 = sha(j, "sha256");
  }
  if (c.was == FileType::symlink) c.target = req_string(j, "target");
  if (c.was == FileType::regular) c.xattrs = opt_xattrs(j);
  if (c.was != FileType::none) {
    c.mode = static_cast<mode_t>(req_unsigned(j, "mode") & 07777);
    c.owner = FileOwner{req_unsigned(j, "uid"), req_unsigned(j, "gid")};
    std::optional<FileStamp> was = opt_stamp(j);
    if (!was) bad("", "size, ino and mtime_ns missing");
    c.before = *was;
  }
  c.left = file_type_at(j, "left");
  if (c.left == FileType::regular) {
    const json* left = find(j, "left_stamp");
    std::optional<FileStamp> st = left != nullptr && left->is_object() ? opt_stamp(*left) : std::nullopt;
    if (!st) bad("left_stamp", "size, ino and mtime_ns missing");
    c.stamp = *st;
  }
}

void to_json(json& j, const BuildChange& c) {
  j = {{"path", c.path}, {"was", file_type_name(c.was)}, {"left", file_type_name(c.left)}};
  if (c.was == FileType::regular) j["backup"] = c.backup, j["sha256"] = c.sha256;
  if (c.was == FileType::regular) put_xattrs(j, c.xattrs);
  if (c.was == FileType::symlink) j["target"] = c.target;
  if (c.was != FileType::none) {
    j["mode"] = c.mode, j["uid"] = c.owner.uid, j["gid"] = c.owner.gid;
    put_stamp(j, c.before);
  }
  if (c.left == FileType::regular) {
    json st = json::object();
    put_stamp(st, c.stamp);
    j["left_stamp"] = st;
  }
}

void from_json(const json& j, RunningPatched& r) {
  r.path = abs_path(j, "path");
  r.dev = req_unsigned(j, "dev");
  r.ino = req_unsigned(j, "ino");
  r.pid = static_cast<std::int64_t>(req_unsigned(j, "pid"));
  if (r.pid <= 0 || r.pid > 1 << 30) bad("pid", "not a process id");
  r.start_ticks = req_unsigned(j, "start_ticks");
  r.cmdline = opt_string(j, "cmdline").value_or("");
  r.entry = opt_string(j, "entry").value_or("");
}

void to_json(json& j, const RunningPatched& r) {
  // pid as unsigned, the type from_json asks for: the same in memory as after a dump and parse
  j = {{"path", r.path},
       {"dev", r.dev},
       {"ino", r.ino},
       {"pid", static_cast<std::uint64_t>(r.pid)},
       {"start_ticks", r.start_ticks},
       {"cmdline", r.cmdline},
       {"entry", r.entry}};
}

void from_json(const json& j, NativeEntry& e) {
  if (!j.is_object()) bad("", "expected an object");
  e.id = opt_string(j, "id").value_or("");
  if (!e.id.empty() && !is_safe_relative(e.id)) bad("id", "not a plain name");
  e.sources = read_items<SourceItem>(j, "sources");
  e.created = read_items<CreatedItem>(j, "created_files");
  e.artifacts = read_items<ArtifactItem>(j, "artifacts");
  read_caches(j, e);
  e.build_cmds = opt_build_cmds(j);
  e.build_cwd = opt_string(j, "build_cwd");
  e.build_cwd_defaulted = opt_bool(j, "build_cwd_defaulted", false);
  read_verify(j, e);
  read_owner(j, e);
  e.build_log = opt_string(j, "build_log");
  if (e.build_log && !is_safe_relative(*e.build_log)) bad("build_log", "path escapes the overlay");
  if (const json* t = find(j, "created_at"); t != nullptr && t->is_number()) e.created_at = t->get<double>();
  e.patch_id = opt_string(j, "patch_id");
  if (const json* k = find(j, "kept"); k != nullptr && k->is_boolean()) e.kept = k->get<bool>();
  e.untracked = read_items<UntrackedOutput>(j, "untracked_outputs");
  e.build_traced = opt_bool(j, "build_traced", false);
  e.build_changes = read_items<BuildChange>(j, "build_changes");
  if (const json* u = find(j, "build_unobserved"); u != nullptr && !u->is_null()) {
    if (!u->is_array() || !std::all_of(u->begin(), u->end(), [](const json& x) { return x.is_string(); }))
      bad("build_unobserved", "expected an array of strings");
    e.build_unobserved = u->get<std::vector<std::string>>();
  }
  e.build_untraced = opt_string(j, "build_untraced");
  if (const json* b = find(j, "build_picture"); b != nullptr && !b->is_null()) {
    try {
      e.build_picture = b->get<BuildPicture>();
    } catch (const ManifestError& err) {
      throw err.under("build_picture");
    }
  }
  e.served_from = opt_string(j, "build_served_from");
  e.build_failed = opt_string(j, "build_failed");
  e.folded_from = opt_string(j, "folded_from");
  e.raw = j;
}

void to_json(json& j, const NativeEntry& e) {
  j = e.raw;
  if (!e.id.empty()) j["id"] = e.id;
  j["sources"] = e.sources;
  if (!e.created.empty()) j["created_files"] = e.created;
  j["artifacts"] = e.artifacts;
  j["caches"] = caches_json(e);
  j["build_cmds"] = e.build_cmds;
  j["build_cwd"] = e.build_cwd ? json(*e.build_cwd) : json(nullptr);
  put_or_erase(j, "build_cwd_defaulted", e.build_cwd_defaulted, true);
  if (e.verify_artifact)
    j["verify"] = {{"artifact", *e.verify_artifact},
                   {"pre_sha256", e.verify_pre_sha256 ? json(*e.verify_pre_sha256) : json(nullptr)}};
  else if (!j.contains("verify"))
    j["verify"] = nullptr;
  put_or_erase(j, "owner", e.owner.has_value(), e.owner ? json(*e.owner) : json());
  put_or_erase(j, "kept", e.kept, true);
  if (e.build_log) j["build_log"] = *e.build_log;
  if (e.created_at) j["created_at"] = *e.created_at;
  if (e.patch_id) j["patch_id"] = *e.patch_id;
  put_or_erase(j, "untracked_outputs", !e.untracked.empty(), e.untracked);
  put_or_erase(j, "build_traced", e.build_traced, true);
  put_or_erase(j, "build_changes", !e.build_changes.empty(), e.build_changes);
  put_or_erase(j, "build_unobserved", !e.build_unobserved.empty(), e.build_unobserved);
  put_or_erase(j, "build_untraced", e.build_untraced.has_value(), e.build_untraced ? json(*e.build_untraced) : json());
  put_or_erase(j, "build_picture", e.build_picture.has_value(), e.build_picture ? json(*e.build_picture) : json());
  put_or_erase(j, "build_served_from", e.served_from.has_value(), e.served_from ? json(*e.served_from) : json());
  put_or_erase(j, "build_failed", e.build_failed.has_value(), e.build_failed ? json(*e.build_failed) : json());
  put_or_erase(j, "folded_from", e.folded_from.has_value(), e.folded_from ? json(*e.folded_from) : json());
}

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
  // Not the trash or half-restored sibling of an aside copy ("..x.overlay-aside-ID.overlay-trash-…"):
  // that is litter, which the sweeps beside the aside name must find.
  auto at = name.find(".overlay-aside-");
  return name.size() > 1 && name[0] == '.' && at != std::string::npos &&
         name.find(".overlay-trash-", at) == std::string::npos &&
         name.find(".overlay-restore-", at) == std::string::npos;
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

namespace {

bool is_python_section(const std::string& key);

// The document `text` with its objects' keys in file order, the entries of its Python sections
// dropped (what serialize_as_upstream needs, cheap even for thousands of entries: an entry's keys
// are written in its add-*'s order); null where nlohmann cannot read it (bytes that are not UTF-8:
// a byte path), and then the default order applies.
nlohmann::ordered_json read_layout(const std::string& text) {
  std::vector<bool> section;  // per open container: whether it is a Python section's array
  std::string top_key;
  auto keep = [&](int depth, nlohmann::ordered_json::parse_event_t ev, nlohmann::ordered_json& parsed) {
    using E = nlohmann::ordered_json::parse_event_t;
    bool inside = std::find(section.begin(), section.end(), true) != section.end();
    if (ev == E::key && depth == 1) top_key = parsed.get<std::string>();
    if (ev == E::object_start || ev == E::array_start) {
      section.push_back(ev == E::array_start && depth == 1 && is_python_section(top_key));
      return true;
    }
    if (ev == E::object_end || ev == E::array_end) {
      bool was_section = section.back();
      section.pop_back();
      return was_section || std::find(section.begin(), section.end(), true) == section.end();
    }
    return !inside || ev == E::key;
  };
  try {
    return nlohmann::ordered_json::parse(text, keep);
  } catch (const std::exception&) {
    return nullptr;
  }
}

}  // namespace

Manifest parse_manifest(const std::string& text) {
  Manifest m;
  try {
    m.doc = parse_json_bytes(text);
  } catch (const json::exception& e) {  // parse_error, and out_of_range for numbers that overflow
    throw ManifestError(std::string("manifest: not valid JSON (") + e.what() + ")");
  }
  if (!m.doc.is_object()) bad("", "expected a JSON object");
  if (!m.doc.contains("natives") && !m.doc.contains("overlay_format")) m.layout = read_layout(text);
  check_python_entries(m.doc);
  m.natives = read_items<NativeEntry>(m.doc, "natives");
  m.untracked = read_items<UntrackedOutput>(m.doc, "untracked_outputs");
  m.running = read_items<RunningPatched>(m.doc, "running_patched");
  m.litter = read_litter(m.doc);
  m.layers_above = read_items<UpperRef>(m.doc, "layers_above");
  read_folds(m.doc, m);
  return m;
}

namespace {

// v3's sections in the order its _ensure_overlay writes them, and each entry's keys in the order
// its add-* writes them; later versions' sections after them. Anything else follows, sorted.
const std::vector<std::pair<std::string, std::vector<std::string>>>& upstream_order() {
  static const std::vector<std::pair<std::string, std::vector<std::string>>> order = {
      {"modules", {"module", "file"}},
      {"rebinds", {"target", "impl_module", "impl_attr"}},
      {"markers", {"target"}},
      {"captures", {"target", "out", "max"}},
      {"installers", {"id", "module", "callable", "required", "targets", "kernels"}},
      {"hooks", {"module", "impl_module", "impl_attr"}},
  };
  return order;
}

bool is_python_section(const std::string& key) {
  for (const auto& [name, keys] : upstream_order())
    if (name == key) return true;
  return false;
}

// `v` with each object's keys in the order `layout` (the same place in the document as read) has
// them, then `first`'s, then the rest sorted; an array's elements each like the layout's element
// at its index (a Python section's entries have none: upstream writes an entry's keys as its add-*
// made them).
nlohmann::ordered_json like_layout(const json& v, const nlohmann::ordered_json* layout,
                                   const std::vector<std::string>& first) {
  if (v.is_array()) {
    nlohmann::ordered_json out = nlohmann::ordered_json::array();
    for (std::size_t i = 0; i < v.size(); ++i)
      out.push_back(like_layout(
          v[i], layout != nullptr && layout->is_array() && i < layout->size() ? &(*layout)[i] : nullptr, {}));
    return out;
  }
  if (!v.is_object()) return nlohmann::ordered_json(v);
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  if (layout != nullptr && layout->is_object())
    for (auto it = layout->begin(); it != layout->end(); ++it)
      if (v.contains(it.key())) out[it.key()] = like_layout(v[it.key()], &it.value(), {});
  for (const auto& k : first)
    if (v.contains(k) && !out.contains(k)) out[k] = like_layout(v[k], nullptr, {});
  for (const auto& [k, x] : v.items())  // std::map: sorted
    if (!out.contains(k)) out[k] = like_layout(x, nullptr, {});
  return out;
}

nlohmann::ordered_json ordered_object(const json& obj, const std::vector<std::string>& first) {
  return like_layout(obj, nullptr, first);
}

// A Python-only manifest as overlay_setup.py writes it for the same calls (json.dump, indent 2,
// no final newline; a manifest it read keeps its keys' order, new sections after them):
// downstream tools hash its bytes to tell overlays apart.
std::string serialize_as_upstream(const json& doc, const nlohmann::ordered_json& layout) {
  std::vector<std::string> sections;
  for (const auto& [name, keys] : upstream_order()) sections.push_back(name);
  nlohmann::ordered_json out = like_layout(doc, &layout, sections);
  for (const auto& [name, keys] : upstream_order()) {
    if (!out.contains(name) || !out[name].is_array()) continue;
    nlohmann::ordered_json entries = nlohmann::ordered_json::array();
    for (const auto& e : doc[name])
      entries.push_back(e.is_object() ? ordered_object(e, keys) : nlohmann::ordered_json(e));
    out[name] = std::move(entries);
  }
  return dump_json_bytes_ascii(out, 2);
}

}  // namespace

std::string serialize_manifest(const Manifest& m) {
  json doc = m.doc.is_object() ? m.doc : json::object();
  // Never a native entry or record: the bytes v3 writes. Once native, always this tool's form.
  bool python_only = m.natives.empty() && m.running.empty() && m.untracked.empty() && m.litter.empty() &&
                     m.layers_above.empty() && !m.fold_out && m.folds_in.empty() && !doc.contains("natives") &&
                     !doc.contains("overlay_format");
  if (python_only) {
    for (const char* key : {"modules", "rebinds", "markers", "captures"})
      if (!doc.contains(key) || doc[key].is_null()) doc[key] = json::array();
    return serialize_as_upstream(doc, m.layout);
  }
  for (const char* key : {"modules", "rebinds", "captures"})
    if (!doc.contains(key) || doc[key].is_null()) doc[key] = json::array();
  doc["natives"] = m.natives;
  put_or_erase(doc, "running_patched", !m.running.empty(), m.running);
  put_or_erase(doc, "untracked_outputs", !m.untracked.empty(), m.untracked);
  put_or_erase(doc, "litter", !m.litter.empty(), m.litter);
  put_or_erase(doc, "layers_above", !m.layers_above.empty(), m.layers_above);
  put_or_erase(doc, "fold_out", m.fold_out.has_value(), m.fold_out ? fold_json(*m.fold_out, "into") : json());
  json folds = json::array();
  for (const auto& f : m.folds_in) folds.push_back(fold_json(f, "from"));
  put_or_erase(doc, "folds_in", !m.folds_in.empty(), folds);
  if (!doc.contains("overlay_format")) doc["overlay_format"] = kManifestFormat;
  return dump_json_bytes(doc, 2) + "\n";
}

std::optional<Manifest> load_manifest(DiskReader& disk, const fs::path& overlay) {
  fs::path p = overlay / kManifestName;
  FileInfo fi = disk.info(p, Follow::no);
  if (!fi.exists()) return std::nullopt;
  if (fi.type != FileType::regular) throw ManifestError("manifest: " + p.string() + " is not a regular file");
  return parse_manifest(read_small_file(disk, p, kMaxManifestBytes));
}

ManifestCache::Record& ManifestCache::load(const std::string& overlay, Record& r) {
  fs::path p = fs::path(overlay) / kManifestName;
  try {
    FileInfo fi = disk_.info(p, Follow::no);
    if (!fi.exists()) return r = Record{std::nullopt, std::nullopt, "", r.parses};
    if (fi.type != FileType::regular) throw ManifestError("manifest: " + p.string() + " is not a regular file");
    std::string bytes = read_small_file(disk_, p, kMaxManifestBytes);
    if (r.bytes && *r.bytes == bytes && r.error.empty()) return r;  // the record parsed before
    r = Record{std::nullopt, std::move(bytes), "", r.parses + 1};
    r.manifest = parse_manifest(*r.bytes);
  } catch (const Error& e) {
    r = Record{std::nullopt, std::nullopt, e.what(), r.parses};  // there, but not a record anyone can read
  }
  return r;
}

const std::optional<Manifest>& ManifestCache::get(const std::string& overlay) {
  auto it = cache_.find(overlay);
  if (it != cache_.end()) return it->second.manifest;
  Record& r = cache_[overlay];
  return load(overlay, r).manifest;
}

bool ManifestCache::unreadable(const std::string& overlay) { return !why_unreadable(overlay).empty(); }

const std::string& ManifestCache::why_unreadable(const std::string& overlay) {
  get(overlay);
  return cache_[overlay].error;
}

const std::optional<Manifest>& ManifestCache::reread(const std::string& overlay) {
  Record& r = load(overlay, cache_[overlay]);
  if (!r.error.empty()) throw ManifestError(r.error);
  return r.manifest;
}

void ManifestCache::reread_all() {
  for (auto& [overlay, r] : cache_) load(overlay, r);
}

void ManifestCache::put(const std::string& overlay, const Manifest& m) {
  Record& r = cache_[overlay];
  r = Record{m, std::nullopt, "", r.parses};
}

std::size_t ManifestCache::parses(const std::string& overlay) const {
  auto it = cache_.find(overlay);
  return it == cache_.end() ? 0 : it->second.parses;
}

void save_manifest(Disk& disk, const fs::path& overlay, const Manifest& m, NameDurable name) {
  write_file_atomically(disk, overlay / kManifestName, serialize_manifest(m), 0644, name);
}

void save_manifest(Disk& disk, const DirHandle& overlay, const Manifest& m) {
  write_file_atomically(disk, At(overlay, kManifestName), serialize_manifest(m), 0644);
}

}  // namespace overlay
