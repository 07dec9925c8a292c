#pragma once
// Small single-purpose helpers built on the Disk interface. Each says what it guarantees.
#include <functional>
#include <string>

#include "overlay/copy_pipeline.hpp"
#include "overlay/disk.hpp"

namespace overlay {

// Replaces dest by a copy of src atomically: writes a temporary file beside dest, fsyncs it,
// gives it `mode` (and, when dest exists, dest's owner and extended attributes), renames it over
// dest, fsyncs the directory. With Durable::no neither fsync is made: a reader still sees the old
// or the new file, never a torn one, but a power cut may leave either (or, on a filesystem that
// orders nothing, the new name with its bytes lost): for a file something else can put back
// (add-native's swap, which the record restores). Returns the SHA-256 of the new file.
std::string replace_file_atomically(Disk& disk, const fs::path& src, const At& dest, mode_t mode,
                                    Durable durable = Durable::yes);

// Writes `data` to dest with git's lockfile shape: dest.lock, fsync, rename over dest, fsync dir.
// dest.lock is truncated, not created exclusively (a crash may leave one): two writers of one
// dest must be serialised by the caller (an overlay's files: its OverlayLock). A name inside a
// held directory (At) is written there, wherever that directory has been moved meanwhile.
// NameDurable::no leaves out the directory fsync: after a power cut dest holds the old bytes or
// the new, whole (the data is fsynced before the rename either way), for a write whose loss
// loses nothing but what it adds (a record a later reader can do without).
enum class NameDurable { yes, no };
void write_file_atomically(Disk& disk, const At& dest, const std::string& data, mode_t mode,
                           NameDurable name = NameDurable::yes);

// Reads a whole (small) file; refuses files larger than max_bytes.
std::string read_small_file(DiskReader& disk, const fs::path& p, std::size_t max_bytes);

// Removes a file (or symlink) and fsyncs its directory: once this returns, the removal
// survives a crash.
void remove_file_durably(Disk& disk, const At& p);

// Removes a file, symlink or whole directory tree without following symlinks.
// A missing path is not an error, nor a part of it that vanishes meanwhile (another deleter).
// Each directory is entered through a descriptor opened with O_NOFOLLOW, so one swapped for a
// symlink while the tree is deleted fails the open: nothing outside the tree is ever deleted.
void remove_tree(Disk& disk, const At& p);

// Directory `at` held open for acting inside it: opened through its handle when `at` is a name
// inside one (never a symlink), otherwise by its real path (a symlink above it followed once, as
// given) with no symlink followed after that.
std::unique_ptr<DirHandle> hold_dir(Disk& disk, const At& at);

// remove_tree, then an fsync of the parent when something was removed: once this returns, the
// tree's name is gone for good. For trees renamed aside inside an install, which nothing would
// sweep after a power cut once the manifest no longer names their entry.
void remove_tree_durably(Disk& disk, const fs::path& p);

// Creates p and its missing parents (like mkdir -p); the name of each directory it creates is
// made durable (its parent is fsynced), so a power cut cannot lose a directory that was used.
void make_dirs(Disk& disk, const fs::path& p, mode_t mode = 0755);

enum class WalkStep { descend, skip };
// Visits every entry below root (pre-order, sorted names, root itself excluded) without
// following symlinks; `rel` is relative to root, `type` comes from readdir (an lstat only where
// the filesystem does not report it). Returning skip on a directory prunes it.
// A directory that cannot be listed throws, unless on_error is given: then it is reported
// there and skipped.
void walk_tree(DiskReader& disk, const fs::path& root,
               const std::function<WalkStep(const fs::path& rel, FileType type)>& visit,
               const std::function<void(const fs::path& dir, const std::string& why)>& on_error = {});

// Why directory `dir` (as `di`) cannot be renamed within its parent, or "" when it can: that
// needs a writable parent on the dir's own filesystem (a mount point cannot be renamed).
std::string why_not_renamable(DiskReader& disk, const fs::path& dir, const FileInfo& di);

// `name` when it is at most `room` bytes, else its first bytes, "~" and 16 hex digits of its
// SHA-256, `room` bytes in all: distinct names stay distinct, and a name derived from a legal
// one (a backup, a temp) stays within NAME_MAX whatever the original's length.
std::string fit_name(const std::string& name, std::size_t room);

// The longest stem a hidden sibling name starts with: what is left of NAME_MAX (255) after
// the longest suffix of ours (".overlay-aside-<entry id>", ".overlay-restore-<hex>").
inline constexpr std::size_t kStemRoom = 190;

// The start of every hidden sibling name of ours for a file called `name`: "." + fit_name(name,
// kStemRoom). Temps, trash and aside copies all begin with it, then ".overlay-".
std::string hidden_stem(const std::string& name);

// Whether `name` (a file name) is one of the hidden siblings this tool makes beside a path
// (".<stem>.overlay-{aside,new,restore,trash}-…"): a temp, trash, a half-restored copy or an
// aside backup, never a build's output.
bool is_own_sibling_name(const std::string& name);

// A fresh name beside p for a temporary: "<dir>/<hidden_stem>.<tag>-<random>", within NAME_MAX.
fs::path sibling_temp_path(const fs::path& p, const std::string& tag);

// Random lower-case hex of `bytes` bytes (from the OS).
std::string random_hex(std::size_t bytes);

// Absolute, lexically normal form of p (no symlink resolution).
fs::path absolute_normal(const fs::path& p);

// Whether p is dir or lies below it, lexically (both absolute_normal'ed; no symlink resolution).
bool is_within(const fs::path& p, const fs::path& dir);

}  // namespace overlay
