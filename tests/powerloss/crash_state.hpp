#pragma once
// The crash-state model of issue 14 (SPEC, "Power loss"): replays a recorded Disk trace
// ($OVERLAY_DISK_TRACE with $OVERLAY_DISK_TRACE_BYTES=1) over a snapshot of the tree it ran on,
// inode by inode, and builds every tree a power cut right after any prefix of that trace may
// leave behind under a stated persistence model:
//
//  * data written to a file and not yet made durable (fsync of that file, or syncfs) is lost, or
//    kept up to any 4 KiB boundary, or kept whole;
//  * a create, mkdir, symlink, link, rename or unlink not yet made durable (an fsync of the
//    directory holding the new name — for a rename, its destination — or syncfs) is lost or kept,
//    independently of every other such operation; a rename is atomic (both names or neither);
//  * a chmod not yet made durable (fsync of that inode, or syncfs) is lost or kept;
//  * what was made durable stays.
//
// Model::ordered adds what ext4's default data=ordered mode guarantees: a rename of a file that
// survives brings the data written to that file before it. Model::writeback drops that and adds
// what data=writeback does: a file's new size may survive while its unsynced blocks read as zeros.
#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace overlay::test::crash {

namespace fs = std::filesystem;

// One line of a recorded trace (see overlay::to_line).
struct TraceOp {
  std::string op, path, path2;
  std::uint64_t offset = 0, size = 0;
  unsigned mode = 0;
  std::string data;
};
std::vector<TraceOp> parse_trace(const std::string& text);

// A tree as the explorer compares it: type, permission bits, bytes (a symlink's target).
struct Node {
  char type = 'f';  // 'f' file, 'd' directory, 'l' symlink
  unsigned mode = 0;
  std::string data;
  // Which inode of the replay this is (see Trace::initial_inode): its identity across renames,
  // which a power cut keeps but materialising a tree cannot (new files get new inode numbers).
  // -1 when read from disk. Not compared.
  int origin = -1;
  bool operator==(const Node& o) const { return type == o.type && mode == o.mode && data == o.data; }
};
using Tree = std::map<std::string, Node>;  // path relative to the root ("" is the root itself)

Tree read_tree(const fs::path& root);
// Empties root and writes `tree` into it (files, links, then directory modes deepest first).
void write_tree(const fs::path& root, const Tree& tree);
// The part of `tree` below `rel`, with paths relative to it.
Tree subtree(const Tree& tree, const std::string& rel);
// The first few differences, one per line ("" when equal).
std::string tree_diff(const Tree& want, const Tree& got, std::size_t limit = 6);
// A short fingerprint of a whole tree, for counting distinct states.
std::string tree_key(const Tree& tree);

enum class Model { ordered, writeback };
const char* model_name(Model m);

// The trace, replayed in full over the initial tree, remembering which inode each operation
// touched so that any subset of it can be replayed again.
class Trace {
 public:
  Trace(fs::path root, Tree initial, std::vector<TraceOp> ops);
  std::size_t size() const { return ops_.size(); }
  const TraceOp& op(std::size_t i) const { return ops_[i]; }
  // The tree after every operation, nothing lost: what the real run left.
  Tree final_tree() const;
  // The replay's inode of path `rel` of the initial tree (Node::origin of it wherever it moves).
  int initial_inode(const std::string& rel) const;

  // One undecided thing at a crash point and how many outcomes it has.
  struct Choice {
    enum Kind { name, data, mode } kind;
    int index;  // name: the trace op; data and mode: the inode
    int outcomes;
  };
  // A power cut right after the first `prefix` operations.
  class Point {
   public:
    const std::vector<Choice>& choices() const { return choices_; }
    // How many combinations of outcomes (saturating at 2^62).
    std::uint64_t combinations() const;
    // The outcomes numbered n in mixed radix (n < combinations()).
    std::vector<int> nth(std::uint64_t n) const;
    std::vector<int> sample(std::mt19937_64& rng) const;
    Tree materialize(const std::vector<int>& pick) const;
    // The trace operation a name choice decides.
    const TraceOp& op_of(const Choice& c) const;
    // Which operations and data a pick loses, for a failure report.
    std::string describe(const std::vector<int>& pick) const;

   private:
    friend class Trace;
    struct State;
    const Trace* trace_ = nullptr;
    Model model_ = Model::ordered;
    std::size_t prefix_ = 0;
    std::vector<Choice> choices_;
    std::shared_ptr<const State> state_;
  };
  Point at(std::size_t prefix, Model model) const;

 private:
  fs::path root_;
  Tree initial_;
  std::vector<TraceOp> ops_;
};

}  // namespace overlay::test::crash
