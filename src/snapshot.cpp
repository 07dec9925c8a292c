#include "overlay/snapshot.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <set>
#include <unordered_set>
#include <vector>

#include "overlay/archive_api.hpp"
#include "overlay/error.hpp"
#include "overlay/file_ops.hpp"
#include "overlay/hash.hpp"
#include "overlay/progress.hpp"

namespace overlay {
namespace {

constexpr std::size_t kTarChunk = 1 << 20;

const ArchiveApi& A() { return archive_api(); }

struct ArchiveDeleter {
  void operator()(archive* a) const { A().archive_free(a); }
};
using ArchivePtr = std::unique_ptr<archive, ArchiveDeleter>;
struct EntryDeleter {
  void operator()(archive_entry* e) const { A().archive_entry_free(e); }
};
using EntryPtr = std::unique_ptr<archive_entry, EntryDeleter>;

[[noreturn]] void arch_fail(archive* a, const std::string& what) {
  const char* msg = A().archive_error_string(a);
  throw Error(what + ": " + (msg ? msg : "libarchive error"));
}

// ---- writing ----

struct WriteSink {
  WriteHandle* out;
  ThreadedSha256* hash;  // on its own thread: reading the files and writing the tar go on beside it
  ProgressMeter* meter;
  std::string error;
};

la_ssize_t sink_write(archive*, void* client, const void* buf, size_t n) {
  auto* s = static_cast<WriteSink*>(client);
  try {
    s->out->write(static_cast<const char*>(buf), n);
    s->hash->update(buf, n);
    s->meter->advance(n);
  } catch (const std::exception& e) {
    s->error = e.what();
    return -1;
  }
  return static_cast<la_ssize_t>(n);
}

mode_t type_bits(FileType t) {
  switch (t) {
    case FileType::directory:
      return AE_IFDIR;
    case FileType::symlink:
      return AE_IFLNK;
    default:
      return AE_IFREG;
  }
}

void write_member(archive* a, Disk& disk, const At& at, const std::string& name, const FileInfo& fi,
                  std::vector<char>& buf) {
  const std::string abs = at.full().string();
  if (fi.type == FileType::other) throw Error("cannot snapshot special file " + abs);
  EntryPtr e(A().archive_entry_new());
  A().archive_entry_set_pathname(e.get(), name.c_str());
  A().archive_entry_set_mode(e.get(), type_bits(fi.type) | fi.mode);
  A().archive_entry_set_mtime(e.get(), fi.mtime.tv_sec, fi.mtime.tv_nsec);
  A().archive_entry_set_uid(e.get(), fi.uid);
  A().archive_entry_set_gid(e.get(), fi.gid);
  if (fi.type == FileType::symlink) A().archive_entry_set_symlink(e.get(), disk.read_link(at).c_str());
  A().archive_entry_set_size(e.get(), fi.type == FileType::regular ? static_cast<la_int64_t>(fi.size) : 0);
  if (A().archive_write_header(a, e.get()) != ARCHIVE_OK) arch_fail(a, "tar header for " + abs);
  if (fi.type != FileType::regular) return;
  auto in = disk.open_read(at);
  std::uint64_t left = fi.size;  // a file that grows while read is cut at the size in its header
  while (left > 0) {
    std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(left, buf.size()));
    std::size_t n = in->read(buf.data(), want);
    if (n == 0) break;  // shrank: libarchive pads the member with zeros
    if (A().archive_write_data(a, buf.data(), n) < 0) arch_fail(a, "tar data for " + abs);
    left -= n;
  }
}

// Every entry below `dir` (held), sorted by name at each level, each directory before its
// contents; subdirectories entered by descriptor, never through a symlink.
void write_tree(archive* a, Disk& disk, const DirHandle& dir, const std::string& name, std::vector<char>& buf) {
  auto entries = disk.list_dir(At(dir, ""));
  std::sort(entries.begin(), entries.end(), [](const DirEntry& x, const DirEntry& y) { return x.name < y.name; });
  for (const auto& e : entries) {
    const At at(dir, e.name);
    FileInfo fi = disk.info(at, Follow::no);
    if (!fi.exists()) continue;  // vanished while read
    write_member(a, disk, at, name + "/" + e.name, fi, buf);
    if (fi.type == FileType::directory) write_tree(a, disk, *disk.open_dir(at), name + "/" + e.name, buf);
  }
}

// ---- reading ----

struct ReadSource {
  std::unique_ptr<ReadHandle> in;
  ThreadedSha256* hash = nullptr;  // when set, every byte read is hashed (on its own thread)
  ProgressMeter* meter = nullptr;
  std::vector<char> buf = std::vector<char>(kTarChunk);
  std::string error;
};

la_ssize_t source_read(archive*, void* client, const void** out) {
  auto* s = static_cast<ReadSource*>(client);
  try {
    std::size_t n = s->in->read(s->buf.data(), s->buf.size());
    if (s->hash) s->hash->update(s->buf.data(), n);
    if (s->meter) s->meter->advance(n);
    *out = s->buf.data();
    return static_cast<la_ssize_t>(n);
  } catch (const std::exception& e) {
    s->error = e.what();
    return -1;
  }
}

// The next member's header. A UTF-8 name (a pax `path` as Python's tarfile writes it) that the C
// locale cannot represent is a warning in libarchive, which then keeps the name's bytes as they
// are: exactly what a byte-string name needs, so that warning reads as success; any other stays.
int next_header(archive* a, archive_entry** e) {
  int rc = A().archive_read_next_header(a, e);
  if (rc != ARCHIVE_WARN) return rc;
  const char* why = A().archive_error_string(a);
  return why != nullptr && std::strstr(why, "can't be converted from UTF-8") != nullptr ? ARCHIVE_OK : rc;
}

ArchivePtr open_tar(ReadSource& src, const fs::path& tar_path) {
  ArchivePtr a(A().archive_read_new());
  A().archive_read_support_filter_all(a.get());
  A().archive_read_support_format_tar(a.get());
  if (A().archive_read_open(a.get(), &src, nullptr, source_read, nullptr) != ARCHIVE_OK)
    arch_fail(a.get(), "open tar " + tar_path.string());
  return a;
}

// Strips leading "./" and trailing "/"; "" stands for the root.
std::string normalize_member(std::string name) {
  while (name.rfind("./", 0) == 0) name.erase(0, 2);
  while (!name.empty() && name.back() == '/') name.pop_back();
  if (name == ".") name.clear();
  return name;
}

void check_member_name(const std::string& raw, const std::string& name) {
  if (!raw.empty() && raw[0] == '/') throw Error("tar member has an absolute name: " + raw);
  for (const auto& part : fs::path(name))
    if (part == "..") throw Error("tar member escapes with '..': " + raw);
}

struct Member {
  std::string name;  // normalized, before the legacy prefix is stripped
  std::string hardlink;
};

// Once the archive has been read: hashes what follows its end-of-archive blocks (those bytes
// count too) and compares the whole file's digest with the recorded one.
void prove(ReadSource& src, ThreadedSha256& hash, const fs::path& tar_path, const std::string& expected) {
  std::vector<char> rest(kTarChunk);
  while (std::size_t n = src.in->read(rest.data(), rest.size())) hash.update(rest.data(), n);
  std::string got = hash.finish_hex();
  if (got != expected)
    throw Error("backup " + tar_path.string() + " is corrupt: sha256 " + got + ", recorded " + expected);
}

// One pass over the archive: names checked, optional digest compared, members listed.
std::vector<Member> scan_tar(Disk& disk, const fs::path& tar_path, const std::string& expected) {
  ThreadedSha256 hash;
  ReadSource src;
  src.in = disk.open_read(tar_path);
  src.hash = expected.empty() ? nullptr : &hash;
  ArchivePtr a = open_tar(src, tar_path);
  std::vector<Member> members;
  archive_entry* e = nullptr;
  int rc = next_header(a.get(), &e);
  for (; rc == ARCHIVE_OK; rc = next_header(a.get(), &e)) {
    const char* p = A().archive_entry_pathname(e);
    std::string raw = p ? p : "";
    Member m{normalize_member(raw), {}};
    check_member_name(raw, m.name);
    if (const char* h = A().archive_entry_hardlink(e)) {
      m.hardlink = normalize_member(h);
      check_member_name(h, m.hardlink);
    }
    mode_t t = A().archive_entry_filetype(e);
    if (t != AE_IFREG && t != AE_IFDIR && t != AE_IFLNK && m.hardlink.empty())
      throw Error("tar member is a special file: " + raw);
    members.push_back(std::move(m));
  }
  if (rc != ARCHIVE_EOF)
    arch_fail(a.get(), "read tar " + tar_path.string() + (src.error.empty() ? "" : " (" + src.error + ")"));
  if (!expected.empty()) prove(src, hash, tar_path, expected);
  return members;
}

// The single top directory to strip: overlay_setup.py's layout (and this tool's now), where the
// first member is `top` itself, the cache dir's own name, and every member is `top` or `top/...`;
// "" for the "./" layout of this tool's earlier versions. Decided by the first member, then held
// to: a later member outside `top` is refused.
std::string top_prefix_of(const std::string& first, const std::string& top) {
  if (top.empty() || first.empty()) return "";
  return first == top || first.rfind(top + "/", 0) == 0 ? top : "";
}

std::string strip_prefix(const std::string& name, const std::string& prefix) {
  if (prefix.empty()) return name;
  return name.size() <= prefix.size() ? std::string() : name.substr(prefix.size() + 1);
}

// Extracts members into `dest`, an empty directory. It knows every name it made there (so no
// member needs an lstat): a member may only go through directories it made, a hard link may only
// name a file it extracted, and a repeated member replaces the earlier one (as tar does).
class Extractor {
 public:
  Extractor(Disk& disk, std::unique_ptr<DirHandle> dest) : disk_(disk), dest_(std::move(dest)) { dirs_.insert(""); }
  void member(archive* a, archive_entry* e, const std::string& name, const std::string& link);
  void finish();

 private:
  void ensure_parents(const std::string& name);
  void clear_slot(const std::string& name, const At& p);
  void write_file(archive* a, const At& p, mode_t mode);
  // Member `name` as a name inside its directory, held open: the directories from dest down are
  // kept as a chain (a tar lists a directory's members together), re-opened by name from the
  // deepest common one when a member is elsewhere. Valid until the next call.
  At at(const std::string& name);
  // The same for a second member while the first's At is in use (a hard link's target).
  std::unique_ptr<DirHandle> open_parent_of(const std::string& name);

  Disk& disk_;
  std::unique_ptr<DirHandle> dest_;
  std::vector<std::pair<std::string, std::unique_ptr<DirHandle>>> chain_;  // dest's subdirectories, top down
  std::unordered_set<std::string> dirs_;    // directories made: the only parents a member may use
  std::unordered_set<std::string> others_;  // everything else made (files, links, symlinks)
  std::unordered_set<std::string> files_;   // regular files extracted: the only hard-link targets
  struct DirMeta {
    std::string name;
    mode_t mode;
    timespec mtime;
  };
  std::vector<DirMeta> dir_meta_;
};

At Extractor::at(const std::string& name) {
  std::vector<std::string> parts;
  for (const auto& part : fs::path(name)) parts.push_back(part.string());
  const std::string leaf = parts.back();
  parts.pop_back();
  std::size_t keep = 0;
  while (keep < chain_.size() && keep < parts.size() && chain_[keep].first == parts[keep]) ++keep;
  chain_.resize(keep);
  for (std::size_t i = keep; i < parts.size(); ++i) {
    const DirHandle& up = chain_.empty() ? *dest_ : *chain_.back().second;
    chain_.emplace_back(parts[i], disk_.open_dir(At(up, parts[i])));
  }
  return At(chain_.empty() ? *dest_ : *chain_.back().second, leaf);
}

std::unique_ptr<DirHandle> Extractor::open_parent_of(const std::string& name) {
  std::unique_ptr<DirHandle> dir = disk_.open_dir(At(*dest_, ""));
  fs::path parent = fs::path(name).parent_path();
  for (const auto& part : parent) dir = disk_.open_dir(At(*dir, part.string()));
  return dir;
}

void Extractor::ensure_parents(const std::string& name) {
  for (auto slash = name.find('/'); slash != std::string::npos; slash = name.find('/', slash + 1)) {
    std::string acc = name.substr(0, slash);
    if (dirs_.count(acc)) continue;
    if (others_.count(acc)) throw Error("tar member goes through a non-directory: " + name);
    disk_.make_dir(at(acc), 0755);
    dirs_.insert(std::move(acc));
  }
}

void Extractor::clear_slot(const std::string& name, const At& p) {
  if (dirs_.count(name)) throw Error("tar member would replace a directory: " + name);
  if (!others_.count(name)) return;
  disk_.remove(p);  // a repeated member: the later one wins, as tar does
  others_.erase(name);
  files_.erase(name);
}

void Extractor::write_file(archive* a, const At& p, mode_t mode) {
  auto out = disk_.create(p, mode, CreateMode::exclusive);
  const void* block = nullptr;
  size_t size = 0;
  la_int64_t offset = 0, written = 0;
  int rc = A().archive_read_data_block(a, &block, &size, &offset);
  for (; rc == ARCHIVE_OK; rc = A().archive_read_data_block(a, &block, &size, &offset)) {
    if (offset > written) {  // sparse hole
      std::vector<char> zeros(static_cast<std::size_t>(offset - written), 0);
      out->write(zeros.data(), zeros.size());
    }
    out->write(static_cast<const char*>(block), size);
    written = offset + static_cast<la_int64_t>(size);
  }
  if (rc != ARCHIVE_EOF) arch_fail(a, "read tar data for " + p.full().string());
  out->close();  // made durable all at once by the caller (sync_filesystem), not file by file
}

void Extractor::member(archive* a, archive_entry* e, const std::string& name, const std::string& link) {
  mode_t perm = A().archive_entry_perm(e);
  timespec mtime{A().archive_entry_mtime(e), A().archive_entry_mtime_nsec(e)};
  mode_t type = A().archive_entry_filetype(e);
  if (name.empty()) {  // the root itself
    dir_meta_.push_back({name, perm, mtime});
    return;
  }
  ensure_parents(name);
  const At p = at(name);
  if (!link.empty()) {
    if (!files_.count(link)) throw Error("tar hard link to something not extracted as a file: " + name + " -> " + link);
    clear_slot(name, p);
    auto link_dir = open_parent_of(link);
    disk_.make_hardlink(At(*link_dir, fs::path(link).filename().string()), p);
    files_.insert(name);
    others_.insert(name);
    return;
  }
  if (type == AE_IFDIR) {
    if (others_.count(name)) throw Error("tar member replaces a non-directory: " + name);
    if (dirs_.insert(name).second) disk_.make_dir(p, 0700);
    dir_meta_.push_back({name, perm, mtime});
    return;
  }
  clear_slot(name, p);
  if (type == AE_IFLNK) {
    const char* target = A().archive_entry_symlink(e);
    disk_.make_symlink(target ? target : "", p);
  } else {
    write_file(a, p, perm);
    files_.insert(name);
  }
  others_.insert(name);
  disk_.set_mtime(p, mtime);
}

void Extractor::finish() {
  // Deepest first, so a read-only directory is closed only after its children are in place.
  std::sort(dir_meta_.begin(), dir_meta_.end(),
            [](const DirMeta& x, const DirMeta& y) { return x.name.size() > y.name.size(); });
  for (const auto& d : dir_meta_) {
    const At p = d.name.empty() ? At(*dest_, "") : at(d.name);
    disk_.set_mode(p, d.mode);
    disk_.set_mtime(p, d.mtime);
  }
}

}  // namespace

std::string snapshot_dir_to_tar(Disk& disk, const At& dir_at, const fs::path& tar_path) {
  const fs::path dir = dir_at.full();
  auto root = hold_dir(disk, dir_at);
  auto out = disk.create(tar_path, 0600, CreateMode::exclusive);
  ThreadedSha256 hash;
  ProgressMeter meter("snapshot " + dir.string(), 0);
  WriteSink sink{out.get(), &hash, &meter, {}};
  ArchivePtr a(A().archive_write_new());
  A().archive_write_set_format_pax_restricted(a.get());
  // Names are bytes. The binary runs in the C locale (the static one may have no locale at all),
  // where libarchive cannot convert a name with a byte >= 0x80 to the pax header's UTF-8 and
  // refuses the entry; BINARY writes the name as it is, with hdrcharset=BINARY in its header,
  // which Python's tarfile (overlay_setup.py) reads back as the same bytes.
  if (A().archive_write_set_format_option(a.get(), "pax", "hdrcharset", "BINARY") != ARCHIVE_OK)
    arch_fail(a.get(), "create tar " + tar_path.string());
  A().archive_write_set_bytes_per_block(a.get(), 1 << 20);  // one write(2) per MiB, not per 10 KiB
  A().archive_write_set_bytes_in_last_block(a.get(), 1);
  if (A().archive_write_open(a.get(), &sink, nullptr, sink_write, nullptr) != ARCHIVE_OK)
    arch_fail(a.get(), "create tar " + tar_path.string());
  std::vector<char> buf(kTarChunk);
  // overlay_setup.py's layout: it extracts into dirname(dir), so members must carry dir's name.
  const std::string top = dir.filename().string();
  if (top.empty() || top == "." || top == "..")
    throw Error("cannot snapshot a directory without a name: " + dir.string());
  write_member(a.get(), disk, At(*root, ""), top, disk.info(At(*root, ""), Follow::no), buf);
  write_tree(a.get(), disk, *root, top, buf);
  if (A().archive_write_close(a.get()) != ARCHIVE_OK)
    arch_fail(a.get(), "finish tar " + tar_path.string() + (sink.error.empty() ? "" : " (" + sink.error + ")"));
  out->sync();
  out->close();
  return hash.finish_hex();
}

void check_tar(Disk& disk, const fs::path& tar_path, const std::string& expected_sha256) {
  scan_tar(disk, tar_path, expected_sha256);
}

void extract_tar(Disk& disk, const fs::path& tar_path, const At& dest, const std::string& top_name,
                 const std::string& expected_sha256) {
  ThreadedSha256 hash;
  ReadSource src;
  src.in = disk.open_read(tar_path);
  src.hash = expected_sha256.empty() ? nullptr : &hash;
  ProgressMeter meter("restore " + tar_path.filename().string(), disk.info(tar_path, Follow::no).size);
  src.meter = &meter;
  ArchivePtr a = open_tar(src, tar_path);
  Extractor x(disk, hold_dir(disk, dest));
  std::optional<std::string> prefix;
  auto inside = [&](const std::string& name) {
    return prefix->empty() || name == *prefix || name.rfind(*prefix + "/", 0) == 0;
  };
  archive_entry* e = nullptr;
  int rc = next_header(a.get(), &e);
  for (; rc == ARCHIVE_OK; rc = next_header(a.get(), &e)) {
    const char* p = A().archive_entry_pathname(e);
    std::string raw = p ? p : "";
    std::string name = normalize_member(raw);
    check_member_name(raw, name);
    if (!prefix) prefix = top_prefix_of(name, top_name);
    if (!inside(name)) throw Error("tar member outside its top directory " + *prefix + ": " + raw);
    std::string link;
    if (const char* h = A().archive_entry_hardlink(e)) {
      link = normalize_member(h);
      check_member_name(h, link);
      if (!inside(link)) throw Error("tar hard link outside its top directory " + *prefix + ": " + h);
      link = strip_prefix(link, *prefix);
    }
    mode_t t = A().archive_entry_filetype(e);
    if (t != AE_IFREG && t != AE_IFDIR && t != AE_IFLNK && link.empty())
      throw Error("tar member is a special file: " + raw);
    x.member(a.get(), e, strip_prefix(name, *prefix), link);
  }
  if (rc != ARCHIVE_EOF)
    arch_fail(a.get(), "read tar " + tar_path.string() + (src.error.empty() ? "" : " (" + src.error + ")"));
  x.finish();
  if (!expected_sha256.empty()) prove(src, hash, tar_path, expected_sha256);
}

}  // namespace overlay
