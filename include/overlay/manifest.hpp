#pragma once
// The overlay's manifest (<overlay>/_overlay_manifest.json): model, strict validation and
// atomic save. The keys of overlay_setup.py are read and written unchanged; keys this tool adds
// are extra, and keys it does not know survive a rewrite.
#include <sys/types.h>

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "overlay/disk.hpp"
#include "overlay/file_ops.hpp"
#include "overlay/owner.hpp"

namespace overlay {

using json = nlohmann::json;

inline constexpr const char* kManifestName = "_overlay_manifest.json";
inline constexpr int kManifestFormat = 1;

// What a backed-up file looked like: tells cheaply that it has changed since (any field differs),
// without reading it. Equal stamps still get a hash before anything is called original.
struct FileStamp {
  std::uint64_t size = 0;
  std::uint64_t ino = 0;
  std::int64_t mtime_ns = 0;
  bool operator==(const FileStamp&) const = default;
};

// The stamp of an existing file's current state.
FileStamp stamp_of(const FileInfo& fi);

// Who owned a backed-up file (added keys "uid", "gid"): restored as recorded, whoever the build
// ran as (a build that recreates the artifact leaves it owned by the builder).
struct FileOwner {
  std::uint64_t uid = 0, gid = 0;
  bool operator==(const FileOwner&) const = default;
};

// The directory a tracked path lived in when the entry was recorded (added key "parent"): its
// real path (symlinks resolved once, then) and its device and inode. Every later operation on
// the path happens under that very directory, reached without following a symlink, or not at
// all: a directory swapped since (for a symlink, or another directory) never steers where a
// restore writes (issue 24, pinned.hpp).
struct PinnedDir {
  std::string path;  // absolute, symlinks resolved at record time
  std::uint64_t dev = 0, ino = 0;
  // The item's path below `path` when it lies deeper, inside a directory the entry expects to be
  // replaced (an artifact inside a cache dir the build fills again): those directories are held
  // to no inode, only to never being a symlink. "" when the item sits right in `path`.
  std::string below = {};
};

// A layer (added key "layer" of a source, created or artifact item): the item was stacked on the
// change another overlay's entry made to the same file (add-native --over LOWER). Its backup holds
// that change's bytes, which are what it must find and put back; `pristine_sha256` is what the
// file held before the whole stack ("" where it did not exist), so that a layer whose lower
// overlay went is never taken for the original and a fold keeps the pristine bytes' name.
struct LayerRef {
  std::string overlay;          // the lower overlay, absolute
  std::string entry;            // its entry's id
  std::string pristine_sha256;  // "" : absent before the stack
  bool operator==(const LayerRef&) const = default;
};

// One backed-up file: where its copy lies in the overlay and what the original was. The store
// makes one (BackupStore::save_file), a source or artifact item records it, revert restores from
// it (BackupStore::restore_file): the same seven fields throughout, read and written as JSON in
// one place (to_json/from_json below). The optional ones are keys this tool adds; an item
// overlay_setup.py wrote has only backup and sha256.
struct FileBackup {
  std::string backup;              // relative to the overlay ("" for an artifact that did not exist)
  std::string sha256;              // the original bytes
  std::optional<mode_t> mode;      // original mode
  std::optional<FileStamp> stamp;  // original size/inode/mtime
  std::optional<FileOwner> owner;  // original uid/gid
  std::optional<Xattrs> xattrs;    // original extended attributes
  // Where the original had other names (a hard-link group): a hard link to the original inode
  // itself beside the backup, so that revert can put that very inode back and every name is one
  // file again; absent where it had one name or the link could not be made (another filesystem).
  std::optional<std::string> same_inode;
};

struct SourceItem : FileBackup {
  std::string install_path;                   // absolute
  std::optional<std::string> patched_sha256;  // what the tool wrote (added key)
  bool deleted = false;                       // the entry's diff deletes it (added key)
  std::optional<PinnedDir> parent;            // its directory at record time (added key)
  std::optional<LayerRef> layer;              // stacked on a lower overlay's change (added key)
  json raw = json::object();                  // the item as read
};

// A file the entry's diff creates (added key "created_files"): removed on revert.
struct CreatedItem {
  std::string path;                 // absolute
  std::string sha256;               // what the tool wrote
  std::optional<PinnedDir> parent;  // its directory at record time, when it existed then
  std::optional<LayerRef> layer;    // created over a file a lower overlay's change deleted
  json raw = json::object();
};

// A build output: its backup where it existed before the entry (FileBackup's backup and sha256
// are JSON null, and empty here, where it did not).
struct ArtifactItem : FileBackup {
  std::string path;  // absolute
  bool existed = false;
  std::optional<PinnedDir> parent;  // its directory at record time, when it existed then
  std::optional<LayerRef> layer;    // its backup is a lower overlay's build of it (added key)
  json raw = json::object();
};

// A cache dir renamed aside on its own filesystem (added key "aside"), for a cache the overlay's
// filesystem cannot take by rename: a hidden sibling of the cache dir, and the identity the dir
// had when it was recorded, so a copy replaced or planted there is refused, never restored.
struct AsideDir {
  std::string path;  // absolute: aside_path_of(dir, entry id)
  std::uint64_t dev = 0, ino = 0;
  std::uint64_t uid = 0;
};

// Where an entry puts a cache dir aside: "<parent>/.<name>.overlay-aside-<id>". The name is
// derived, never free: a manifest can only ever name this sibling of the cache dir it records.
fs::path aside_path_of(const fs::path& dir, const std::string& entry_id);
// Whether `name` (a file name) is such an aside sibling of some cache dir: the leftover sweeps
// that clear our temporaries beside a path must never take it.
bool is_aside_name(const std::string& name);

struct CacheItem {
  std::string dir;  // absolute
  bool existed = false;
  std::optional<std::string> backup_tar;  // tar snapshot (when existed and not moved)
  std::optional<std::string> sha256;      // SHA-256 of the tar (added key; absent in legacy)
  std::optional<std::string> backup_dir;  // the cache dir itself, moved into the overlay (added key)
  std::optional<AsideDir> aside;          // the cache dir itself, renamed aside beside it (added key)
  std::optional<PinnedDir> parent;        // its parent at record time, when it existed then
  std::optional<LayerRef> layer;          // its snapshot is a lower overlay's build of it (added key)
  json raw = json::object();
};

// Stops overlay_setup.py's revert before it changes anything of an entry that tool cannot restore
// (a cache moved into the overlay, a file the diff created). Stored as the entry's first caches[]
// item, which that tool handles first: `dir` never exists (so it deletes nothing), `stop` is a
// directory in the overlay named as the message, which its tarfile.open() fails on.
struct PythonToolGuard {
  std::string dir;   // absolute, inside the overlay, never created
  std::string stop;  // relative to the overlay: a directory
};

// A file the entry's build created or changed that no item tracks (added key
// "untracked_outputs"), with its stamp as the build left it. When the entry is reverted it moves
// to the manifest's top level (with the entry and its build) for as long as that stamp holds:
// the file may still hold patched code until a build regenerates it.
struct UntrackedOutput {
  std::string path;                                  // absolute
  std::string change;                                // created | changed | deleted (a watched build's)
  FileStamp stamp;                                   // as the build left it
  std::string entry;                                 // top level only: the reverted entry whose build left it
  std::vector<std::vector<std::string>> build_cmds;  // top level only: what regenerates it
  // Entry level only: the tracked (or relinked) shared library it was only relinked against,
  // so it holds none of the patched code; empty when it may hold some.
  std::string clear_reason;
};

// A path an entry's traced build changed that no item of the entry tracks (added key
// "build_changes" of a native entry): its state before the build, and how the build left it.
// Revert puts each back — the build's bookkeeping (.ninja_deps, .ninja_log, depfiles), an object
// of a unity translation unit, a generated file the build deleted — so the build's view is the
// one before the apply; a build served from the store records what it replaced the same way.
struct BuildChange {
  std::string path;                // absolute
  FileType was = FileType::none;   // none: the build made it
  std::string backup;              // a file's bytes before it, relative to the overlay
  std::string sha256;              // of those bytes
  std::string target;              // a symlink's target before it
  mode_t mode = 0;                 // before
  FileOwner owner;                 // before
  FileStamp before;                // before (a directory's or symlink's: its mtime)
  FileType left = FileType::none;  // as the build left it (none: gone)
  FileStamp stamp;                 // a file's stamp as the build left it
  std::optional<Xattrs> xattrs;    // a file's extended attributes before it (none: not read)
};

// A process that mapped an entry's rebuilt artifact when revert replaced it: it runs the patched
// code until it exits. Kept while that process (pid and start time) lives.
struct RunningPatched {
  std::string path;  // the artifact (absolute); the process maps the inode revert replaced
  std::uint64_t dev = 0, ino = 0;
  std::int64_t pid = 0;
  std::uint64_t start_ticks = 0;
  std::string cmdline;
  std::string entry;  // the reverted entry
};

// What the watch of an entry's build saw when the build ended (added key "build_picture"): the
// walked dirs, the files left out (tracked) and the dirs skipped (caches, the overlay), and the
// SHA-256 of every other file's path and stamp. A revert that finds the same digest knows nothing
// was built there since.
struct BuildPicture {
  std::vector<std::string> dirs, tracked, skipped;
  std::string sha256;
};

struct NativeEntry {
  std::string id;  // added key; empty for entries written by overlay_setup.py
  std::vector<SourceItem> sources;
  std::vector<CreatedItem> created;
  std::vector<ArtifactItem> artifacts;
  std::vector<CacheItem> caches;
  std::vector<std::vector<std::string>> build_cmds;
  std::optional<std::string> build_cwd;
  // No --build-cwd was given: build_cwd is wherever the caller stood (added key
  // "build_cwd_defaulted"), which export does not pin on another install (an agent's task dir).
  bool build_cwd_defaulted = false;
  std::optional<std::string> verify_artifact;
  std::optional<std::string> verify_pre_sha256;
  std::optional<Owner> owner;
  std::optional<std::string> build_log;         // relative to the overlay
  std::optional<double> created_at;             // seconds since the epoch
  std::optional<PythonToolGuard> python_guard;  // added caches[0] item "python_tool_guard": true
  std::optional<std::string> patch_id;          // `apply`: the patch this entry belongs to (added key)
  bool kept = false;  // `exec --keep-on-success` left it applied on purpose: gc-stale leaves it (added key)
  std::vector<UntrackedOutput> untracked;  // observed around the build (added key)
  // Its build ran traced (added key "build_traced"): build_changes is all it changed beyond the
  // items, save what build_unobserved names; otherwise build_untraced may say why not.
  bool build_traced = false;
  std::vector<BuildChange> build_changes;     // what its traced build changed beyond its items (added key)
  std::vector<std::string> build_unobserved;  // what its trace could not account for (added key)
  std::optional<std::string> build_untraced;  // why its build ran untraced (added key)
  std::optional<BuildPicture> build_picture;  // the watch's picture after the build (added key)
  std::optional<std::string> served_from;     // the build store's record put back instead of a build (added key)
  std::optional<std::string> build_failed;    // its build failed: the command and how (added key); fold refuses it
  // The overlay a fold moved this entry from (added key "folded_from"): the holds name that overlay
  // until they follow, and a hold lost to a power cut may never follow (HoldRegistry::copy_of_vanished).
  std::optional<std::string> folded_from;
  json raw = json::object();
};

// An entry of another overlay stacked on this overlay's changes (added top-level key
// "layers_above"): written here, under this overlay's lock, by that overlay's add-native before
// its own record names the entry, and dropped by its revert. A reference whose upper no longer
// records the entry (a crash between the two writes, a revert between its two) is stale and
// ignored; one whose upper still does refuses this overlay's revert (stack.hpp).
struct UpperRef {
  std::string overlay;             // the upper overlay, absolute
  std::string entry;               // its entry's id
  std::vector<std::string> paths;  // the files it stacks on (absolute)
  bool operator==(const UpperRef&) const = default;
};

// A fold between two overlays (fold.hpp), as each side records it until it is settled: in the
// overlay folded from, "fold_out" {into, fold, entries}; in the overlay folded into, "folds_in"
// [{from, fold, entries, state: pending|committed}]. Committed is the fold's one point of no return.
struct FoldMark {
  std::string overlay;               // the other side, absolute
  std::string fold;                  // the fold's id
  std::vector<std::string> entries;  // the entry ids it moves
  bool committed = false;            // folds_in only
  bool operator==(const FoldMark&) const = default;
};

struct Manifest {
  json doc = json::object();  // the whole document as read (modules, rebinds, captures, …)
  std::vector<NativeEntry> natives;
  std::vector<UntrackedOutput> untracked;  // left by reverted entries' builds (added top-level key)
  std::vector<RunningPatched> running;     // processes still running reverted code (added top-level key)
  // Trees a revert renamed aside inside an install (a rebuilt cache replaced by its original) and
  // left to a detached process to delete (added top-level key "litter"): recorded in the same
  // write that forgets their entry, so a killed deleter's leftovers are still found and deleted.
  std::vector<std::string> litter;
  std::vector<UpperRef> layers_above;  // entries of other overlays stacked on ours
  std::optional<FoldMark> fold_out;    // this overlay's entries on their way into another
  std::vector<FoldMark> folds_in;      // folds into this overlay not yet settled
  // The key order of the document's objects as read (array elements left out): upstream keeps it
  // when it writes a manifest back, so a Python-only manifest is written in it too.
  nlohmann::ordered_json layout;
};

// Each item's JSON form, one pair per type in nlohmann's ADL convention (`j.get<SourceItem>()`,
// `json j = item;`), so a key is read in one line and written in one line beside it. from_json
// validates strictly and throws ManifestError naming the key relative to the item (the item's
// place in the document is added as the error rises); keys it does not know are kept in `raw`
// and written back by to_json.
void from_json(const json& j, PinnedDir& p);
void to_json(json& j, const PinnedDir& p);
void from_json(const json& j, FileBackup& f);
void to_json(json& j, const FileBackup& f);
void from_json(const json& j, SourceItem& s);
void to_json(json& j, const SourceItem& s);
void from_json(const json& j, CreatedItem& c);
void to_json(json& j, const CreatedItem& c);
void from_json(const json& j, ArtifactItem& a);
void to_json(json& j, const ArtifactItem& a);
void from_json(const json& j, AsideDir& a);
void to_json(json& j, const AsideDir& a);
void from_json(const json& j, CacheItem& c);
void to_json(json& j, const CacheItem& c);
void from_json(const json& j, UntrackedOutput& u);
void to_json(json& j, const UntrackedOutput& u);
void from_json(const json& j, BuildChange& c);
void to_json(json& j, const BuildChange& c);
// A record's extended attributes (key "xattrs"): {name: base64 of the value}; {} says there were
// none, no key that they were not read (nullopt: left as they come).
std::optional<Xattrs> opt_xattrs(const json& j);
void put_xattrs(json& j, const std::optional<Xattrs>& x);
void from_json(const json& j, RunningPatched& r);
void to_json(json& j, const RunningPatched& r);
void from_json(const json& j, NativeEntry& e);
void to_json(json& j, const NativeEntry& e);
void from_json(const json& j, LayerRef& l);
void to_json(json& j, const LayerRef& l);
void from_json(const json& j, UpperRef& u);
void from_json(const json& j, BuildPicture& b);
void to_json(json& j, const BuildPicture& b);
void from_json(const json& j, FoldMark& f);  // "into" or "from" names the other side
void to_json(json& j, const UpperRef& u);

// Whether `path` (absolute) may be litter: a trash or half-restored sibling of ours,
// ".<name>.overlay-trash-<hex>" or ".<name>.overlay-restore-<hex>"; nothing else is ever deleted
// on a manifest's word.
bool is_litter_path(const std::string& path);

// Parses and strictly validates a manifest; throws ManifestError naming the offending key.
Manifest parse_manifest(const std::string& text);

// The JSON text for m (natives rewritten from the model, everything else kept).
std::string serialize_manifest(const Manifest& m);

// Removes the modules[] entries that belong to patch `patch_id` (key "patch_id"); returns their
// files (relative to the overlay) for the caller to delete once the manifest is saved.
std::vector<std::string> remove_patch_modules(Manifest& m, const std::string& patch_id);
// True when some entry (native or Python) belongs to patch `patch_id`.
bool has_patch(const Manifest& m, const std::string& patch_id);

// True when rel is a safe relative path: not empty, not absolute, no "..", no NUL.
bool is_safe_relative(const std::string& rel);

// Loads <overlay>/_overlay_manifest.json; nothing when the file does not exist.
std::optional<Manifest> load_manifest(DiskReader& disk, const fs::path& overlay);

// Manifests read once per operation: a stack is walked from several sides, and a claim asks of
// one record for every file. A missing manifest is nullopt; an unreadable one is remembered with
// its reason (`unreadable`, `why_unreadable`) and is nullopt too. `reread` reads the bytes again
// (under a lock taken since) and parses them only where they differ from those parsed before.
class ManifestCache {
 public:
  explicit ManifestCache(DiskReader& disk) : disk_(disk) {}
  const std::optional<Manifest>& get(const std::string& overlay);
  bool unreadable(const std::string& overlay);
  const std::string& why_unreadable(const std::string& overlay);
  // As load_manifest (throws ManifestError for an unreadable record), reading the file again.
  const std::optional<Manifest>& reread(const std::string& overlay);
  // Reads every record cached so far again (now under a lock taken since), as reread, keeping
  // an unreadable one's reason rather than throwing.
  void reread_all();
  // Replaces what is cached for `overlay` (after the caller saved it).
  void put(const std::string& overlay, const Manifest& m);
  // How often `overlay`'s bytes were parsed through this cache (what a test counts).
  std::size_t parses(const std::string& overlay) const;

 private:
  struct Record {
    std::optional<Manifest> manifest;
    std::optional<std::string> bytes;  // what was parsed; none: missing, not a file, or put
    std::string error;                 // why it cannot be read ("" where it can)
    std::size_t parses = 0;
  };
  Record& load(const std::string& overlay, Record& r);
  DiskReader& disk_;
  std::map<std::string, Record> cache_;
};

// Saves atomically: <manifest>.lock, fsync, rename over, fsync the overlay directory (not with
// NameDurable::no: a power cut may then leave the manifest before this write, whole).
void save_manifest(Disk& disk, const fs::path& overlay, const Manifest& m, NameDurable name = NameDurable::yes);
// The same into an overlay held open (disk.hpp's DirHandle): its record is written there, and made
// durable, wherever the overlay has been moved meanwhile.
void save_manifest(Disk& disk, const DirHandle& overlay, const Manifest& m);

}  // namespace overlay
