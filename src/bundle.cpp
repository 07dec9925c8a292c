#include "overlay/bundle.hpp"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <map>

#include <spdlog/spdlog.h>

#include "overlay/copy_pipeline.hpp"
#include "overlay/error.hpp"
#include "overlay/file_ops.hpp"
#include "overlay/hash.hpp"
#include "overlay/holds.hpp"
#include "overlay/json_bytes.hpp"
#include "overlay/manifest.hpp"
#include "overlay/native_revert.hpp"
#include "overlay/stack.hpp"
#include "overlay/words.hpp"

namespace overlay {
namespace {

constexpr const char* kFormat = "overlay-bundle";
constexpr std::size_t kMaxBundleJson = 64u << 20;

// Where a bundle's relative paths hang: the install root, and the home directory ("~/…").
struct Anchors {
  fs::path root, home;
};

fs::path home_dir() {
  const char* h = std::getenv("HOME");
  return h != nullptr && *h == '/' ? absolute_normal(h) : fs::path();
}

bool under(const fs::path& p, const fs::path& dir) {
  if (dir.empty()) return false;
  auto rel = p.lexically_relative(dir);
  return !rel.empty() && *rel.begin() != "..";
}

// p relative to the deeper of the two anchors that holds it: the root ("." for the root itself),
// or the home directory ("~/…"). The same rule as encode_words, so a file and the build command
// that names it hang on one anchor (found by a probe: a file under $HOME was written root-relative
// while its build command said {home}, and a replay under another $HOME patched the exporter's).
std::string encode(const fs::path& p, const Anchors& a) {
  bool home_deeper = a.home.string().size() > a.root.string().size();
  if (home_deeper && under(p, a.home) && p != a.home) return "~/" + p.lexically_relative(a.home).string();
  if (under(p, a.root)) return p.lexically_relative(a.root).string();
  if (under(p, a.home) && p != a.home) return "~/" + p.lexically_relative(a.home).string();
  throw Error(p.string() + " lies outside the root " + a.root.string() +
              " and the home directory: pass --root above it");
}

bool valid_encoded(const std::string& s) {
  if (s == ".") return true;
  std::string rel = s.rfind("~/", 0) == 0 ? s.substr(2) : s;
  return is_safe_relative(rel);
}

fs::path decode(const std::string& s, const Anchors& a) {
  if (s == ".") return a.root;
  if (s.rfind("~/", 0) == 0) {
    if (a.home.empty()) throw Error("the bundle names " + s + ", but $HOME is not set");
    return a.home / s.substr(2);
  }
  return a.root / s;
}

bool path_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '.' || c == '_' || c == '-'; }

// Every occurrence of `dir` in `word` that is a whole path prefix (not inside a longer name).
std::string replace_dir(const std::string& word, const std::string& dir, const std::string& token) {
  if (dir.empty() || dir == "/") return word;
  std::string out;
  std::size_t i = 0;
  for (std::size_t at; (at = word.find(dir, i)) != std::string::npos;) {
    std::size_t end = at + dir.size();
    bool whole =
        (at == 0 || !path_char(word[at - 1])) && (end == word.size() || word[end] == '/' || !path_char(word[end]));
    out += word.substr(i, at - i) + (whole ? token : dir);
    i = end;
  }
  return out + word.substr(i);
}

std::vector<std::string> encode_words(const std::vector<std::string>& argv, const Anchors& a) {
  std::vector<std::string> out;
  for (const auto& w : argv) {
    if (w.find("{root}") != std::string::npos || w.find("{home}") != std::string::npos)
      throw Error("a build command holds \"{root}\" or \"{home}\", which a bundle uses for the install's paths: " +
                  join_words(argv));
    // The longer first: a root inside the home directory is the root.
    bool root_first = a.root.string().size() >= a.home.string().size();
    std::string x = root_first ? replace_dir(replace_dir(w, a.root.string(), "{root}"), a.home.string(), "{home}")
                               : replace_dir(replace_dir(w, a.home.string(), "{home}"), a.root.string(), "{root}");
    out.push_back(std::move(x));
  }
  return out;
}

std::string substitute(std::string w, const std::string& token, const std::string& value) {
  for (std::size_t at; (at = w.find(token)) != std::string::npos;) w.replace(at, token.size(), value);
  return w;
}

std::vector<std::string> decode_words(const std::vector<std::string>& argv, const Anchors& a) {
  std::vector<std::string> out;
  for (const auto& w : argv)
    out.push_back(substitute(substitute(w, "{root}", a.root.string()), "{home}", a.home.string()));
  return out;
}

const char* change_word(SwapKind k) {
  return k == SwapKind::modify ? "modify" : k == SwapKind::create ? "create" : "delete";
}

// ---- export

// One file's change across the overlay's entries: the bytes before the first and after the last.
struct FlatFile {
  std::string pristine, patched;
};

struct FlatEntry {
  std::string from_entry;
  std::optional<std::string> patch_id;
  std::vector<std::string> files;  // in order of first appearance
  std::vector<fs::path> artifacts, caches;
  std::vector<std::vector<std::string>> build_cmds;
  std::optional<fs::path> build_cwd;
  bool cwd_defaulted = false;  // the caller's directory, not a directory the build named
};

struct Flat {
  std::vector<FlatEntry> entries;
  std::map<std::string, FlatFile> files;
  std::map<std::string, std::size_t> owner;  // file -> the flat entry that applies it
};

template <typename T>
void add_unique(std::vector<T>& v, const T& x) {
  if (std::find(v.begin(), v.end(), x) == v.end()) v.push_back(x);
}

// The overlay's entries as bundle entries: each file once, in the first entry that changes it,
// with the bytes before that entry and after the last; an entry that changes no new file lends
// its artifacts, caches and build commands to the entry that has its first file.
Flat flatten(const Manifest& m) {
  Flat f;
  for (const auto& e : m.natives) {
    // A build's directory only where there is a build (an entry without one recorded wherever its caller stood).
    FlatEntry fe;
    fe.from_entry = e.id;
    fe.patch_id = e.patch_id;
    fe.build_cmds = e.build_cmds;
    if (e.build_cwd && !e.build_cmds.empty()) fe.build_cwd = fs::path(*e.build_cwd);
    fe.cwd_defaulted = e.build_cwd_defaulted;
    std::optional<std::size_t> first_owner;
    auto change = [&](const std::string& path, const std::string& before, const std::string& after,
                      const std::optional<LayerRef>& l) {
      auto it = f.files.find(path);
      if (it == f.files.end()) {
        f.files[path] = FlatFile{l ? l->pristine_sha256 : before, after};
        f.owner[path] = f.entries.size();
        fe.files.push_back(path);
      } else {
        it->second.patched = after;
        if (!first_owner) first_owner = f.owner[path];
      }
    };
    for (const auto& s : e.sources)
      change(s.install_path, s.sha256, s.deleted ? "" : s.patched_sha256.value_or(""), s.layer);
    for (const auto& c : e.created) change(c.path, "", c.sha256, c.layer);
    for (const auto& a : e.artifacts) fe.artifacts.emplace_back(a.path);
    for (const auto& c : e.caches) fe.caches.emplace_back(c.dir);
    if (!fe.files.empty() || !first_owner) {
      f.entries.push_back(std::move(fe));
      continue;
    }
    FlatEntry& to = f.entries[*first_owner];
    for (const auto& a : fe.artifacts) add_unique(to.artifacts, a);
    for (const auto& c : fe.caches) add_unique(to.caches, c);
    for (const auto& c : fe.build_cmds) add_unique(to.build_cmds, c);
  }
  for (auto it = f.files.begin(); it != f.files.end();)  // created, then deleted again: no change
    it = it->second.pristine.empty() && it->second.patched.empty() ? f.files.erase(it) : std::next(it);
  for (auto& e : f.entries) std::erase_if(e.files, [&](const std::string& p) { return f.files.count(p) == 0; });
  return f;
}

// The deepest directory holding every path outside the home directory (`dirs` are directories
// themselves, the rest files).
fs::path common_root(const Flat& f, const fs::path& home) {
  std::optional<fs::path> root;
  auto take = [&](const fs::path& dir) {
    if (under(dir, home) && dir != home) return;
    if (!root) root = dir;
    while (!(*root == dir || under(dir, *root))) *root = root->parent_path();
  };
  for (const auto& [p, _] : f.files) take(fs::path(p).parent_path());
  for (const auto& e : f.entries) {
    for (const auto& a : e.artifacts) take(a.parent_path());
    for (const auto& c : e.caches) take(c);
    if (e.build_cwd && !e.cwd_defaulted) take(*e.build_cwd);
  }
  return root.value_or(home.empty() ? fs::path("/") : home);
}

// A build directory nobody named (add-native without --build-cwd: wherever the caller stood, an
// agent's task dir) is kept only where it lies under the root; elsewhere the bundle names none and
// the replay builds in the root, said here, so the bundle neither pins that directory nor fails
// once it is gone.
std::vector<std::string> unpin_defaulted_cwds(Flat& f, const Anchors& a) {
  std::vector<std::string> notes;
  for (auto& e : f.entries) {
    if (!e.cwd_defaulted || !e.build_cwd || *e.build_cwd == a.root || under(*e.build_cwd, a.root)) continue;
    notes.push_back("entry " + e.from_entry + " was built in " + e.build_cwd->string() +
                    ", where its caller stood (no --build-cwd): the replay builds it in the root " + a.root.string() +
                    " (give add-native --build-cwd where the build needs a directory)");
    e.build_cwd.reset();
  }
  return notes;
}

// The bytes each file holds now must be what the overlay's top change put there.
void check_exportable(Disk& disk, const fs::path& overlay, const Flat& f) {
  for (const auto& [p, ff] : f.files) {
    FileInfo fi = disk.info(p, Follow::no);
    std::string now = !fi.exists() ? "" : fi.type == FileType::regular ? hash_file(disk, p) : "(not a regular file)";
    if (now != ff.patched)
      throw Error(p + " holds other bytes than the change of " + overlay.string() + " put there (sha256 " +
                  (now.empty() ? std::string("none: absent") : now.substr(0, 16)) +
                  "): a layer above it, or a hand edit; revert that first");
  }
}

// The root as the bundle records it: "~" or "~/…" where it is the home directory or below it (a
// replay by another user, or on another machine, takes its own), else the absolute path.
std::string root_text(const Anchors& a) {
  if (a.root == a.home && !a.home.empty()) return "~";
  if (under(a.root, a.home)) return "~/" + a.root.lexically_relative(a.home).string();
  return a.root.string();
}

json bundle_json(const Flat& f, const Anchors& a, const std::vector<std::vector<std::string>>& file_names) {
  using namespace std::chrono;
  json j = {{"format", kFormat},
            {"version", kBundleVersion},
            {"root", root_text(a)},
            {"created_at", duration<double>(system_clock::now().time_since_epoch()).count()},
            {"entries", json::array()}};
  for (std::size_t k = 0; k < f.entries.size(); ++k) {
    const FlatEntry& e = f.entries[k];
    json je = {{"from_entry", e.from_entry},
               {"files", json::array()},
               {"artifacts", json::array()},
               {"caches", json::array()}};
    if (e.patch_id) je["patch_id"] = *e.patch_id;
    for (std::size_t i = 0; i < e.files.size(); ++i) {
      const FlatFile& ff = f.files.at(e.files[i]);
      SwapKind kind = ff.pristine.empty() ? SwapKind::create : ff.patched.empty() ? SwapKind::remove : SwapKind::modify;
      je["files"].push_back({{"path", encode(e.files[i], a)},
                             {"change", change_word(kind)},
                             {"pristine_sha256", ff.pristine},
                             {"patched_sha256", ff.patched},
                             {"file", file_names[k][i]}});
    }
    for (const auto& p : e.artifacts) je["artifacts"].push_back(encode(p, a));
    for (const auto& p : e.caches) je["caches"].push_back(encode(p, a));
    je["build_cmds"] = json::array();
    for (const auto& c : e.build_cmds) je["build_cmds"].push_back(encode_words(c, a));
    je["build_cwd"] = e.build_cwd ? json(encode(*e.build_cwd, a)) : json(nullptr);
    j["entries"].push_back(std::move(je));
  }
  return j;
}

}  // namespace

ExportReport export_bundle(Disk& disk, const fs::path& overlay_in, const fs::path& out_in,
                           const std::optional<fs::path>& root_in) {
  fs::path overlay = absolute_normal(overlay_in), out = absolute_normal(out_in);
  auto m = load_manifest(disk, overlay);
  if (!m || m->natives.empty()) throw Error("nothing to export: no native entry in " + overlay.string());
  if (m->fold_out)
    throw Error("a fold of " + overlay.string() + " into " + m->fold_out->overlay +
                " was interrupted: run `overlay revert` or `overlay fold` to settle it first");
  if (disk.info(out, Follow::no).exists())
    throw Error("--out exists: " + out.string() + " (export writes a new directory)");
  FileInfo parent = disk.info(out.parent_path(), Follow::yes);
  if (parent.exists() && parent.type != FileType::directory)
    throw Error("--out: " + out.parent_path().string() + " is not a directory");
  for (const auto& e : m->natives)
    for (const auto& p : tracked_paths(e))
      if (const LayerRef* l = layer_of(e, p))
        throw Error(overlay.string() + " is stacked on " + l->overlay + " (" + p +
                    "): fold it into that overlay and export that one " + "(a bundle replays onto a pristine install)");
  Flat f = flatten(*m);
  check_exportable(disk, overlay, f);
  make_dirs(disk, out.parent_path());
  Anchors a{root_in ? absolute_normal(*root_in) : fs::path(), home_dir()};
  if (a.root.empty()) a.root = common_root(f, a.home);
  std::vector<std::string> notes = unpin_defaulted_cwds(f, a);
  // Written whole under a hidden name beside --out, every byte durable, then renamed in: the
  // install is reverted right after an export, so the bundle must survive a power cut by then.
  fs::path tmp = sibling_temp_path(out, "overlay-new");
  std::vector<fs::path> dirs{tmp};
  std::vector<std::vector<std::string>> names(f.entries.size());
  try {
    disk.make_dir(tmp, 0755);
    for (std::size_t k = 0; k < f.entries.size(); ++k)
      for (const auto& p : f.entries[k].files) {
        std::string enc = encode(p, a);
        std::string rel =
            "files/" + std::to_string(k) + "/" + (enc.rfind("~/", 0) == 0 ? "home/" + enc.substr(2) : "root/" + enc);
        const FlatFile& ff = f.files.at(p);
        names[k].push_back(ff.patched.empty() ? "" : rel);
        if (ff.patched.empty()) continue;
        for (fs::path d = fs::path(rel).parent_path(); !d.empty(); d = d.parent_path()) add_unique(dirs, tmp / d);
        make_dirs(disk, (tmp / rel).parent_path());
        if (copy_file_hashing(disk, fs::path(p), tmp / rel, 0644, Durable::yes).sha256 != ff.patched)
          throw Error(p + " changed while it was exported");
      }
    std::string text = dump_json_bytes(bundle_json(f, a, names), 2) + "\n";
    write_file_atomically(disk, tmp / kBundleFile, text, 0644);
    for (auto it = dirs.rbegin(); it != dirs.rend(); ++it) disk.sync_dir(*it);
    disk.rename(tmp, out);
    // Renamed in but not durable (the directory's fsync failed): taken out again, as the Error says.
    tmp = out;
    disk.sync_dir(out.parent_path());
  } catch (...) {
    if (disk.info(tmp, Follow::no).exists()) remove_tree(disk, tmp);
    throw;
  }
  return {out, a.root, f.entries.size(), f.files.size(), notes};
}

namespace {

// ---- read

[[noreturn]] void bad_bundle(const fs::path& dir, const std::string& what) {
  throw Error("bundle " + dir.string() + ": " + what);
}

std::string str_at(const fs::path& dir, const json& j, const char* key, const std::string& where) {
  if (!j.is_object() || !j.contains(key) || !j[key].is_string()) bad_bundle(dir, where + key + ": expected a string");
  return j[key].get<std::string>();
}

std::string encoded_at(const fs::path& dir, const json& v, const std::string& where) {
  if (!v.is_string() || !valid_encoded(v.get<std::string>()))
    bad_bundle(dir, where + ": " + v.dump() + " is not a path inside the root or ~/");
  return v.get<std::string>();
}

std::string sha_or_empty(const fs::path& dir, const json& j, const char* key, const std::string& where) {
  std::string s = str_at(dir, j, key, where);
  if (!s.empty() && !is_sha256_hex(s)) bad_bundle(dir, where + key + ": expected a SHA-256 or \"\"");
  return s;
}

BundleFile read_file_item(Disk& disk, const fs::path& dir, const json& j, const std::string& where) {
  BundleFile f;
  f.path = encoded_at(dir, j.is_object() && j.contains("path") ? j["path"] : json(), where + "path");
  std::string change = str_at(dir, j, "change", where);
  if (change != "modify" && change != "create" && change != "delete")
    bad_bundle(dir, where + "change: expected modify, create or delete");
  f.change = change == "modify" ? SwapKind::modify : change == "create" ? SwapKind::create : SwapKind::remove;
  f.pristine_sha256 = sha_or_empty(dir, j, "pristine_sha256", where);
  f.patched_sha256 = sha_or_empty(dir, j, "patched_sha256", where);
  if (f.pristine_sha256.empty() != (f.change == SwapKind::create) ||
      f.patched_sha256.empty() != (f.change == SwapKind::remove))
    bad_bundle(dir, where + "digests do not fit the change " + change);
  if (f.change == SwapKind::remove) return f;
  f.file = str_at(dir, j, "file", where);
  if (!is_safe_relative(f.file) || f.file.rfind("files/", 0) != 0)
    bad_bundle(dir, where + "file: " + json(f.file).dump() + " is not a path under files/");
  if (disk.info(dir / f.file, Follow::no).type != FileType::regular)
    bad_bundle(dir, where + "file: missing: " + f.file);
  // A directory of the bundle that is a symlink would have the replay read a file from elsewhere.
  if (!is_within(disk.real_path(dir / f.file), disk.real_path(dir)))
    bad_bundle(dir, where + "file: " + f.file + " leads out of the bundle through a symlink");
  if (hash_file(disk, dir / f.file) != f.patched_sha256)
    bad_bundle(dir, where + "file: " + f.file + " does not hold its patched_sha256");
  return f;
}

BundleEntry read_entry(Disk& disk, const fs::path& dir, const json& j, const std::string& where) {
  if (!j.is_object()) bad_bundle(dir, where + ": expected an object");
  BundleEntry e;
  e.from_entry = j.value("from_entry", "");
  if (j.contains("patch_id")) {
    std::string id = j["patch_id"].is_string() ? j["patch_id"].get<std::string>() : std::string();
    auto printable = [](char c) { return std::isgraph(static_cast<unsigned char>(c)) != 0; };
    if (id.empty() || id.size() > 128 || !std::all_of(id.begin(), id.end(), printable))
      bad_bundle(dir, where + ".patch_id: expected 1-128 printable characters");
    e.patch_id = id;
  }
  auto list = [&](const char* key) -> const json& {
    if (!j.contains(key) || !j[key].is_array()) bad_bundle(dir, where + "." + key + ": expected an array");
    return j[key];
  };
  const json& files = list("files");
  for (std::size_t i = 0; i < files.size(); ++i)
    e.files.push_back(read_file_item(disk, dir, files[i], where + ".files[" + std::to_string(i) + "]."));
  for (const auto& a : list("artifacts")) e.artifacts.push_back(encoded_at(dir, a, where + ".artifacts"));
  for (const auto& c : list("caches")) e.caches.push_back(encoded_at(dir, c, where + ".caches"));
  for (const auto& cmd : list("build_cmds")) {
    if (!cmd.is_array() || cmd.empty() ||
        !std::all_of(cmd.begin(), cmd.end(), [](const json& w) { return w.is_string(); }))
      bad_bundle(dir, where + ".build_cmds: expected non-empty lists of strings");
    e.build_cmds.push_back(cmd.get<std::vector<std::string>>());
  }
  if (j.contains("build_cwd") && !j["build_cwd"].is_null())
    e.build_cwd = encoded_at(dir, j["build_cwd"], where + ".build_cwd");
  if (e.files.empty()) bad_bundle(dir, where + ": changes no file");
  return e;
}

}  // namespace

Bundle read_bundle(Disk& disk, const fs::path& dir_in) {
  Bundle b;
  b.dir = absolute_normal(dir_in);
  if (disk.info(b.dir, Follow::yes).type != FileType::directory)
    throw Error("bundle is not a directory: " + b.dir.string());
  if (disk.info(b.dir / kBundleFile, Follow::no).type != FileType::regular)
    bad_bundle(b.dir, std::string("no ") + kBundleFile);
  json j;
  try {
    j = parse_json_bytes(read_small_file(disk, b.dir / kBundleFile, kMaxBundleJson));
  } catch (const json::exception& e) {
    bad_bundle(b.dir, std::string(kBundleFile) + " is not valid JSON (" + e.what() + ")");
  }
  if (!j.is_object() || j.value("format", "") != kFormat) bad_bundle(b.dir, "not an overlay bundle (format)");
  if (!j.contains("version") || j["version"] != kBundleVersion)
    bad_bundle(b.dir, "version " + (j.contains("version") ? j["version"].dump() : std::string("missing")) +
                          " (this overlay reads " + std::to_string(kBundleVersion) + ")");
  std::string root = str_at(b.dir, j, "root", "");
  if (root == "~" || root.rfind("~/", 0) == 0) {
    if (root != "~" && !is_safe_relative(root.substr(2))) bad_bundle(b.dir, "root: not a path below ~/");
    if (home_dir().empty()) bad_bundle(b.dir, "root " + root + ": $HOME is not set");
    b.root = root == "~" ? home_dir() : home_dir() / root.substr(2);
  } else {
    b.root = root;
  }
  if (!b.root.is_absolute()) bad_bundle(b.dir, "root: not an absolute path");
  if (!j.contains("entries") || !j["entries"].is_array() || j["entries"].empty())
    bad_bundle(b.dir, "entries: expected a non-empty array");
  for (std::size_t k = 0; k < j["entries"].size(); ++k)
    b.entries.push_back(read_entry(disk, b.dir, j["entries"][k], "entries[" + std::to_string(k) + "]"));
  return b;
}

bool ReplayReport::ok() const {
  return !reverted && verify && verify->ok() &&
         std::all_of(entries.begin(), entries.end(), [](const ReplayedEntry& e) { return e.build.ok; });
}

namespace {

// A path the bundle names stays under its anchor once resolved: a directory on the way that is a
// symlink out of the install (third_party -> /shared/...) must not carry a change, an invalidated
// cache or a build there. Of a path that does not exist yet, the deepest part that does is resolved.
void require_inside(Disk& disk, const std::string& encoded, const Anchors& a, const char* what) {
  fs::path p = decode(encoded, a), probe = p, rest;
  fs::path anchor = encoded.rfind("~/", 0) == 0 ? a.home : a.root;
  while (!disk.info(probe, Follow::no).exists() && probe.has_relative_path()) {
    rest = probe.filename() / rest;
    probe = probe.parent_path();
  }
  fs::path real = (disk.real_path(probe) / rest).lexically_normal(), top = disk.real_path(anchor);
  if (real != top && !is_within(real, top))
    throw Error(std::string(what) + " " + p.string() + " leads out of " + anchor.string() +
                " through a symlink (it is " + real.string() + "): refused, nothing changed");
}

void require_all_inside(Disk& disk, const Bundle& b, const Anchors& a) {
  for (const auto& e : b.entries) {
    for (const auto& f : e.files) require_inside(disk, f.path, a, "file");
    for (const auto& p : e.artifacts) require_inside(disk, p, a, "artifact");
    for (const auto& p : e.caches) require_inside(disk, p, a, "cache dir");
    if (e.build_cwd) require_inside(disk, *e.build_cwd, a, "build directory");
  }
}

// Every file of the bundle holds the bytes it was made from: refused, naming the first that does
// not, before anything is applied.
// The file holds the bundle's own change already (a second replay of it): who applied it, so the
// refusal points there rather than at a reinstall.
[[noreturn]] void already_applied(Disk& disk, const fs::path& p, const fs::path& state_dir) {
  std::optional<fs::path> by;
  try {
    by = HoldRegistry(disk, state_dir.empty() ? HoldRegistry::default_state_dir() : state_dir).holder(p);
  } catch (const std::exception& e) {
    spdlog::debug("replay: the holds registry cannot say who holds {}: {}", p.string(), e.what());
  }
  throw Error(p.string() + " already holds the bundle's change" +
              (by ? " (applied by overlay " + by->string() + ": revert it first to replay again)"
                  : " (replayed before, or the same change made by hand)") +
              "; nothing changed");
}

std::size_t check_pristine(Disk& disk, const Bundle& b, const Anchors& a, const fs::path& state_dir) {
  std::size_t n = 0;
  require_all_inside(disk, b, a);
  for (const auto& e : b.entries)
    for (const auto& f : e.files) {
      fs::path p = decode(f.path, a);
      FileInfo fi = disk.info(p, Follow::no);
      if (f.change == SwapKind::create) {
        if (fi.exists())
          throw Error(p.string() +
                      " exists, but the bundle creates it: another version of the install; nothing changed");
      } else if (fi.type != FileType::regular) {
        throw Error(p.string() +
                    " is missing (the bundle was made from an install that had it): another version of the install; "
                    "nothing changed");
      } else if (std::string now = hash_file(disk, p); now == f.patched_sha256 && now != f.pristine_sha256) {
        already_applied(disk, p, state_dir);
      } else if (now != f.pristine_sha256) {
        throw Error(p.string() + " does not hold the bytes the bundle was made from (sha256 " + now.substr(0, 16) +
                    ", the bundle's " + f.pristine_sha256.substr(0, 16) +
                    "): a reinstall or another version of the install; nothing changed");
      }
      ++n;
    }
  return n;
}

AddNativeRequest entry_request(const Bundle& b, const BundleEntry& e, const Anchors& a, const AddNativeRequest& base) {
  AddNativeRequest r = base;
  for (const auto& f : e.files)
    r.changes.push_back({decode(f.path, a), f.change, f.file.empty() ? fs::path() : b.dir / f.file});
  for (const auto& p : e.artifacts) r.artifacts.push_back(decode(p, a));
  for (const auto& p : e.caches) r.caches.push_back(decode(p, a));
  for (const auto& c : e.build_cmds) r.build_cmds.push_back(join_words(decode_words(c, a)));
  r.build_cwd = e.build_cwd ? decode(*e.build_cwd, a) : a.root;
  // The ids the caller knows: the entry's (the first one's, of entries replayed as one build) and
  // its patch's, unless the caller gave the replay a patch id of its own.
  r.entry_id = e.from_entry.substr(0, e.from_entry.find('+'));
  if (!r.patch_id) r.patch_id = e.patch_id;
  return r;
}

// Consecutive entries built the same way (the same commands in the same directory) and changing
// no file twice: applied as one entry, so their one build runs once (a bundle of a loop's accepted
// candidates: each was built on top of the one before; only the last build's result matters).
std::vector<BundleEntry> one_build_each(const std::vector<BundleEntry>& entries) {
  std::vector<BundleEntry> out;
  for (const auto& e : entries) {
    if (!out.empty() && out.back().build_cmds == e.build_cmds && out.back().build_cwd == e.build_cwd &&
        !e.build_cmds.empty()) {
      BundleEntry& last = out.back();
      bool disjoint = std::none_of(e.files.begin(), e.files.end(), [&](const BundleFile& f) {
        return std::any_of(last.files.begin(), last.files.end(), [&](const BundleFile& g) { return g.path == f.path; });
      });
      if (disjoint) {
        last.files.insert(last.files.end(), e.files.begin(), e.files.end());
        for (const auto& a : e.artifacts)
          if (std::find(last.artifacts.begin(), last.artifacts.end(), a) == last.artifacts.end())
            last.artifacts.push_back(a);
        for (const auto& c : e.caches)
          if (std::find(last.caches.begin(), last.caches.end(), c) == last.caches.end()) last.caches.push_back(c);
        last.from_entry += "+" + e.from_entry;
        continue;
      }
    }
    out.push_back(e);
  }
  return out;
}

// revert_on_failure: every entry this replay applied goes, newest first.
bool undo(Disk& disk, const ReplayRequest& req, const std::vector<ReplayedEntry>& done) {
  bool ok = true;
  for (auto it = done.rbegin(); it != done.rend(); ++it) {
    RevertOptions o;
    o.lock_timeout = req.base.lock_timeout;
    o.state_dir = req.base.state_dir;
    o.only_entry = it->applied.id;
    ok = revert_natives(disk, req.base.overlay, o).ok() && ok;
  }
  return ok;
}

}  // namespace

ReplayReport replay_bundle(Disk& disk, const ReplayRequest& req) {
  Bundle b = read_bundle(disk, req.bundle);
  Anchors a{req.root ? absolute_normal(*req.root) : b.root, home_dir()};
  if (disk.info(a.root, Follow::yes).type != FileType::directory)
    throw Error("install root is not a directory: " + a.root.string());
  ReplayReport r;
  r.root = a.root;
  r.checked_files = check_pristine(disk, b, a, req.base.state_dir);
  if (req.dry_run) return r;
  try {
    for (const auto& e : one_build_each(b.entries)) {
      NativePlan plan = plan_add_native(disk, entry_request(b, e, a, req.base));
      ReplayedEntry done{apply_native(disk, plan), {}, e.files.size()};
      if (!plan.build_cmds.empty()) done.build = run_native_build(disk, plan, done.applied);
      r.entries.push_back(std::move(done));
      if (!r.entries.back().build.ok) {
        if (req.revert_on_failure) r.reverted = undo(disk, req, r.entries);
        return r;
      }
    }
  } catch (...) {
    if (req.revert_on_failure && !r.entries.empty()) undo(disk, req, r.entries);
    throw;
  }
  r.verify = verify_native(disk, req.base.overlay);
  return r;
}

}  // namespace overlay
