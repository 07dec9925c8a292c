#include "overlay/build_inputs.hpp"

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include <nlohmann/json.hpp>

#include "overlay/copy_pipeline.hpp"
#include "overlay/error.hpp"
#include "overlay/file_ops.hpp"
#include "overlay/hash.hpp"
#include "overlay/json_bytes.hpp"

namespace overlay {

using nlohmann::json;

namespace {

const char* type_word(FileType t) {
  switch (t) {
    case FileType::none:
      return "missing";
    case FileType::regular:
      return "a file";
    case FileType::directory:
      return "a directory";
    case FileType::symlink:
      return "a symlink";
    case FileType::other:
      return "a special file";
  }
  return "a special file";
}

constexpr std::size_t kMaxDigests = 200000;
// An entry is made only for a file whose ctime is this much older than its hashing.
constexpr std::int64_t kRacyNs = 2000000000LL;

std::int64_t now_ns() {
  timespec t{};
  ::clock_gettime(CLOCK_REALTIME, &t);
  return ns_of(t);
}

// The interpreter the kernel maps for an ELF program (PT_INTERP), "" when it names none.
std::string elf_interpreter(Disk& disk, const fs::path& program) {
  std::string head;
  try {
    auto in = disk.open_read(program);
    head.resize(64);
    head.resize(in->read(head.data(), head.size()));
    if (head.size() < 64 ||
        head.compare(0, 4,
                     "\x7f"
                     "ELF") != 0 ||
        head[4] != 2)
      return "";  // ELF64 only
    std::uint64_t phoff = 0;
    std::uint16_t phentsize = 0, phnum = 0;
    std::memcpy(&phoff, head.data() + 32, 8);
    std::memcpy(&phentsize, head.data() + 54, 2);
    std::memcpy(&phnum, head.data() + 56, 2);
    if (phentsize < 56 || phnum > 256 || phoff > (1u << 20)) return "";
    std::string rest(phoff + std::size_t{phentsize} * phnum, '\0');
    std::memcpy(rest.data(), head.data(), head.size());
    std::size_t got = head.size();
    while (got < rest.size()) {
      std::size_t n = in->read(rest.data() + got, rest.size() - got);
      if (n == 0) return "";
      got += n;
    }
    for (std::uint16_t k = 0; k < phnum; ++k) {
      const char* ph = rest.data() + phoff + std::size_t{phentsize} * k;
      std::uint32_t type = 0;
      std::uint64_t off = 0, size = 0;
      std::memcpy(&type, ph, 4);
      if (type != 3) continue;  // PT_INTERP
      std::memcpy(&off, ph + 8, 8);
      std::memcpy(&size, ph + 32, 8);
      if (size == 0 || size > 4096) return "";
      auto again = disk.open_read(program);
      std::string all;
      all.resize(off + size);
      std::size_t have = 0;
      while (have < all.size()) {
        std::size_t n = again->read(all.data() + have, all.size() - have);
        if (n == 0) return "";
        have += n;
      }
      std::string interp = all.substr(off, size);
      return interp.substr(0, interp.find('\0'));
    }
  } catch (const Error& e) {
    (void)e;  // unreadable: the program's own digest failing says so
  }
  return "";
}

BuildInput as_input(const TracedInput& t) {
  BuildInput i;
  i.path = t.path;
  i.follow = t.follow;
  i.looked = t.looked;
  i.type = t.before.type;
  if (t.before.type == FileType::regular) {
    i.size = t.before.size;
    i.mtime_ns = t.before.mtime_ns;
  }
  i.mode = t.before.mode;
  i.listing = t.listing;
  i.target = t.target;
  i.sha256 = t.sha256;
  return i;
}

bool needs_bytes(const BuildInput& i) {
  return i.type == FileType::regular && (i.looked & (kLookedContent | kLookedExec)) != 0;
}

// Whether the file the build looked at is still the very one, unchanged.
bool same_file(const PathState& was, const FileInfo& now) {
  return now.type == was.type && static_cast<std::uint64_t>(now.dev) == was.dev &&
         static_cast<std::uint64_t>(now.ino) == was.ino && now.size == was.size && ns_of(now.mtime) == was.mtime_ns &&
         ns_of(now.ctime) == was.ctime_ns;
}

}  // namespace

void to_json(json& j, const BuildInput& i) {
  j = json::array({i.path, i.follow == Follow::yes, i.looked, static_cast<int>(i.type), i.size, i.mtime_ns, i.mode,
                   i.sha256, i.listing, i.target});
}
void from_json(const json& j, BuildInput& i) {
  i.path = j.at(0).get<std::string>();
  i.follow = j.at(1).get<bool>() ? Follow::yes : Follow::no;
  j.at(2).get_to(i.looked);
  int type = j.at(3).get<int>();
  if (type < 0 || type > static_cast<int>(FileType::other)) throw Error("build input: bad type");
  i.type = static_cast<FileType>(type);
  j.at(4).get_to(i.size), j.at(5).get_to(i.mtime_ns), j.at(6).get_to(i.mode);
  j.at(7).get_to(i.sha256), j.at(8).get_to(i.listing), j.at(9).get_to(i.target);
}

DigestCache::DigestCache(Disk& disk, fs::path file) : disk_(disk), file_(std::move(file)) {
  if (file_.empty()) return;
  try {
    FileInfo fi = disk_.info(file_, Follow::no);
    if (fi.type != FileType::regular || fi.uid != ::geteuid()) return;  // another user's is never read
    json j = parse_json_bytes(read_small_file(disk_, file_, 256u << 20));
    for (const auto& [path, v] : j.items())
      entries_[path] = Entry{v.at(0).get<std::uint64_t>(), v.at(1).get<std::uint64_t>(), v.at(2).get<std::uint64_t>(),
                             v.at(3).get<std::int64_t>(),  v.at(4).get<std::int64_t>(),  v.at(5).get<std::string>()};
  } catch (const std::exception& e) {
    (void)e;  // torn or foreign: every digest is computed again, and the file is rewritten
    entries_.clear();
    dirty_ = true;
  }
}

std::string DigestCache::sha256(const fs::path& p, const FileInfo& fi) {
  auto it = entries_.find(p.string());
  if (it != entries_.end() && it->second.dev == static_cast<std::uint64_t>(fi.dev) &&
      it->second.ino == static_cast<std::uint64_t>(fi.ino) && it->second.size == fi.size &&
      it->second.mtime_ns == ns_of(fi.mtime) && it->second.ctime_ns == ns_of(fi.ctime))
    return it->second.sha256;
  std::int64_t started = now_ns();
  std::string sha = hash_file(disk_, p);
  FileInfo after = disk_.info(p, Follow::yes);
  bool steady = after.ino == fi.ino && after.size == fi.size && ns_of(after.ctime) == ns_of(fi.ctime);
  if (steady && ns_of(fi.ctime) + kRacyNs < started && entries_.size() < kMaxDigests) {
    entries_[p.string()] = Entry{static_cast<std::uint64_t>(fi.dev),
                                 static_cast<std::uint64_t>(fi.ino),
                                 fi.size,
                                 ns_of(fi.mtime),
                                 ns_of(fi.ctime),
                                 sha};
    dirty_ = true;
  }
  return sha;
}

void DigestCache::save() {
  if (!dirty_ || file_.empty()) return;
  json j = json::object();
  for (const auto& [path, e] : entries_)
    j[path] = json::array({e.dev, e.ino, e.size, e.mtime_ns, e.ctime_ns, e.sha256});
  try {
    make_dirs(disk_, file_.parent_path(), 0700);
    write_file_atomically(disk_, file_, dump_json_bytes(j), 0600, NameDurable::no);
    dirty_ = false;
  } catch (const Error& e) {
    (void)e;  // a cache lost costs the next run its hashing, nothing else
  }
}

std::string listing_digest(Disk& disk, const fs::path& dir, const std::vector<fs::path>& skipped) {
  std::vector<std::string> skip, names;
  for (const auto& s : skipped) {
    std::string n = absolute_normal(s).string();
    while (n.size() > 1 && n.back() == '/') n.pop_back();
    skip.push_back(n);
  }
  for (const auto& e : disk.list_dir(dir)) {
    if (is_own_sibling_name(e.name)) continue;
    if (is_skipped_path(absolute_normal(dir / e.name).string(), skip)) continue;
    names.push_back(e.name);
  }
  std::sort(names.begin(), names.end());
  std::string text;
  for (const auto& n : names) text += n + '\0';
  return sha256_hex(text);
}

std::string key_inputs(Disk& disk, const BuildTrace& trace, const fs::path& backups,
                       const std::set<std::string>& sources, DigestCache& digests, std::vector<BuildInput>& out) {
  std::map<std::string, const TracedChange*> changed;
  for (const auto& c : trace.changes) changed.emplace(c.path, &c);
  std::set<std::string> seen;
  for (const auto& t : trace.inputs) {
    BuildInput i = as_input(t);
    seen.insert(i.path);
    if (sources.count(i.path) > 0) {  // the recipe holds its bytes; its mtime is new at every apply
      i.looked = 0;
      i.size = 0;
      i.mtime_ns = 0;
      i.mode = 0;
      i.sha256.clear();
      out.push_back(std::move(i));
      continue;
    }
    if (needs_bytes(i) && i.sha256.empty()) {
      auto c = changed.find(i.path);
      if (c != changed.end() && !c->second->backup.empty()) {
        i.sha256 = c->second->sha256.empty() ? hash_file(disk, backups / c->second->backup) : c->second->sha256;
      } else if (c != changed.end()) {
        return "the build changed " + i.path + ", which it had read, and its bytes before are not kept";
      } else {
        FileInfo now = disk.info(i.path, i.follow);
        if (!same_file(t.before, now)) return i.path + " changed while the build ran (by another process)";
        i.sha256 = digests.sha256(i.path, now);
      }
    }
    out.push_back(std::move(i));
  }
  // The ELF interpreter of each program run: loaded by the kernel, never opened by the process.
  std::size_t programs = out.size();
  for (std::size_t k = 0; k < programs; ++k) {
    if ((out[k].looked & kLookedExec) == 0 || out[k].type != FileType::regular) continue;
    std::string interp = elf_interpreter(disk, out[k].path);
    if (interp.empty() || !seen.insert(interp).second) continue;
    FileInfo fi = disk.info(interp, Follow::yes);
    BuildInput i;
    i.path = interp;
    i.looked = kLookedContent;
    i.type = fi.type;
    if (fi.type == FileType::regular) {
      i.size = fi.size;
      i.mtime_ns = ns_of(fi.mtime);
      i.mode = fi.mode;
      i.sha256 = digests.sha256(interp, fi);
    }
    out.push_back(std::move(i));
  }
  return "";
}

std::string first_difference(Disk& disk, const std::vector<BuildInput>& inputs, DigestCache& digests,
                             const std::vector<fs::path>& skipped) {
  for (const auto& i : inputs) {
    FileInfo now;
    try {
      now = disk.info(i.path, i.follow);
    } catch (const Error& e) {
      return i.path + " cannot be looked at now (" + e.what() + ")";
    }
    if (now.type != i.type) return i.path + " was " + type_word(i.type) + ", now " + type_word(now.type);
    if (i.type == FileType::regular && (i.looked & kLookedMeta) != 0 &&
        (now.size != i.size || ns_of(now.mtime) != i.mtime_ns || now.mode != i.mode))
      return i.path + ": its size, mtime or mode changed";
    if ((i.looked & kLookedExec) != 0 && now.mode != i.mode) return i.path + ": its mode changed";
    try {
      if (needs_bytes(i) && digests.sha256(i.path, now) != i.sha256) return i.path + ": its bytes changed";
      if (i.type == FileType::directory && (i.looked & kLookedListing) != 0 &&
          listing_digest(disk, i.path, skipped) != i.listing)
        return i.path + ": its entries changed";
      if (i.type == FileType::symlink && (i.looked & kLookedTarget) != 0 && disk.read_link(i.path) != i.target)
        return i.path + ": it points elsewhere now";
    } catch (const Error& e) {
      return i.path + " cannot be read now (" + e.what() + ")";
    }
  }
  return "";
}

std::string inputs_digest(const std::vector<BuildInput>& inputs) { return sha256_hex(dump_json_bytes(json(inputs))); }

}  // namespace overlay
