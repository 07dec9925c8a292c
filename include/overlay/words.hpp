#pragma once
// A POSIX-shell-style word splitter for --build-cmd: quotes and backslashes as sh treats them,
// no expansion of any kind ($VAR, globs, ~ stay literal) and no operators (; | && are words).
#include <string>
#include <string_view>
#include <vector>

namespace overlay {

// Splits `line` into words. Throws Error on an unterminated quote or a trailing backslash.
std::vector<std::string> split_words(std::string_view line);

// Quotes argv so that split_words (and sh) gives the same words back; for messages and logs.
std::string join_words(const std::vector<std::string>& argv);

}  // namespace overlay
