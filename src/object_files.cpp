#include "overlay/object_files.hpp"

#include <elf.h>

#include <cstring>

#include "overlay/file_ops.hpp"

namespace overlay {
namespace {

// A T at `off` in `bytes`, or nullopt when it would read past the end.
template <typename T>
std::optional<T> at(const std::string& bytes, std::uint64_t off) {
  if (off > bytes.size() || bytes.size() - off < sizeof(T)) return std::nullopt;
  T v;
  std::memcpy(&v, bytes.data() + off, sizeof(T));
  return v;
}

}  // namespace

std::optional<std::vector<std::string>> object_source_files(DiskReader& disk, const fs::path& p) {
  FileInfo fi = disk.info(p, Follow::no);
  if (fi.type != FileType::regular || fi.size > kMaxObjectBytes) return std::nullopt;
  std::string b;
  try {
    b = read_small_file(disk, p, kMaxObjectBytes);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  auto eh = at<Elf64_Ehdr>(b, 0);
  if (!eh || std::memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 || eh->e_ident[EI_CLASS] != ELFCLASS64 ||
      eh->e_type != ET_REL || eh->e_shentsize != sizeof(Elf64_Shdr))
    return std::nullopt;
  for (std::uint16_t i = 0; i < eh->e_shnum; ++i) {
    auto sh = at<Elf64_Shdr>(b, eh->e_shoff + std::uint64_t{i} * sizeof(Elf64_Shdr));
    if (!sh) return std::nullopt;
    if (sh->sh_type != SHT_SYMTAB || sh->sh_entsize != sizeof(Elf64_Sym)) continue;
    auto strtab = at<Elf64_Shdr>(b, eh->e_shoff + std::uint64_t{sh->sh_link} * sizeof(Elf64_Shdr));
    if (!strtab || strtab->sh_offset > b.size() || b.size() - strtab->sh_offset < strtab->sh_size) return std::nullopt;
    std::vector<std::string> files;
    for (std::uint64_t off = sh->sh_offset; off + sizeof(Elf64_Sym) <= sh->sh_offset + sh->sh_size;
         off += sizeof(Elf64_Sym)) {
      auto sym = at<Elf64_Sym>(b, off);
      if (!sym) return std::nullopt;
      if (ELF64_ST_TYPE(sym->st_info) != STT_FILE || sym->st_name >= strtab->sh_size) continue;
      const char* name = b.data() + strtab->sh_offset + sym->st_name;
      files.emplace_back(name, strnlen(name, strtab->sh_size - sym->st_name));
    }
    return files;
  }
  return std::nullopt;
}

bool is_thin_archive(DiskReader& disk, const fs::path& p) {
  char head[8] = {};
  try {
    auto in = disk.open_read(p);
    if (in->read(head, sizeof head) != sizeof head) return false;
  } catch (const std::exception&) {
    return false;
  }
  return std::string(head, sizeof head) == "!<thin>\n";
}

}  // namespace overlay
