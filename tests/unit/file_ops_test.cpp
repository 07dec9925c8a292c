#include "overlay/file_ops.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cstdio>

#include <gtest/gtest.h>

#include "overlay/error.hpp"
#include "overlay/hash.hpp"
#include "overlay/recording_disk.hpp"

#include "faulty_disk.hpp"
#include "test_util.hpp"

using namespace overlay;
using namespace overlay::test;

TEST(CopyFileHashing, CopiesAndHashesWithMode) {
  TempDir t;
  std::string data(3 * (1 << 20) + 17, 'q');
  write_file(t / "src", data);
  std::string sha = copy_file_hashing(real_disk(), t / "src", t / "dst", 0750, Durable::yes).sha256;
  EXPECT_EQ(sha, sha256_hex(data));
  EXPECT_EQ(read_file(t / "dst"), data);
  struct stat st {};
  ::stat((t / "dst").c_str(), &st);
  EXPECT_EQ(st.st_mode & 07777, 0750u);
}

// On XFS with reflink and btrfs (the CoW ctest runs put $TMPDIR there) the copy shares the
// source's blocks; elsewhere it is a plain copy. Either way the bytes and the hash are right.
TEST(CopyFileHashing, ClonesWhereTheFilesystemSharesBlocks) {
  TempDir t;
  std::string data(3 * (1 << 20) + 5, 'c');
  for (std::size_t i = 0; i < data.size(); i += 4096) data[i] = static_cast<char>(i >> 12);
  write_file(t / "src", data);
  bool cow = can_clone_in(t.path());
  std::printf("copy-on-write in %s: %s\n", t.path().c_str(), cow ? "yes" : "no");
  Copied c = copy_file_hashing(real_disk(), t / "src", t / "dst", 0640, Durable::yes);
  EXPECT_EQ(c.sha256, sha256_hex(data));
  EXPECT_EQ(c.way == CopyWay::cloned, cow);
  EXPECT_EQ(read_file(t / "dst"), data);
  EXPECT_EQ(shares_blocks(t / "dst"), cow);
  struct stat st {};
  ::stat((t / "dst").c_str(), &st);
  EXPECT_EQ(st.st_mode & 07777, 0640u);
}

namespace {
// "Clones" (or kernel-copies) by copying, then changes the source at once: what a build
// rewriting the file in the instant between the copy and the hash would do.
enum class Fill { clone, kernel_copy };
class FillThenChangeSourceDisk : public RecordingDisk {
 public:
  explicit FillThenChangeSourceDisk(Fill how) : RecordingDisk(real_disk(), RecordData::sizes), how_(how) {}
  std::unique_ptr<WriteHandle> create(const At& p, mode_t mode, CreateMode how) override {
    return std::make_unique<Writer>(RecordingDisk::create(p, mode, how), how_);
  }

 private:
  class Writer : public WriteHandle {
   public:
    Writer(std::unique_ptr<WriteHandle> w, Fill how) : w_(std::move(w)), how_(how) {}
    void write(const char* b, std::size_t n) override { w_->write(b, n); }
    void sync() override { w_->sync(); }
    void close() override { w_->close(); }
    bool clone_from(const At& src) override { return how_ == Fill::clone && fill(src.full()); }
    bool copy_from(const At& src) override { return how_ == Fill::kernel_copy && fill(src.full()); }

   private:
    bool fill(const fs::path& src) {
      std::string bytes = read_file(src);
      w_->write(bytes.data(), bytes.size());
      write_file(src.string() + ".new", std::string(bytes.size(), 'Z'));
      fs::rename(src.string() + ".new", src);
      return true;
    }
    std::unique_ptr<WriteHandle> w_;
    Fill how_;
  };
  Fill how_;
};
}  // namespace

// The hash recorded is the hash of the bytes the copy holds, even when the source changed after a
// clone or a kernel copy (the source is hashed then, and trusted only when it provably did not).
TEST(CopyFileHashing, ASourceChangedWhileCopiedIsHashedFromTheCopy) {
  for (Fill how : {Fill::clone, Fill::kernel_copy}) {
    TempDir t;
    std::string data(2 * (1 << 20) + 3, 'o');
    write_file(t / "src", data);
    FillThenChangeSourceDisk disk(how);
    std::string sha = copy_file_hashing(disk, t / "src", t / "dst", 0644, Durable::yes).sha256;
    EXPECT_EQ(read_file(t / "dst"), data);
    EXPECT_EQ(sha, sha256_hex(data));
    EXPECT_NE(read_file(t / "src"), data);  // the source did change
  }
}

// Where the kernel cannot copy either (a Disk whose writers refuse both), every byte is streamed.
TEST(CopyFileHashing, FallsBackToStreamingWhenTheKernelCannotCopy) {
  TempDir t;
  std::string data(3 * (1 << 20) + 1, 's');
  write_file(t / "src", data);
  struct Refusing : RecordingDisk {
    Refusing() : RecordingDisk(real_disk(), RecordData::sizes) {}
    std::unique_ptr<WriteHandle> create(const At& p, mode_t m, CreateMode how) override {
      struct W : WriteHandle {
        std::unique_ptr<WriteHandle> w;
        void write(const char* b, std::size_t n) override { w->write(b, n); }
        void sync() override { w->sync(); }
        void close() override { w->close(); }
      };
      auto w = std::make_unique<W>();
      w->w = RecordingDisk::create(p, m, how);
      return w;
    }
  } refusing;
  Copied c = copy_file_hashing(refusing, t / "src", t / "dst", 0600, Durable::yes);
  EXPECT_EQ(c.sha256, sha256_hex(data));
  EXPECT_EQ(c.way, CopyWay::streamed);
  EXPECT_EQ(read_file(t / "dst"), data);
  auto ops = refusing.ops();
  EXPECT_GT(std::count_if(ops.begin(), ops.end(), [](const DiskOp& o) { return o.op == "write"; }), 1);
}

TEST(CopyFileHashing, RefusesExistingDestination) {
  TempDir t;
  write_file(t / "src", "a");
  write_file(t / "dst", "keep");
  EXPECT_THROW(copy_file_hashing(real_disk(), t / "src", t / "dst", 0644, Durable::no), DiskError);
  EXPECT_EQ(read_file(t / "dst"), "keep");
}

TEST(ReplaceFileAtomically, ReplacesKeepsModeLeavesNoTemp) {
  TempDir t;
  write_file(t / "new", "new contents");
  write_file(t / "dir/target", "old", 0600);
  replace_file_atomically(real_disk(), t / "new", t / "dir/target", 0755);
  EXPECT_EQ(read_file(t / "dir/target"), "new contents");
  struct stat st {};
  ::stat((t / "dir/target").c_str(), &st);
  EXPECT_EQ(st.st_mode & 07777, 0755u);
  EXPECT_EQ(std::distance(fs::directory_iterator(t / "dir"), fs::directory_iterator()), 1);
}

TEST(ReplaceFileAtomically, FailureBeforeRenameLeavesTargetIntact) {
  TempDir t;
  write_file(t / "new", "new");
  write_file(t / "target", "old");
  FaultyDisk disk(real_disk());
  disk.fail_at(3, ENOSPC);  // create, write, *fsync*
  EXPECT_THROW(replace_file_atomically(disk, t / "new", t / "target", 0644), DiskError);
  EXPECT_EQ(read_file(t / "target"), "old");
  EXPECT_EQ(std::distance(fs::directory_iterator(t.path()), fs::directory_iterator()), 2);  // no temp left
}

TEST(WriteFileAtomically, LockfileShape) {
  TempDir t;
  write_file_atomically(real_disk(), t / "m.json", "{}", 0644);
  EXPECT_EQ(read_file(t / "m.json"), "{}");
  EXPECT_FALSE(fs::exists(t / "m.json.lock"));
}

TEST(RemoveTree, DoesNotFollowSymlinks) {
  TempDir t;
  write_file(t / "outside/keep", "k");
  write_file(t / "tree/a/b", "x");
  fs::create_symlink(t / "outside", t / "tree/link");
  fs::permissions(t / "tree/a", fs::perms::owner_read | fs::perms::owner_exec);
  remove_tree(real_disk(), t / "tree");
  EXPECT_FALSE(fs::exists(t / "tree"));
  EXPECT_EQ(read_file(t / "outside/keep"), "k");
  remove_tree(real_disk(), t / "missing");  // not an error
}

// The rm -rf race: a directory of the tree is swapped for a symlink to an outside directory in
// the instant after it was seen to be a directory. Nothing outside may be deleted: each
// directory is entered through a descriptor opened without following a symlink.
TEST(RemoveTree, ADirectorySwappedForASymlinkMidwayIsNeverFollowed) {
  TempDir t;
  write_file(t / "outside/keep", "k");
  write_file(t / "tree/sub/x", "x");
  struct SwapAfterStat : RecordingDisk {
    fs::path victim, outside;
    bool swapped = false;
    SwapAfterStat(fs::path v, fs::path o)
        : RecordingDisk(real_disk(), RecordData::sizes), victim(std::move(v)), outside(std::move(o)) {}
    FileInfo info(const At& p, Follow f) override {
      FileInfo fi = RecordingDisk::info(p, f);
      if (!swapped && p.full() == victim && fi.type == FileType::directory) {
        swapped = true;
        fs::rename(victim, victim.string() + ".moved");
        fs::create_directory_symlink(outside, victim);
      }
      return fi;
    }
  } disk(t / "tree/sub", t / "outside");
  try {
    remove_tree(disk, t / "tree");
  } catch (const DiskError&) {
    // Refusing to go on (ELOOP, or the moved directory left behind) is fine; following is not.
  }
  EXPECT_TRUE(disk.swapped);
  EXPECT_EQ(read_file(t / "outside/keep"), "k");
}

TEST(WalkTree, PreOrderSortedNoFollowAndPrune) {
  TempDir t;
  write_file(t / "r/b/x", "");
  write_file(t / "r/a", "");
  write_file(t / "r/c/skip/deep", "");
  fs::create_symlink(t / "r/b", t / "r/link");
  std::vector<std::string> seen;
  walk_tree(real_disk(), t / "r", [&](const fs::path& rel, FileType type) {
    seen.push_back(rel.string());
    return rel == "c" || type == FileType::symlink ? WalkStep::skip : WalkStep::descend;
  });
  EXPECT_EQ(seen, (std::vector<std::string>{"a", "b", "b/x", "c", "link"}));
}

TEST(FileOps, SiblingTempAndAbsoluteNormal) {
  fs::path p = sibling_temp_path("/a/b/file.so", "tag");
  EXPECT_EQ(p.parent_path(), "/a/b");
  EXPECT_EQ(p.filename().string().rfind(".file.so.tag-", 0), 0u);
  EXPECT_EQ(absolute_normal("/a/./b/../c/"), "/a/c");
  EXPECT_NE(random_hex(8), random_hex(8));
}
