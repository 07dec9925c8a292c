#include "crash_state.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <memory>
#include <set>
#include <sstream>
#include <stdexcept>

#include "overlay/hash.hpp"

namespace overlay::test::crash {

namespace {

constexpr std::size_t kBlock = 4096;

std::string unhex(const std::string& h) {
  auto nib = [](char c) { return c <= '9' ? c - '0' : c - 'a' + 10; };
  std::string out(h.size() / 2, '\0');
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<char>(nib(h[2 * i]) << 4 | nib(h[2 * i + 1]));
  return out;
}

std::vector<std::string> split_tabs(const std::string& line) {
  std::vector<std::string> f;
  std::size_t start = 0;
  for (;;) {
    auto tab = line.find('\t', start);
    f.push_back(line.substr(start, tab - start));
    if (tab == std::string::npos) return f;
    start = tab + 1;
  }
}

struct Inode {
  char type = 'f';
  unsigned mode = 0;
  std::string data;  // a file's bytes now, or a symlink's target
  std::string durable;
  unsigned durable_mode = 0;
  std::string name;  // the last path it was seen at, for reports
  bool renamed = false;
};

struct Change {
  int dir;
  std::string name;
  int inode;
  bool add;
};

// A namespace operation: lost or kept as a whole.
struct Unit {
  std::size_t op;
  std::vector<Change> changes;
  int sync_dir;  // the directory whose fsync makes it durable
  bool rename = false;
  int inode = -1;
  bool durable = false;
};

using Entries = std::map<int, std::map<std::string, int>>;

// The full replay of a trace prefix: every inode as it is now and as it is durably.
class Sim {
 public:
  Sim(const fs::path& root, const Tree& initial) : root_(root.string()) {
    std::map<std::string, int> by_path;
    for (const auto& [rel, node] : initial) {
      int ino = add_inode(node.type, node.mode, node.data, root_ + (rel.empty() ? "" : "/" + rel));
      inodes[ino].durable = node.data;
      by_path[rel] = ino;
      if (rel.empty()) continue;
      auto slash = rel.rfind('/');
      std::string parent = slash == std::string::npos ? "" : rel.substr(0, slash);
      entries[by_path.at(parent)][rel.substr(slash + 1)] = ino;
    }
    initial_entries = entries;
  }

  void apply(std::size_t i, const TraceOp& op) {
    const std::string& o = op.op;
    bool two = o == "rename" || o == "exchange" || o == "link";
    // Scratch space elsewhere (a diff tried on private copies in $TMPDIR) is not the tree's.
    if (!inside(op.path) && !(two && inside(op.path2))) return;
    if (two && inside(op.path) != inside(op.path2))
      throw std::runtime_error("crash model: a rename across the root: " + op.path);
    if (o == "create") return create(i, op);
    if (o == "write" || o == "clone" || o == "copy") return write(op);
    if (o == "fsync") return op.path2 == "dir" ? sync_dir(op.path) : sync_file(op.path);
    if (o == "syncfs") return sync_all();
    if (o == "close") return (void)handles_.erase(op.path);
    if (o == "rename") return rename(i, op.path, op.path2);
    if (o == "exchange") return exchange(i, op.path, op.path2);
    if (o == "mkdir") return add_name(i, op.path, add_inode('d', op.mode, "", op.path));
    if (o == "symlink") return add_name(i, op.path, add_inode('l', 0777, op.path2, op.path));
    if (o == "link") return add_name(i, op.path, must_resolve(op.path2));
    if (o == "remove") return remove(i, op.path);
    if (o == "chmod") return (void)(inodes[must_resolve(op.path)].mode = op.mode);
    if (o == "utime" || o == "chown" || o == "xattr") return;  // the explorer compares bytes and modes only
    throw std::runtime_error("crash model: unknown trace op " + o);
  }

  std::vector<Inode> inodes;
  Entries entries, initial_entries;
  std::vector<Unit> units;

 private:
  int add_inode(char type, unsigned mode, const std::string& data, const std::string& name) {
    Inode n;
    n.type = type;
    n.mode = n.durable_mode = mode;
    n.data = data;
    n.durable = type == 'f' ? "" : data;
    n.name = name;
    inodes.push_back(n);
    return static_cast<int>(inodes.size() - 1);
  }

  bool inside(const std::string& p) const { return p == root_ || p.rfind(root_ + "/", 0) == 0; }

  // The inode at an absolute path, or -1 (outside the root, or missing).
  int resolve(const std::string& p) const {
    if (!inside(p)) return -1;
    int cur = 0;
    std::istringstream parts(p.substr(root_.size()));
    for (std::string part; std::getline(parts, part, '/');) {
      if (part.empty()) continue;
      auto d = entries.find(cur);
      if (d == entries.end()) return -1;
      auto e = d->second.find(part);
      if (e == d->second.end()) return -1;
      cur = e->second;
    }
    return cur;
  }
  int must_resolve(const std::string& p) const {
    int ino = resolve(p);
    if (ino < 0) throw std::runtime_error("crash model: the trace names a missing path " + p);
    return ino;
  }
  std::pair<int, std::string> parent(const std::string& p) const {
    auto slash = p.rfind('/');
    return {must_resolve(p.substr(0, slash)), p.substr(slash + 1)};
  }

  void create(std::size_t i, const TraceOp& op) {
    auto [d, n] = parent(op.path);
    auto it = entries[d].find(n);
    int ino;
    if (it != entries[d].end() && op.path2 == "truncate") {
      ino = it->second;
      inodes[ino].data.clear();
      inodes[ino].mode = op.mode;
    } else {
      ino = add_inode('f', op.mode, "", op.path);
      entries[d][n] = ino;
      units.push_back({i, {{d, n, ino, true}}, d});
    }
    handles_[op.path] = ino;
  }

  void write(const TraceOp& op) {
    auto h = handles_.find(op.path);
    int ino = h != handles_.end() ? h->second : must_resolve(op.path);
    Inode& n = inodes[ino];
    // The ordered model's "a surviving rename brings the data written before it" is kept simple
    // by this: no trace writes to a file after renaming it.
    if (n.renamed) throw std::runtime_error("crash model: a write after a rename of " + op.path);
    if (op.data.size() != op.size)
      throw std::runtime_error("crash model: the trace has no bytes (OVERLAY_DISK_TRACE_BYTES=1)");
    if (n.data.size() < op.offset + op.size) n.data.resize(op.offset + op.size, '\0');
    n.data.replace(op.offset, op.size, op.data);
  }

  void sync_file(const std::string& p) {
    auto h = handles_.find(p);
    int ino = h != handles_.end() ? h->second : resolve(p);
    if (ino < 0) return;
    inodes[ino].durable = inodes[ino].data;
    inodes[ino].durable_mode = inodes[ino].mode;
  }

  void sync_dir(const std::string& p) {
    int d = resolve(p);
    if (d < 0) return;  // above the root: durable by assumption
    for (auto& u : units)
      if (u.sync_dir == d) u.durable = true;
    inodes[d].durable_mode = inodes[d].mode;
  }

  void sync_all() {
    for (auto& u : units) u.durable = true;
    for (auto& n : inodes) {
      n.durable = n.data;
      n.durable_mode = n.mode;
    }
  }

  void rename(std::size_t i, const std::string& from, const std::string& to) {
    auto [ds, ns] = parent(from);
    auto [dd, nd] = parent(to);
    int ino = entries[ds].at(ns);
    entries[ds].erase(ns);
    entries[dd][nd] = ino;
    inodes[ino].name = to;
    inodes[ino].renamed = true;
    units.push_back({i, {{ds, ns, ino, false}, {dd, nd, ino, true}}, dd, true, ino});
  }

  // Both names change at once or neither (one unit), durable with the second name's directory.
  void exchange(std::size_t i, const std::string& a, const std::string& b) {
    auto [da, na] = parent(a);
    auto [db, nb] = parent(b);
    int ia = entries[da].at(na), ib = entries[db].at(nb);
    entries[da][na] = ib;
    entries[db][nb] = ia;
    std::swap(inodes[ia].name, inodes[ib].name);
    units.push_back({i, {{da, na, ib, true}, {db, nb, ia, true}}, db, false, ia});
  }

  void add_name(std::size_t i, const std::string& p, int ino) {
    auto [d, n] = parent(p);
    entries[d][n] = ino;
    units.push_back({i, {{d, n, ino, true}}, d, false, ino});
  }

  void remove(std::size_t i, const std::string& p) {
    auto [d, n] = parent(p);
    int ino = entries[d].at(n);
    entries[d].erase(n);
    units.push_back({i, {{d, n, ino, false}}, d, false, ino});
  }

  std::string root_;
  std::map<std::string, int> handles_;
};

// What unsynced data may read as after the cut: outcome 0 is what was written.
std::vector<std::string> data_outcomes(const Inode& n, Model m) {
  std::vector<std::string> out = {n.data, n.durable};
  for (std::size_t at = kBlock; at < n.data.size(); at += kBlock)
    if (at > n.durable.size() || n.data.compare(0, at, n.durable, 0, at) != 0) out.push_back(n.data.substr(0, at));
  if (m == Model::writeback && n.data.size() > n.durable.size()) {
    std::string zeros = n.durable;
    zeros.resize(n.data.size(), '\0');
    out.push_back(zeros);
  }
  std::vector<std::string> unique;
  for (auto& s : out)
    if (std::find(unique.begin(), unique.end(), s) == unique.end()) unique.push_back(std::move(s));
  return unique;
}

}  // namespace

std::vector<TraceOp> parse_trace(const std::string& text) {
  std::vector<TraceOp> ops;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    auto f = split_tabs(line);
    if (f.size() < 6) throw std::runtime_error("crash model: a short trace line: " + line);
    TraceOp op{
        f[0], f[1], f[2], std::stoull(f[3]), std::stoull(f[4]), static_cast<unsigned>(std::stoul(f[5], nullptr, 8)),
        {}};
    if (f.size() > 6) op.data = unhex(f[6]);
    ops.push_back(std::move(op));
  }
  return ops;
}

Tree read_tree(const fs::path& root) {
  Tree t;
  std::function<void(const fs::path&, const std::string&)> walk = [&](const fs::path& p, const std::string& rel) {
    struct stat st {};
    if (::lstat(p.c_str(), &st) != 0) throw std::runtime_error("read_tree: lstat " + p.string());
    Node n;
    n.mode = st.st_mode & 07777;
    if (S_ISDIR(st.st_mode)) {
      n.type = 'd';
      t[rel] = n;
      std::vector<std::string> names;
      for (const auto& e : fs::directory_iterator(p)) names.push_back(e.path().filename().string());
      for (const auto& name : names) walk(p / name, rel.empty() ? name : rel + "/" + name);
      return;
    }
    if (S_ISLNK(st.st_mode)) {
      n.type = 'l';
      n.data = fs::read_symlink(p).string();
    } else {
      std::ifstream f(p, std::ios::binary);
      std::ostringstream ss;
      ss << f.rdbuf();
      n.data = ss.str();
    }
    t[rel] = n;
  };
  walk(root, "");
  return t;
}

void write_tree(const fs::path& root, const Tree& tree) {
  std::error_code ec;
  // A directory left without write or search permission by a mode under test must still go.
  for (auto it = fs::recursive_directory_iterator(root, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec))
    if (it->is_directory(ec) && !it->is_symlink(ec)) ::chmod(it->path().c_str(), 0700);
  for (const auto& e : fs::directory_iterator(root)) fs::remove_all(e.path());
  for (const auto& [rel, n] : tree) {
    if (rel.empty()) continue;
    fs::path p = root / rel;
    if (n.type == 'd') {
      fs::create_directory(p);
    } else if (n.type == 'l') {
      fs::create_symlink(n.data, p);
    } else {
      int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
      if (fd < 0 || ::write(fd, n.data.data(), n.data.size()) != static_cast<ssize_t>(n.data.size()) ||
          ::fchmod(fd, n.mode) != 0)
        throw std::runtime_error("write_tree: " + p.string());
      ::close(fd);
    }
  }
  for (auto it = tree.rbegin(); it != tree.rend(); ++it)
    if (it->second.type == 'd') ::chmod((it->first.empty() ? root : root / it->first).c_str(), it->second.mode);
}

Tree subtree(const Tree& tree, const std::string& rel) {
  Tree out;
  for (const auto& [p, n] : tree) {
    if (p == rel)
      out[""] = n;
    else if (p.rfind(rel + "/", 0) == 0)
      out[p.substr(rel.size() + 1)] = n;
  }
  return out;
}

std::string tree_diff(const Tree& want, const Tree& got, std::size_t limit) {
  std::ostringstream out;
  std::size_t n = 0;
  auto say = [&](const std::string& s) {
    if (n++ < limit) out << s << "\n";
  };
  auto what = [](const Node& x) {
    return std::string(1, x.type) + " " + std::to_string(x.mode) + " " + std::to_string(x.data.size()) + "B sha " +
           sha256_hex(x.data).substr(0, 12);
  };
  for (const auto& [p, w] : want) {
    auto g = got.find(p);
    if (g == got.end())
      say("missing " + p + " (" + what(w) + ")");
    else if (!(g->second == w))
      say("differs " + p + ": want " + what(w) + ", got " + what(g->second));
  }
  for (const auto& [p, g] : got)
    if (!want.count(p)) say("extra " + p + " (" + what(g) + ")");
  if (n > limit) out << "... " << n - limit << " more\n";
  return out.str();
}

std::string tree_key(const Tree& tree) {
  Sha256 h;
  for (const auto& [p, n] : tree) {
    std::string head = p + '\0' + n.type + std::to_string(n.mode) + '\0' + std::to_string(n.data.size()) + '\0';
    h.update(head.data(), head.size());
    h.update(n.data.data(), n.data.size());
  }
  return h.finish_hex();
}

const char* model_name(Model m) { return m == Model::ordered ? "ordered" : "writeback"; }

Trace::Trace(fs::path root, Tree initial, std::vector<TraceOp> ops)
    : root_(std::move(root)), initial_(std::move(initial)), ops_(std::move(ops)) {}

int Trace::initial_inode(const std::string& rel) const {
  auto it = initial_.find(rel);  // Sim numbers the initial tree's inodes in its order
  return it == initial_.end() ? -1 : static_cast<int>(std::distance(initial_.begin(), it));
}

Tree Trace::final_tree() const {
  Point p = at(ops_.size(), Model::ordered);
  return p.materialize(std::vector<int>(p.choices().size(), 0));
}

struct Trace::Point::State {
  std::vector<Inode> inodes;
  std::vector<Unit> units;
  Entries initial_entries;
  std::map<int, std::vector<std::string>> data;  // inode -> its outcomes
};

Trace::Point Trace::at(std::size_t prefix, Model model) const {
  Sim sim(root_, initial_);
  for (std::size_t i = 0; i < prefix && i < ops_.size(); ++i) sim.apply(i, ops_[i]);
  auto st = std::make_shared<Point::State>();
  Point p;
  p.trace_ = this;
  p.model_ = model;
  p.prefix_ = prefix;
  for (std::size_t u = 0; u < sim.units.size(); ++u)
    if (!sim.units[u].durable) p.choices_.push_back({Choice::name, static_cast<int>(u), 2});
  for (std::size_t i = 0; i < sim.inodes.size(); ++i) {
    const Inode& n = sim.inodes[i];
    if (n.type == 'f' && n.data != n.durable) {
      st->data[static_cast<int>(i)] = data_outcomes(n, model);
      p.choices_.push_back({Choice::data, static_cast<int>(i), static_cast<int>(st->data[static_cast<int>(i)].size())});
    }
    if (n.mode != n.durable_mode) p.choices_.push_back({Choice::mode, static_cast<int>(i), 2});
  }
  st->inodes = std::move(sim.inodes);
  st->units = std::move(sim.units);
  st->initial_entries = std::move(sim.initial_entries);
  p.state_ = std::move(st);
  return p;
}

std::uint64_t Trace::Point::combinations() const {
  constexpr std::uint64_t kCap = std::uint64_t{1} << 62;
  std::uint64_t n = 1;
  for (const auto& c : choices_)
    n = n > kCap / static_cast<std::uint64_t>(c.outcomes) ? kCap : n * static_cast<std::uint64_t>(c.outcomes);
  return n;
}

std::vector<int> Trace::Point::nth(std::uint64_t n) const {
  std::vector<int> pick;
  for (const auto& c : choices_) {
    pick.push_back(static_cast<int>(n % static_cast<std::uint64_t>(c.outcomes)));
    n /= static_cast<std::uint64_t>(c.outcomes);
  }
  return pick;
}

std::vector<int> Trace::Point::sample(std::mt19937_64& rng) const {
  std::vector<int> pick;
  for (const auto& c : choices_) pick.push_back(std::uniform_int_distribution<int>(0, c.outcomes - 1)(rng));
  return pick;
}

Tree Trace::Point::materialize(const std::vector<int>& pick) const {
  const State& st = *state_;
  std::set<int> lost_units, lost_modes;
  std::map<int, int> data_pick;
  for (std::size_t i = 0; i < choices_.size(); ++i) {
    const Choice& c = choices_[i];
    if (c.kind == Choice::name && pick[i] == 1) lost_units.insert(c.index);
    if (c.kind == Choice::mode && pick[i] == 1) lost_modes.insert(c.index);
    if (c.kind == Choice::data) data_pick[c.index] = pick[i];
  }
  Entries entries = st.initial_entries;
  for (std::size_t u = 0; u < st.units.size(); ++u) {
    if (lost_units.count(static_cast<int>(u))) continue;
    const Unit& unit = st.units[u];
    // data=ordered: a rename that survives brings the data written to the file before it.
    if (unit.rename && model_ == Model::ordered && data_pick.count(unit.inode)) data_pick[unit.inode] = 0;
    for (const auto& ch : unit.changes) {
      auto& dir = entries[ch.dir];
      if (ch.add)
        dir[ch.name] = ch.inode;
      else if (dir.count(ch.name) && dir[ch.name] == ch.inode)
        dir.erase(ch.name);
    }
  }
  Tree out;
  std::set<int> on_path;
  std::function<void(int, const std::string&)> walk = [&](int ino, const std::string& rel) {
    const Inode& n = st.inodes[static_cast<std::size_t>(ino)];
    Node node;
    node.type = n.type;
    node.mode = lost_modes.count(ino) ? n.durable_mode : n.mode;
    auto d = data_pick.find(ino);
    node.data = d != data_pick.end() ? st.data.at(ino)[static_cast<std::size_t>(d->second)] : n.data;
    node.origin = ino;
    out[rel] = node;
    if (n.type != 'd' || !on_path.insert(ino).second) return;  // a cycle only a lossy subset can make
    for (const auto& [name, child] : entries[ino]) walk(child, rel.empty() ? name : rel + "/" + name);
    on_path.erase(ino);
  };
  walk(0, "");
  return out;
}

const TraceOp& Trace::Point::op_of(const Choice& c) const {
  return trace_->op(state_->units.at(static_cast<std::size_t>(c.index)).op);
}

std::string Trace::Point::describe(const std::vector<int>& pick) const {
  const State& st = *state_;
  std::ostringstream out;
  out << "power cut after op " << prefix_ << " of " << trace_->size() << " (" << model_name(model_) << ")";
  if (prefix_ > 0) {
    const TraceOp& last = trace_->op(prefix_ - 1);
    out << ", the last: " << last.op << " " << last.path << (last.path2.empty() ? "" : " " + last.path2);
  }
  for (std::size_t i = 0; i < choices_.size(); ++i) {
    if (pick[i] == 0) continue;
    const Choice& c = choices_[i];
    if (c.kind == Choice::name) {
      const TraceOp& op = trace_->op(st.units[static_cast<std::size_t>(c.index)].op);
      out << "; lost op " << st.units[static_cast<std::size_t>(c.index)].op << " (" << op.op << " " << op.path
          << (op.path2.empty() ? "" : " " + op.path2) << ")";
    } else if (c.kind == Choice::mode) {
      out << "; lost chmod of " << st.inodes[static_cast<std::size_t>(c.index)].name;
    } else {
      const auto& o = st.data.at(c.index)[static_cast<std::size_t>(pick[i])];
      out << "; data of " << st.inodes[static_cast<std::size_t>(c.index)].name << " reads " << o.size() << " of "
          << st.inodes[static_cast<std::size_t>(c.index)].data.size() << " bytes" << (pick[i] == 1 ? " (lost)" : "");
    }
  }
  return out.str();
}

}  // namespace overlay::test::crash
