#pragma once
// One reader of a build's own graph: what Ninja's `-t query` and `-t deps` tools say, and what a
// CMake compile database lists, parsed in one place for discover (which build compiles a file, and
// what it rebuilds) and for the build watch (what an output is relinked from). Read-only: each is
// a query of the build's files, never a build.
#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "overlay/disk.hpp"

namespace overlay {

namespace fs = std::filesystem;

// How an input of a Ninja edge makes its outputs rebuild: explicit and implicit (`|`) inputs do,
// an order-only one (`||`) never does.
enum class InputKind { explicit_, implicit, order_only };

// What `ninja -C DIR -t query PATH` says of PATH: the edge that builds it (its rule and inputs) and
// the outputs it is an input of, each named as build.ninja names it. `known` is false where Ninja
// does not know the path (or cannot run).
struct NinjaNode {
  bool known = false;
  std::string rule;  // the rule of the edge that builds it; empty for a source
  std::vector<std::pair<std::string, InputKind>> inputs;
  std::vector<std::string> outputs;
};
NinjaNode ninja_query(const fs::path& dir, const std::string& path);
// The parsing half, for `ninja -t query`'s text.
NinjaNode parse_ninja_query(const std::string& text);

// What `ninja -C DIR -t deps` says: each output with the dependencies its deps log records (as the
// log names them). Empty where Ninja cannot run there.
std::map<std::string, std::vector<std::string>> ninja_deps(const fs::path& dir);
std::map<std::string, std::vector<std::string>> parse_ninja_deps(const std::string& text);

// One command of a compile database (compile_commands.json): the file it compiles and the
// directory it runs in, as written.
struct CompileCommand {
  std::string file, directory;
};
// The database at `path`; empty where it is missing or not one (it is only evidence).
std::vector<CompileCommand> compile_database(DiskReader& disk, const fs::path& path);

}  // namespace overlay
