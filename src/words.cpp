#include "overlay/words.hpp"

#include "overlay/error.hpp"

namespace overlay {
namespace {

bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\n'; }

// Inside double quotes a backslash only escapes these (POSIX 2.2.3).
bool dq_escapable(char c) { return c == '$' || c == '`' || c == '"' || c == '\\' || c == '\n'; }

}  // namespace

std::vector<std::string> split_words(std::string_view line) {
  std::vector<std::string> words;
  std::string cur;
  bool in_word = false;
  std::size_t i = 0;
  while (i < line.size()) {
    char c = line[i];
    if (is_blank(c)) {
      if (in_word) words.push_back(std::move(cur));
      cur.clear();
      in_word = false;
      ++i;
    } else if (c == '\'') {
      std::size_t end = line.find('\'', i + 1);
      if (end == std::string_view::npos) throw Error("unterminated single quote in: " + std::string(line));
      cur.append(line.substr(i + 1, end - i - 1));
      in_word = true;
      i = end + 1;
    } else if (c == '"') {
      ++i;
      bool closed = false;
      while (i < line.size()) {
        char d = line[i];
        if (d == '"') {
          closed = true;
          ++i;
          break;
        }
        if (d == '\\' && i + 1 < line.size() && dq_escapable(line[i + 1])) {
          if (line[i + 1] != '\n') cur.push_back(line[i + 1]);
          i += 2;
          continue;
        }
        cur.push_back(d);
        ++i;
      }
      if (!closed) throw Error("unterminated double quote in: " + std::string(line));
      in_word = true;
    } else if (c == '\\') {
      if (i + 1 >= line.size()) throw Error("trailing backslash in: " + std::string(line));
      if (line[i + 1] != '\n') {  // backslash-newline is a line continuation
        cur.push_back(line[i + 1]);
        in_word = true;
      }
      i += 2;
    } else {
      cur.push_back(c);
      in_word = true;
      ++i;
    }
  }
  if (in_word) words.push_back(std::move(cur));
  return words;
}

std::string join_words(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& w : argv) {
    if (!out.empty()) out.push_back(' ');
    bool plain = !w.empty() && w.find_first_not_of(
                                   "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                                   "-_./=:,+@%") == std::string::npos;
    if (plain) {
      out += w;
      continue;
    }
    out.push_back('\'');
    for (char c : w) {
      if (c == '\'')
        out += "'\\''";
      else
        out.push_back(c);
    }
    out.push_back('\'');
  }
  return out;
}

}  // namespace overlay
